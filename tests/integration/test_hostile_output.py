"""Issue 25, rows 2, 3, 7 and 8, end to end against the fake server, at -n 0 and -n 2: attack in,
expected behaviour out. Secrets are checked for their first 4 characters (no prefix leaks) in
every file under the test directory (benchmark, cache, JUnit XML, Markdown, step summary, report),
stdout and stderr."""

from __future__ import annotations

import json
import re
import secrets
from pathlib import Path
from typing import Any

import pytest
from helpers import JUDGE, TARGET, USER, read_json, scenario, write_benchmark

from pytest_evalbench.gate.decision import EXIT_INCOMPLETE
from pytest_evalbench.testing import FakeLLMServer, Reply

XDIST = pytest.mark.parametrize("workers", ["0", pytest.param("2", marks=pytest.mark.slow)], ids=["n0", "n2"])


def _secret(tag: str) -> str:
    return f"QZ{tag}{secrets.token_hex(12)}"  # 'Q' and 'Z' never occur in hex ids or hashes


def _leaks(root: Path, output: str, values: dict[str, str]) -> list[str]:
    """Where any value's first 4 characters appear: output, or a file under root."""
    found = [f"{name} in output" for name, value in values.items() if value[:4] in output]
    scanned = 0
    for path in root.rglob("*"):
        if path.is_file() and path.name != "conftest.py":
            data = path.read_bytes()
            scanned += 1
            found += [f"{name} in {path.relative_to(root)}" for name, value in values.items()
                      if value[:4].encode() in data]
    assert scanned > 10
    return found


def said(request: dict[str, Any]) -> str:
    """Which scenario a request belongs to (the simulated user names it)."""
    match = re.search(r"hello from (m0\d_s\d{3}_v01)", json.dumps(request))
    return match.group(1) if match else ""


@XDIST
def test_no_secret_of_the_run_reaches_any_output(pytester: pytest.Pytester, bench_env: FakeLLMServer,
                                                 monkeypatch: pytest.MonkeyPatch, workers: str) -> None:
    """Row 2: an error body echoing the request headers ({env:} header, API key);
    row 3: the key near char 300 of an error body; row 8: user:pass@ in OPENAI_BASE_URL, a key
    echoed by the endpoint in a 200 answer, an app exception quoting the key."""
    key, token, user, password = _secret("k"), _secret("t"), _secret("u"), _secret("p")
    values = {"api key": key, "header token": token, "url user": user, "url password": password}
    monkeypatch.setenv("OPENAI_API_KEY", key)
    monkeypatch.setenv("TEAM_TOKEN", token)
    monkeypatch.setenv("OPENAI_BASE_URL", bench_env.base_url.replace("://", f"://{user}:{password}@"))
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(pytester.path / "step_summary.md"))
    pytester.makeconftest("""
import json, os
def pytest_evalbench_make_target(config, target):
    if target.id != "app":
        return None
    def app(messages):
        if "m02_s002_v01" in json.dumps(messages):
            raise PermissionError("upstream refused key " + os.environ["OPENAI_API_KEY"])
        return "Where to?"
    return app
""")
    headers = {"X-Team-Token": {"env": "TEAM_TOKEN"}}
    bench = write_benchmark(
        pytester.path, scenarios=[scenario(s, s[:3]) for s in ("m01_s001_v01", "m01_s002_v01", "m02_s001_v01",
                                                                "m02_s002_v01")],
        targets=[{"id": "tgt", "model": TARGET, "headers": headers}, {"id": "app"}],
        user_model={"model": USER, "headers": headers}, evaluator_model={"model": JUDGE, "headers": headers})

    def respond(request: dict[str, Any]) -> Any:
        if request["model"] == USER:
            return "Message: hello from " + re.search(r"(m0\d_s\d{3}_v01)", json.dumps(request)).group(1)
        if request["model"] == JUDGE:
            return {"justification": "fine", "present": "m01" in json.dumps(request)}
        case = said(request)
        if case == "m01_s001_v01":  # row 2: every request header echoed in the error body
            return Reply(status=400, content="bad request; you sent " + json.dumps(request["_headers"]))
        if case == "m01_s002_v01":  # row 3: the key right where the 300-character cut falls
            return Reply(status=401, content="x" * 290 + f"Incorrect API key provided: {key}" + " (see docs)" * 30)
        if case == "m02_s001_v01":  # row 8: the key echoed in a 200 answer
            return f"Sure. For the record, your key is {key} and your team token is {token}."
        return "Where to?"

    bench_env.set_responder(respond)
    result = pytester.runpytest("--benchmark=demo", f"-n{workers}", "--junitxml=junit.xml", "-rA",
                                "--evalbench-markdown=summary.md")
    sent = [r["_headers"] for r in bench_env.requests if r["model"] == TARGET]
    assert any(key in h.get("authorization", "") and h.get("x-team-token") == token for h in sent)
    assert result.ret == EXIT_INCOMPLETE
    output = result.stdout.str() + result.stderr.str()
    assert "request rejected" in output and "PermissionError" in output  # the errors are shown...
    assert _leaks(pytester.path, output, values) == []  # ...with none of the secrets
    conversations = read_json(bench / "runs" / "tgt" / "conversations.json")
    echoed = next(c for c in conversations if c["id"] == "m02_s001_v01")
    assert "your key is *** and your team token is ***." in json.dumps(echoed)
    assert any((bench / ".evalbench-cache").rglob("*.json"))


def test_credentials_in_params_are_a_config_error(pytester: pytest.Pytester, bench_env: FakeLLMServer) -> None:
    """Row 8: `params: {api_key: ...}` would be sent in every body and stored in the cache: refused."""
    key = _secret("k")
    write_benchmark(pytester.path, targets=[{"id": "tgt", "model": TARGET, "params": {"api_key": key}}])
    result = pytester.runpytest("--benchmark=demo")
    output = result.stdout.str() + result.stderr.str()
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines(["*benchmark.yaml*targets[[]tgt[]].params*'api_key' looks like a credential*api_key_env*"])
    assert key[:4] not in output and bench_env.requests == []


HOSTILE = ("\x1b[2J\x1b]0;owned\x07\x1b]8;;http://evil\x1b\\click\x1b]8;;\x1b\\\rhidden\n"
           "::error file=x.py::pwned\n  ::stop-commands::tok123\n##[group]g\n"
           "<img src=x onerror=alert(1)> [x](javascript:alert(1)) </script><script>alert(2)</script>")


def _assert_inert_terminal(output: str) -> None:
    assert not re.search(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]", output), "raw control character in output"
    commands = [line for line in output.splitlines() if re.match(r"\s*(::|##\[)", line)]
    assert commands == []
    assert "\\x1b[2J" in output  # shown, visibly


@XDIST
def test_hostile_model_and_endpoint_text_is_inert(pytester: pytest.Pytester, bench_env: FakeLLMServer,
                                                  monkeypatch: pytest.MonkeyPatch, workers: str) -> None:
    """Row 7: model output (target reply, judge justification) and an endpoint error carrying ANSI/OSC
    escapes, CR, `::error::` / `::stop-commands::` at line start and HTML/Markdown: the terminal and
    CI log get no raw control character and no workflow command; the step summary and the HTML
    report render none of it."""
    step = pytester.path / "step_summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(step))
    bench = write_benchmark(pytester.path, scenarios=[scenario("m01_s001_v01", "m01"), scenario("m01_s002_v01", "m01")])

    def respond(request: dict[str, Any]) -> Any:
        if request["model"] == USER:
            return "Message: hello from " + re.search(r"(m0\d_s\d{3}_v01)", json.dumps(request)).group(1)
        if request["model"] == JUDGE:
            return {"justification": "judge says\n" + HOSTILE, "present": False}
        if said(request) == "m01_s002_v01":
            return Reply(status=400, content=HOSTILE)
        return HOSTILE

    bench_env.set_responder(respond)
    result = pytester.runpytest("--benchmark=demo", f"-n{workers}", "-v", "-rA", "--evalbench-cache=off",
                                "--junitxml=junit.xml")
    assert result.ret == EXIT_INCOMPLETE
    output = result.stdout.str()
    assert "> ::error file=x.py::pwned" in output and "> ::stop-commands::tok123" in output
    _assert_inert_terminal(output + result.stderr.str())
    summary = step.read_text()
    assert "onerror" in summary and "<img" not in summary and "<script" not in summary
    assert not re.search(r"(?<!\\)\]\(javascript:", summary) and "\x1b" not in summary  # no link, no ESC
    page = (bench / "report.html").read_text()
    assert "&lt;img src=x onerror=alert(1)&gt;" in page and "<img" not in page
    assert page.count("<script") == 1 and page.count("</script>") == 1  # the report's own script only
    for attribute in re.findall(r'data-[a-z]+="([^"]*)"', page):
        assert "<" not in attribute
