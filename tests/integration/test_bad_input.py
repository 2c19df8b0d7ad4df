"""Malformed and hostile input, and what must be right before the first LLM call.

Every case here ends in one line naming file, row and field (a collection error, exit 2, or a
usage error, exit 4), never a traceback, and with zero requests to the endpoint.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from helpers import JUDGE, TARGET, USER, judge_says, read_json, scenario, script, write_benchmark

from conftest import SECRET
from pytest_evalbench.base import inputs as input_json
from pytest_evalbench.kinds.dataset.models import DatasetError, load_cases
from pytest_evalbench.testing import FakeLLMServer, by_model

HEADER_SECRET = "hdr-SECRET-9f8e7d6c5b4a"


def spec_text(**overrides: Any) -> str:
    """The benchmark.yaml `write_benchmark` writes, as text (to append raw YAML to)."""
    data: dict[str, Any] = {"name": "demo", "metrics": [{"id": "m01", "name": "a", "type": "positive",
                                                          "definition": "d"}],
                            "generation": {"turns": 2, "num_samples": 1},
                            "targets": [{"id": "tgt", "model": TARGET}],
                            "user_model": {"model": USER}, "evaluator_model": {"model": JUDGE}}
    data.update(overrides)
    return yaml.safe_dump(data, sort_keys=False)


def collection_error(pytester: pytest.Pytester, server: FakeLLMServer, expected: str,
                     *args: str) -> pytest.RunResult:
    result = pytester.runpytest("--benchmark=demo", *args)
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines([expected])
    result.stdout.no_fnmatch_line("*Traceback*")
    assert server.requests == []
    return result


def usage_error(pytester: pytest.Pytester, server: FakeLLMServer, expected: str, *args: str) -> str:
    result = pytester.runpytest("--benchmark=demo", *args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([expected])
    output = result.stdout.str() + result.stderr.str()
    assert "Traceback" not in output
    assert server.requests == []
    return output


# --------------------------------------------------------------------------- malformed config


@pytest.mark.parametrize(("text", "expected"), [
    (spec_text() + "targets:\n  - id: other\n    model: other-model\n",
     "*benchmark.yaml:17, field 'targets': duplicate key 'targets' (first on line 10; YAML would keep only "
     "the last value silently)*"),
    (spec_text().replace("  turns: 2\n", "  turns: 2\n  turns: 3\n"),
     "*benchmark.yaml:9, field 'generation.turns': duplicate key 'turns' (first on line 8; *"),
    (spec_text(generation={"turns": 2, "num_samples": True}),
     "*field 'generation.num_samples': expected a number, not true/false*"),
    (spec_text(targets=[{"id": "t" * 300, "model": TARGET}]),
     "*field 'targets.1.id'*must be 1-100 letters, digits*"),
    (spec_text(targets=[{"id": "a b", "model": TARGET}]), "*field 'targets.1.id'*'a b' must be*"),
    (spec_text(targets=[{"id": "NUL", "model": TARGET}]), "*field 'targets[[]NUL[]].id'*reserved device name*"),
    (spec_text(metrics=[{"id": "m01[x]", "name": "a", "type": "positive", "definition": "d"}]),
     "*field 'metrics.1.id'*metric id 'm01?x?' must be*"),
    (spec_text(pricing={"m": {"input_per_million": True, "output_per_million": 1}}),
     "*field 'pricing.m.input_per_million'*not true/false*"),
    (spec_text(user_model={"model": USER, "headers": {"Bad Header": "x"}}),
     "*field 'user_model.headers'*'Bad Header' is not an HTTP header name*"),
    (spec_text(user_model={"model": USER, "api_key_env": "not a name"}),
     "*field 'user_model.api_key_env'*not an environment variable name*"),
    (spec_text(targets=[{"id": "t", "model": TARGET, "base_url": "localhost:8000/v1"}]),
     "*field 'targets[[]t[]].base_url'*'localhost:8000/v1' is not an http:// or https:// URL with a host*"),
    (spec_text(user_model={"model": USER, "headers": {"X-Team": "caf\u00e9 \u2615"}}),
     "*field 'user_model.headers'*header 'X-Team': the value contains characters an HTTP header cannot carry*"),
], ids=["duplicate-top-level-key", "duplicate-nested-key", "bool-as-int", "300-char-target-id", "unsafe-target-id",
        "windows-device-id", "unsafe-metric-id", "bool-as-price", "bad-header-name", "bad-env-name",
        "base-url-without-scheme", "header-value-not-latin-1"])
def test_malformed_benchmark_yaml_is_one_line(pytester: pytest.Pytester, bench_env: FakeLLMServer, text: str,
                                              expected: str) -> None:
    bench = write_benchmark(pytester.path)
    (bench / "benchmark.yaml").write_text(text)
    collection_error(pytester, bench_env, expected)


@pytest.mark.parametrize(("rows", "expected"), [
    ([scenario("m01_s001_v01", "m01", landmarks=[{"turn": 3, "instruction": "late"}])],
     "*scenarios.json, row 1 (id m01_s001_v01), field 'landmarks.1.turn': landmark turn 3 is beyond "
     "generation.turns (2)*never fire*"),
    ([scenario("m01_s001_v01", "m01", landmarks=[{"turn": True, "instruction": "x"}])],
     "*row 1 (id m01_s001_v01), field 'landmarks.1.turn'*not true/false*"),
    ([scenario("m01_s001_v01", "m01"), scenario("x" * 101, "m01")], "*row 2 (id xxx*), field 'id'*must be 1-100*"),
    ([scenario("m01/../../x", "m01")], "*row 1 (id m01/../../x), field 'id'*must be*"),
], ids=["landmark-beyond-turns", "bool-landmark-turn", "101-char-scenario-id", "path-in-scenario-id"])
def test_malformed_scenarios_are_one_line(pytester: pytest.Pytester, bench_env: FakeLLMServer,
                                          rows: list[dict[str, Any]], expected: str) -> None:
    write_benchmark(pytester.path, scenarios=rows)
    collection_error(pytester, bench_env, expected)


def test_case_ids_are_bounded_and_safe(tmp_path: Path) -> None:
    case = {"case_id": "c" * 101, "agent_name": "a", "question": "q", "model_answer": "x",
            "required_evals": ["FluencyExplain"], "threshold_profile": "p"}
    path = tmp_path / "cases.jsonl"
    for case_id, message in (("c" * 101, "must be 1-100"), ("a/b", "must be"), ("x" * 100, None)):
        path.write_text(json.dumps({**case, "case_id": case_id}) + "\n")
        if message is None:
            assert load_cases(path)[0][1].case_id == case_id
            continue
        with pytest.raises(DatasetError, match=message) as info:
            load_cases(path)
        assert (info.value.line, info.value.field) == (1, "case_id")


def test_dataset_files_get_the_same_file_checks(tmp_path: Path) -> None:
    case = {"case_id": "c1", "agent_name": "a", "question": "q", "model_answer": "x",
            "required_evals": ["FluencyExplain"], "threshold_profile": "p"}
    path = tmp_path / "cases.jsonl"
    for data, line, message in ((json.dumps(case).encode("utf-16"), None, "file is UTF-16 encoded"),
                                ((json.dumps(case) + "\n" + "[" * 3000 + "]" * 3000 + "\n").encode(), 2,
                                 "nested deeper than 64 levels"),
                                (b"\xef\xbb\xbf" + json.dumps(case).encode() + b"\n\xff\n", 2, r"not UTF-8 \(byte 0xff\)")):
        path.write_bytes(data)
        with pytest.raises(DatasetError, match=message) as info:
            load_cases(path)
        assert info.value.line == line


@pytest.mark.parametrize(("thresholds", "expected"), [
    ({"min_positive_pass_rat": 0.5}, "*benchmark.yaml:*, field 'thresholds.min_positive_pass_rat': unknown key*"),
    ({"min_positive_pass_rate": True}, "*field 'thresholds.min_positive_pass_rate'*not true/false*"),
    ({"min_positive_pass_rate": 1.5}, "*field 'thresholds.min_positive_pass_rate': Input should be less than or equal to 1*"),
], ids=["typo", "bool", "out-of-range"])
def test_threshold_values_are_benchmark_yaml_errors(pytester: pytest.Pytester, bench_env: FakeLLMServer,
                                                    thresholds: dict[str, Any], expected: str) -> None:
    """`thresholds:` is part of the validated spec: a bad value stops collection, before any call."""
    write_benchmark(pytester.path, thresholds=thresholds)
    bench_env.set_responder(script(True))
    collection_error(pytester, bench_env, expected)


@pytest.mark.parametrize(("thresholds", "expected"), [
    ({"per_metric": {"m09": {"min_pass_rate": 0.5}}}, "*field 'per_metric.m09': unknown metric id 'm09'; metrics: m01*"),
    ({"per_target": {"tgtt": {"max_drop": 0.1}}}, "*field 'per_target.tgtt': unknown target id 'tgtt'; targets: tgt*"),
], ids=["unknown-metric", "unknown-target"])
def test_threshold_problems_stop_the_run_before_any_call(pytester: pytest.Pytester, bench_env: FakeLLMServer,
                                                          thresholds: dict[str, Any], expected: str) -> None:
    write_benchmark(pytester.path, thresholds=thresholds)
    bench_env.set_responder(script(True))
    usage_error(pytester, bench_env, expected)


# --------------------------------------------------------------------------- hostile files


def test_deep_nesting_is_one_line(pytester: pytest.Pytester, bench_env: FakeLLMServer) -> None:
    bench = write_benchmark(pytester.path)
    (bench / "scenarios.json").write_text("[" * 5000 + "]" * 5000)
    collection_error(pytester, bench_env, "*scenarios.json: nested deeper than 64 levels*")
    (bench / "scenarios.json").write_text(json.dumps([scenario("m01_s001_v01", "m01")]))
    line = len(spec_text().splitlines()) + 1
    (bench / "benchmark.yaml").write_text(spec_text() + "description: " + "[" * 5000 + "]" * 5000 + "\n")
    collection_error(pytester, bench_env, f"*benchmark.yaml:{line}: nested deeper than 64 levels*")
    (bench / "benchmark.yaml").write_text(spec_text() + "description:\n" + "".join(
        "  " * i + f"k{i}:\n" for i in range(100)) + "  " * 100 + "x: 1\n")
    collection_error(pytester, bench_env, "*benchmark.yaml:*nested deeper than 64 levels*")


def test_yaml_alias_bomb_is_refused_quickly(pytester: pytest.Pytester, bench_env: FakeLLMServer) -> None:
    bench = write_benchmark(pytester.path)
    bomb = ['a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    bomb += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, 9)]
    text = spec_text().replace("targets:\n", "x-anchors:\n" + "".join(f"  {line}\n" for line in bomb) + "targets:\n")
    text = text.replace(f"- id: tgt\n  model: {TARGET}\n", f"- id: tgt\n  model: {TARGET}\n  params: {{bomb: *a8}}\n")
    (bench / "benchmark.yaml").write_text(text)
    started = time.monotonic()
    collection_error(pytester, bench_env, "*benchmark.yaml: YAML expands to more than 200000 values once aliases "
                                          "are followed (an alias bomb?)*")
    assert time.monotonic() - started < 10


def test_recursive_yaml_alias_is_one_line(pytester: pytest.Pytester, bench_env: FakeLLMServer) -> None:
    bench = write_benchmark(pytester.path)
    (bench / "benchmark.yaml").write_text(spec_text() + "demographics: &d {age: [*d]}\n")
    collection_error(pytester, bench_env, "*benchmark.yaml:*recursive YAML alias*")


@pytest.mark.parametrize(("encode", "expected"), [
    (lambda t: t.encode("utf-16"), "*file is UTF-16 encoded; save it as UTF-8*"),
    (lambda t: t.encode("utf-16-le"), "*file looks UTF-16 encoded (NUL bytes); save it as UTF-8*"),
    (lambda t: t.encode("utf-32"), "*file is UTF-32 encoded; save it as UTF-8*"),
    (lambda t: ("#\u00e9\n" + t).encode("latin-1"),
     "*scenarios.json:1: not UTF-8 (byte 0xe9); save the file as UTF-8*"),
], ids=["utf-16-bom", "utf-16-no-bom", "utf-32", "latin-1"])
def test_non_utf8_files_are_named_as_such(pytester: pytest.Pytester, bench_env: FakeLLMServer, encode: Any,
                                          expected: str) -> None:
    bench = write_benchmark(pytester.path)
    path = bench / "scenarios.json"
    path.write_bytes(encode(path.read_text()))
    collection_error(pytester, bench_env, expected)
    path.write_text(json.dumps([scenario("m01_s001_v01", "m01")]))
    (bench / "benchmark.yaml").write_bytes(encode(spec_text()).replace(b"scenarios.json", b"benchmark.yaml"))
    collection_error(pytester, bench_env, expected.replace("scenarios.json", "benchmark.yaml"))


def test_utf8_with_bom_is_accepted(pytester: pytest.Pytester, bench_env: FakeLLMServer) -> None:
    bench = write_benchmark(pytester.path, scenarios=[scenario("m01_s001_v01", "m01")])
    for name in ("benchmark.yaml", "scenarios.json"):
        (bench / name).write_bytes(b"\xef\xbb\xbf" + (bench / name).read_bytes())
    bench_env.set_responder(script(True))
    pytester.runpytest("--benchmark=demo").assert_outcomes(passed=1)


def test_oversized_input_is_refused_before_reading(pytester: pytest.Pytester, bench_env: FakeLLMServer,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    bench = write_benchmark(pytester.path, scenarios=[scenario("m01_s001_v01", "m01", persona="p" * 4096)])
    monkeypatch.setattr(input_json, "MAX_INPUT_BYTES", 4096)
    collection_error(pytester, bench_env, "*scenarios.json: file is larger than 4,096 bytes, the limit of input files*")
    assert (bench / "scenarios.json").stat().st_size > input_json.MAX_INPUT_BYTES


@pytest.mark.parametrize("page", ["docs/formats.md", "docs/guides/security.md"])
def test_default_size_cap_is_documented(page: str) -> None:
    text = (Path(__file__).parents[2] / page).read_text(encoding="utf-8")
    assert f"{input_json.MAX_INPUT_BYTES // 2**20} MiB" in text and f"{input_json.MAX_DEPTH} levels" in text


# --------------------------------------------------------------------------- command-line ids


@pytest.mark.parametrize(("value", "expected"), [
    ("../escape=gpt-4o", "*--evalbench-target='../escape=gpt-4o': target id '../escape' must be*"),
    ("t" * 300 + "=gpt-4o", "*--evalbench-target='ttt*': target id 'ttt*'… must be 1-100*"),
    ("x" * 300, "*target id 'xxx*'… must be 1-100*"),
    ("fine=", "*--evalbench-target='fine=': no model after '='*"),
], ids=["path", "300-char-id", "300-char-model", "empty-model"])
def test_bad_target_option_is_a_usage_error(pytester: pytest.Pytester, bench_env: FakeLLMServer, value: str,
                                            expected: str) -> None:
    write_benchmark(pytester.path)
    usage_error(pytester, bench_env, expected, f"--evalbench-target={value}")


def test_target_option_model_names_become_safe_ids(pytester: pytest.Pytester, bench_env: FakeLLMServer) -> None:
    bench = write_benchmark(pytester.path, scenarios=[scenario("m01_s001_v01", "m01")])
    bench_env.set_responder(by_model({USER: lambda r: "Message: hi", "org/model:8b": lambda r: "Sure?",
                                      JUDGE: judge_says(True)}))
    result = pytester.runpytest("--benchmark=demo", "--evalbench-target=org/model:8b")
    result.assert_outcomes(passed=1)
    assert read_json(bench / "runs" / "org-model-8b" / "scores.json")[0]["target_model"] == "org-model-8b"


# --------------------------------------------------------------------------- preflight: roles and credentials


@pytest.mark.parametrize("xdist", [[], ["-n", "2"]], ids=["no-xdist", "xdist"])
def test_unset_api_key_env_is_named_once_before_any_call(pytester: pytest.Pytester, bench_env: FakeLLMServer,
                                                         monkeypatch: pytest.MonkeyPatch, xdist: list[str]) -> None:
    monkeypatch.delenv("JUDGE_KEY", raising=False)
    rows = [scenario(f"m01_s{i:03d}_v01", "m01") for i in range(1, 21)]
    write_benchmark(pytester.path, scenarios=rows, evaluator_model={"model": JUDGE, "api_key_env": "JUDGE_KEY"})
    bench_env.set_responder(script(True))
    output = usage_error(pytester, bench_env, "ERROR: environment variable not set: JUDGE_KEY (needed by "
                                              "evaluator_model). Set it, or replay a recorded cache with "
                                              "--evalbench-cache=replay", *xdist)
    assert output.count("JUDGE_KEY") == 1


@pytest.mark.parametrize(("variable", "value", "expected"), [
    ("OPENAI_API_KEY", "sk-pasted-with-its-newline\n",
     "ERROR: environment variable OPENAI_API_KEY contains a line break, so it cannot be sent in an HTTP header "
     "(needed by user_model, evaluator_model, target 'tgt')"),
    ("OPENAI_BASE_URL", "localhost:8000/v1",
     "ERROR: OPENAI_BASE_URL: 'localhost:8000/v1' is not an http:// or https:// URL with a host*"),
], ids=["key-with-newline", "base-url-without-scheme"])
def test_unusable_environment_values_are_usage_errors(pytester: pytest.Pytester, bench_env: FakeLLMServer,
                                                      monkeypatch: pytest.MonkeyPatch, variable: str, value: str,
                                                      expected: str) -> None:
    """Caught before any call, named by their variable; a key is never shown."""
    monkeypatch.setenv(variable, value)
    write_benchmark(pytester.path)
    output = usage_error(pytester, bench_env, expected)
    assert "sk-pasted" not in output


def test_base_url_option_without_scheme_is_a_usage_error(pytester: pytest.Pytester, bench_env: FakeLLMServer) -> None:
    write_benchmark(pytester.path)
    usage_error(pytester, bench_env, "*--evalbench-base-url: *'localhost:8000' is not an http:// or https:// URL*",
                "--evalbench-base-url=localhost:8000")


def test_openai_api_without_key_is_a_usage_error(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch,
                                                 fake_llm: FakeLLMServer) -> None:
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "PYTEST_ADDOPTS"):
        monkeypatch.delenv(name, raising=False)
    write_benchmark(pytester.path)
    usage_error(pytester, fake_llm, "*environment variable not set: OPENAI_API_KEY (needed by user_model, "
                                    "evaluator_model, target 'tgt')*")


@pytest.mark.parametrize(("missing", "option"), [("user_model", "--evalbench-user-model"),
                                                 ("evaluator_model", "--evalbench-judge-model")])
def test_missing_role_is_a_usage_error_naming_its_option(pytester: pytest.Pytester, bench_env: FakeLLMServer,
                                                         missing: str, option: str) -> None:
    bench = write_benchmark(pytester.path, scenarios=[scenario("m01_s001_v01", "m01")])
    data = yaml.safe_load((bench / "benchmark.yaml").read_text())
    del data[missing]
    (bench / "benchmark.yaml").write_text(yaml.safe_dump(data))
    bench_env.set_responder(script(True))
    usage_error(pytester, bench_env, f"*this scenarios benchmark needs `{missing}` and it is missing: add "
                                     f"`{missing}:` to benchmark.yaml or pass {option}=MODEL*", "-n", "2")
    model = USER if missing == "user_model" else JUDGE
    pytester.runpytest("--benchmark=demo", f"{option}={model}").assert_outcomes(passed=1)


def test_replay_needs_no_key(pytester: pytest.Pytester, bench_env: FakeLLMServer,
                             monkeypatch: pytest.MonkeyPatch) -> None:
    write_benchmark(pytester.path, scenarios=[scenario("m01_s001_v01", "m01")],
                    user_model={"model": USER, "api_key_env": "USER_KEY"})
    monkeypatch.setenv("USER_KEY", SECRET)
    bench_env.set_responder(script(True))
    pytester.runpytest("--benchmark=demo").assert_outcomes(passed=1)
    recorded = len(bench_env.requests)
    for name in ("USER_KEY", "OPENAI_API_KEY"):  # the base URL stays: it is part of every cache key
        monkeypatch.delenv(name)
    pytester.runpytest("--benchmark=demo", "--evalbench-cache=replay").assert_outcomes(passed=1)
    assert len(bench_env.requests) == recorded


def test_missing_baseline_is_checked_up_front(pytester: pytest.Pytester, bench_env: FakeLLMServer) -> None:
    write_benchmark(pytester.path)
    bench_env.set_responder(script(True))
    usage_error(pytester, bench_env, "*nowhere.json: baseline file not found*", "--evalbench-compare=nowhere.json")
    (pytester.path / "bad.json").write_text("{}")
    usage_error(pytester, bench_env, "*bad.json: not an evalbench baseline file*", "--evalbench-compare=bad.json")
    usage_error(pytester, bench_env, "*base.json: directory *no-such-dir does not exist*",
                "--evalbench-save-baseline=no-such-dir/base.json")


# --------------------------------------------------------------------------- headers


def test_role_headers_are_sent_and_never_written(pytester: pytest.Pytester, bench_env: FakeLLMServer,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HDR_SECRET", HEADER_SECRET)
    headers = {"User-Agent": "evalbench-test/1", "X-Team-Key": {"env": "HDR_SECRET"}}
    bench = write_benchmark(pytester.path, scenarios=[scenario("m01_s001_v01", "m01"), scenario("m01_s001_v02", "m01")],
                            targets=[{"id": "tgt", "model": TARGET, "headers": headers}],
                            user_model={"model": USER, "headers": {"X-Role": "user"}})
    bench_env.set_responder(script(True))
    result = pytester.runpytest("--benchmark=demo", "--junitxml=junit.xml", "--evalbench-html=report.html",
                                "--evalbench-save-baseline", "-rA", "-v")
    result.assert_outcomes(passed=2)
    by_model: dict[str, list[dict[str, str]]] = {}
    for request in bench_env.requests:
        by_model.setdefault(request["model"], []).append(request["_headers"])
    assert all(h["x-team-key"] == HEADER_SECRET and h["user-agent"] == "evalbench-test/1" for h in by_model[TARGET])
    assert all(h["x-role"] == "user" and "x-team-key" not in h for h in by_model[USER])
    assert all("x-role" not in h and "x-team-key" not in h for h in by_model[JUDGE])
    assert len(by_model[TARGET]) >= 2
    output = result.stdout.str() + result.stderr.str()
    assert HEADER_SECRET not in output
    scanned = 0
    for path in Path(pytester.path).rglob("*"):
        if path.is_file():
            assert HEADER_SECRET.encode() not in path.read_bytes(), path
            scanned += 1
    assert scanned > 10 and (bench / ".evalbench-cache").is_dir()
    # the secret header value is not part of the cache key: a rotated value replays every answer
    monkeypatch.setenv("HDR_SECRET", "rotated-value")
    sent = len(bench_env.requests)
    pytester.runpytest("--benchmark=demo").assert_outcomes(passed=2)
    assert len(bench_env.requests) == sent


def test_header_from_unset_variable_is_a_usage_error(pytester: pytest.Pytester, bench_env: FakeLLMServer,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HDR_SECRET", raising=False)
    write_benchmark(pytester.path, targets=[{"id": "tgt", "model": TARGET, "headers": {"X-K": {"env": "HDR_SECRET"}}}])
    bench_env.set_responder(script(True))
    usage_error(pytester, bench_env, "*environment variable not set: HDR_SECRET (needed by target 'tgt')*")


def test_endpoint_repr_hides_key_and_headers() -> None:
    from pytest_evalbench.formats.spec import ModelConfig
    from pytest_evalbench.kinds.run import RunSettings, resolve_endpoint

    config = ModelConfig(model="m", headers={"X-K": {"env": "HDR"}, "User-Agent": "ua"})
    endpoint = resolve_endpoint(config, RunSettings(benchmark="b"), {"HDR": HEADER_SECRET, "OPENAI_API_KEY": SECRET})
    assert endpoint.headers == {"X-K": HEADER_SECRET, "User-Agent": "ua"} and endpoint.missing_env == ()
    assert HEADER_SECRET not in repr(endpoint) and SECRET not in repr(endpoint)
    assert HEADER_SECRET not in repr(config)


def test_authoring_base_url_without_scheme_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from pytest_evalbench.__main__ import main

    with pytest.raises(SystemExit) as exited:
        main(["gen-metrics", "demo", "--root", str(tmp_path), "--base-url", "localhost:8000/v1"])
    assert exited.value.code == 2
    assert "'localhost:8000/v1' is not an http:// or https:// URL with a host" in capsys.readouterr().err


# --------------------------------------------------------------------------- hostile values (issue 25)

BIG = "9" * 5000


def scenarios_text(rows: list[dict[str, Any]], **raw: str) -> str:
    """scenarios.json text of `rows` with each `"@NAME@"` string replaced by the raw JSON `raw[NAME]`."""
    text = json.dumps(rows)  # ensure_ascii: a lone surrogate is written as its escape, "\ud800"
    for name, value in raw.items():
        text = text.replace(f'"@{name}@"', value)
    return text


@pytest.mark.parametrize(("text", "expected"), [
    (scenarios_text([scenario("m01_s001_v01", "m01", landmarks=[{"turn": "@n@", "instruction": "x"}])], n=BIG),
     "*scenarios.json, row 1 (id m01_s001_v01), field 'landmarks.1.turn': number 99999999999999999999… "
     "(5000 digits) is out of range*"),
    (scenarios_text([scenario("m01_s001_v01", "m01"), scenario("m01_s001_v02", "m01", persona="a \ud800 b")]),
     "*scenarios.json, row 2 (id m01_s001_v02), field 'persona': contains a lone surrogate (\\ud800)*"),
    (scenarios_text([scenario("m01_s001_v01", "m01", extra={"\udc01": 1})]),
     "*scenarios.json, row 1 (id m01_s001_v01), field 'extra.\\udc01': key contains a lone surrogate (\\udc01)*"),
    (scenarios_text([scenario("m01_s001_v01", "m01", weight="@n@")], n="1e999"),
     "*row 1 (id m01_s001_v01), field 'weight': number 1e999 is too large (numbers must be finite)*"),
    (scenarios_text([scenario("m01_s001_v01", "m01", weight="@n@")], n="NaN"),
     "*row 1 (id m01_s001_v01), field 'weight': NaN is not a number an input file may hold*"),
    (scenarios_text([scenario("m01_s001_v01\n", "m01")]),
     "*scenarios.json, row 1 (id 'm01_s001_v01\\n'), field 'id': scenario id 'm01_s001_v01\\n' must be 1-100*"),
], ids=["5000-digit-int", "lone-surrogate-value", "lone-surrogate-key", "float-overflow", "nan", "id-trailing-newline"])
def test_hostile_scenarios_values_are_one_line(pytester: pytest.Pytester, bench_env: FakeLLMServer, text: str,
                                               expected: str) -> None:
    bench = write_benchmark(pytester.path)
    (bench / "scenarios.json").write_text(text, encoding="utf-8")
    collection_error(pytester, bench_env, expected)


@pytest.mark.parametrize(("text", "expected"), [
    (spec_text(targets=[{"id": "tgt", "model": TARGET, "params": {"seed": "@n@"}}]).replace("'@n@'", BIG),
     "*benchmark.yaml:*, field 'targets.1.params.seed': number 99999999999999999999… (5000 digits) is out of range*"),
    (spec_text(user_model={"model": USER, "params": {"temperature": "@n@"}}).replace("'@n@'", ".inf"),
     "*benchmark.yaml:*, field 'user_model.params.temperature': .inf is not a number*finite*"),
    (spec_text(metrics=[{"id": "m01", "name": "a", "type": "positive", "definition": "@s@"}]).replace(
        "'@s@'", '"half \\ud800 a pair"'),
     "*benchmark.yaml:*, field 'metrics.1.definition': contains a lone surrogate (\\ud800)*"),
    (spec_text(metrics=[{"id": "m01", "name": "a", "type": "positive", "definition": ""}]),
     "*benchmark.yaml:*, field 'metrics[[]m01[]].definition': is empty: the judge would have nothing to judge*"),
    (spec_text(metrics=[{"id": "m01", "name": "a", "type": "positive", "definition": " \n\t"}]),
     "*benchmark.yaml:*, field 'metrics[[]m01[]].definition': is empty: the judge would have nothing to judge*"),
    (spec_text(name="n" * 300), "*benchmark.yaml:*, field 'name': String should have at most 200 characters*"),
    (spec_text(targets=[{"id": "tgt\n", "model": TARGET}]), "*field 'targets.1.id': target id 'tgt\\n' must be*"),
    (spec_text(targets=[{"id": "tgt", "model": TARGET, "params": {"stop": "@b@"}}]).replace("'@b@'", "!!binary aGk="),
     "*benchmark.yaml:*, field 'targets.1.params.stop': YAML tag !!binary is not accepted*"),
], ids=["5000-digit-seed", "inf-temperature", "lone-surrogate", "empty-definition", "blank-definition",
        "300-char-name", "id-trailing-newline", "binary-param"])
def test_hostile_benchmark_yaml_values_are_one_line(pytester: pytest.Pytester, bench_env: FakeLLMServer, text: str,
                                                    expected: str) -> None:
    bench = write_benchmark(pytester.path)
    (bench / "benchmark.yaml").write_text(text, encoding="utf-8")
    collection_error(pytester, bench_env, expected)


@pytest.mark.parametrize(("name", "expected"), [
    ("b" * 300, "*--benchmark='bbbb*'… is not a benchmark name (1-100 letters*"),
    ("demo\n", "*--benchmark='demo\\n' is not a benchmark name*"),
], ids=["300-chars", "trailing-newline"])
def test_hostile_benchmark_names_are_usage_errors(pytester: pytest.Pytester, bench_env: FakeLLMServer, name: str,
                                                  expected: str) -> None:
    write_benchmark(pytester.path)
    result = pytester.runpytest(f"--benchmark={name}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([expected])
    assert "Traceback" not in result.stdout.str() + result.stderr.str()
    assert bench_env.requests == []


def dataset_bench(root: Path, lines: list[str]) -> Path:
    """benchmarks/agents with the example policy and these raw JSONL lines."""
    bench = root / "benchmarks" / "agents"
    bench.mkdir(parents=True)
    spec = yaml.safe_load((Path(__file__).parents[2] / "benchmarks" / "agents" / "benchmark.yaml").read_text())
    spec["evaluator_model"] = {"model": JUDGE}
    (bench / "benchmark.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    (bench / "cases.jsonl").write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return bench


GOOD_CASE = {"case_id": "c1", "agent_name": "a", "question": "q?", "model_answer": "an answer",
             "required_evals": ["FluencyExplain"], "threshold_profile": "prep_default"}


@pytest.mark.parametrize(("line", "expected"), [
    (json.dumps({**GOOD_CASE, "case_id": "c2", "question": "lone \ud800"}),
     "*cases.jsonl:2, field 'question': contains a lone surrogate (\\ud800)*"),
    (json.dumps({**GOOD_CASE, "case_id": "c2", "explain_inputs": {"FluencyExplain": {"n": "@n@"}}}).replace(
        '"@n@"', BIG), "*cases.jsonl:2, field 'explain_inputs.FluencyExplain.n': number 9999*(5000 digits)*"),
    (json.dumps({**GOOD_CASE, "case_id": "c2\n"}), "*cases.jsonl:2, field 'case_id': case_id 'c2\\n' must be*"),
    (json.dumps({**GOOD_CASE, "case_id": "c2", "required_evals": ["FluencyExplain", "Fluency"]}),
     "*cases.jsonl:2, field 'required_evals.2': Input should be 'RelevanceExplain'*"),
], ids=["lone-surrogate", "5000-digit-int", "id-trailing-newline", "list-position-from-1"])
def test_hostile_dataset_lines_are_one_line(pytester: pytest.Pytester, bench_env: FakeLLMServer, line: str,
                                            expected: str) -> None:
    dataset_bench(pytester.path, [json.dumps(GOOD_CASE), line])
    result = pytester.runpytest("--benchmark=agents")
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines([expected])
    result.stdout.no_fnmatch_line("*Traceback*")
    assert bench_env.requests == []


# --------------------------------------------------------------------------- inputs checked against each other


@pytest.mark.parametrize(("demographic", "expected"), [
    ({"age": "Adult (18 +)"}, "*scenarios.json, row 2 (id m01_s001_v02), field 'demographic.age': demographic value "
                              "'Adult (18 +)' is not one of axis 'age''s values in benchmark.yaml ('Child or teenager "
                              "(6-17)', 'Adult (18+)'); closest: 'Adult (18+)'*"),
    ({"aeg": "Adult (18+)"}, "*row 2 (id m01_s001_v02), field 'demographic.aeg': unknown demographic axis 'aeg'; "
                             "benchmark.yaml's demographics has 'age'; closest: 'age'*"),
], ids=["value", "axis"])
def test_demographic_outside_its_axis_is_an_error(pytester: pytest.Pytester, bench_env: FakeLLMServer,
                                                  demographic: dict[str, str], expected: str) -> None:
    rows = [scenario("m01_s001_v01", "m01"), scenario("m01_s001_v02", "m01", demographic=demographic)]
    write_benchmark(pytester.path, scenarios=rows,
                    demographics={"age": ["Child or teenager (6-17)", "Adult (18+)"]})
    collection_error(pytester, bench_env, expected)


def test_k_selects_a_demographic_value(pytester: pytest.Pytester, bench_env: FakeLLMServer) -> None:
    rows = [scenario("m01_s001_v01", "m01", demographic={"age": "Adult (18+)", "tone": "calm"}),
            scenario("m01_s001_v02", "m01", demographic={"age": "Child or teenager (6-17)", "tone": "calm"}),
            scenario("m02_s001_v01", "m02", demographic={"age": "Adult (18+)", "tone": "angry"})]
    write_benchmark(pytester.path, scenarios=rows, demographics={"age": ["Child or teenager (6-17)", "Adult (18+)"],
                                                                 "tone": ["calm", "angry"]})

    def selected(expression: str) -> list[str]:
        result = pytester.runpytest("--benchmark=demo", "--collect-only", "-q", "-k", expression)
        return sorted(line.split("::")[1] for line in result.stdout.lines if "scenarios.json::" in line)

    assert selected("teenager") == ["m01_s001_v02[tgt-s0]"]
    assert selected("Adult and angry") == ["m02_s001_v01[tgt-s0]"]
    assert selected("tone:calm and not Child") == ["m01_s001_v01[tgt-s0]"]
    assert bench_env.requests == []


@pytest.mark.parametrize("option", ["--evalbench-judge-model=judge\udcff", "--evalbench-target=t=m\udcff",
                                    "--evalbench-markdown=sum\udcff.md"])
def test_option_that_is_not_utf8_is_a_usage_error(pytester: pytest.Pytester, bench_env: FakeLLMServer,
                                                   option: str) -> None:
    """A non-UTF-8 byte on the command line (a lone surrogate once Python decodes it) is refused before any
    call; it used to reach history.jsonl's encoder and end in INTERNALERROR."""
    write_benchmark(pytester.path, scenarios=[scenario("m01_s001_v01", "m01")])
    bench_env.set_responder(script(True))
    result = pytester.runpytest_subprocess("--benchmark=demo", option)  # the argument goes out as bytes (0xff)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"ERROR: {option.split('=', maxsplit=1)[0]}=*\\udcff*: not UTF-8 text*"])
    assert "Traceback" not in result.stdout.str() + result.stderr.str()
    assert bench_env.requests == []


def test_hostile_values_and_demographic_selection_under_xdist(pytester: pytest.Pytester,
                                                             bench_env: FakeLLMServer) -> None:
    """The same one-line errors under xdist (a worker's collection error), and -k on a demographic value
    runs exactly those rows at -n 2 too (every worker selects the same items)."""
    rows = [scenario("m01_s001_v01", "m01", demographic={"age": "Adult (18+)"}),
            scenario("m01_s001_v02", "m01", demographic={"age": "Child or teenager (6-17)"}),
            scenario("m02_s001_v01", "m02", demographic={"age": "Adult (18+)"})]
    bench = write_benchmark(pytester.path, scenarios=rows,
                            demographics={"age": ["Child or teenager (6-17)", "Adult (18+)"]})
    good = (bench / "scenarios.json").read_text()
    (bench / "scenarios.json").write_text(good.replace('"persona of m01_s001_v02"', '"\\ud800"'))
    result = collection_error(pytester, bench_env, "*scenarios.json, row 2 (id m01_s001_v02), field 'persona': "
                                                   "contains a lone surrogate (\\ud800)*", "-n", "1")
    assert "INTERNALERROR" not in result.stdout.str()
    (bench / "scenarios.json").write_text(good)
    bench_env.set_responder(script(True))
    result = pytester.runpytest("--benchmark=demo", "-n", "2", "-k", "Adult", "-v")
    result.assert_outcomes(passed=1, failed=1)  # m01 (positive) passes, m02 (negative) fails: present in both
    result.stdout.no_fnmatch_line("*m01_s001_v02*")


def test_bad_labels_for_contrast_prompts_stop_the_run_before_any_call(pytester: pytest.Pytester,
                                                                       bench_env: FakeLLMServer) -> None:
    """The labelled examples `contrast` prompts show are read with the cases, before the first call:
    every bad line of calibration.jsonl is named at once and nothing is asked (not one error per
    judged item after its conversation was paid for)."""
    bench = write_benchmark(pytester.path, scenarios=[scenario("m01_s001_v01", "m01"), scenario("m01_s002_v01", "m01")],
                            judge={"prompt": "contrast"})
    (bench / "calibration.jsonl").write_text('{"metric_id": "m01", "present": "x"}\nnot json\n')
    result = pytester.runpytest("--benchmark=demo")
    assert result.ret == pytest.ExitCode.INTERRUPTED  # a collection error: nothing ran
    result.stdout.fnmatch_lines(["*2 problems:*", "*calibration.jsonl:1, field 'transcript'*",
                                 "*calibration.jsonl:2: invalid JSON*"])
    assert bench_env.requests == []
