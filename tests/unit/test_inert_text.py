"""Every text that reaches an output is inert there: no CI workflow command in any shape the runners
act on, no benchmark.yaml text field that breaks a title or a table, secrets masked in more shapes
(credential-like query names, any case, invisible characters inside)."""

from __future__ import annotations

import sys
import unicodedata
from pathlib import Path

import pytest
import yaml

from pytest_evalbench.base.errors import InputError
from pytest_evalbench.base.safe_text import MASK, Secrets, redact_patterns, strip_credentials, terminal
from pytest_evalbench.formats import MAX_NAME_LENGTH, MAX_TEXT_LENGTH
from pytest_evalbench.formats.spec import load_spec
from pytest_evalbench.gate.decision import GateDecision, gate_verdict
from pytest_evalbench.llm.transport import RedirectRefused
from pytest_evalbench.llm.types import Endpoint, EngineStats
from pytest_evalbench.render.markdown import render_markdown
from pytest_evalbench.render.rates import RateRow
from pytest_evalbench.render.summary import build_summary

DEMO = Path(__file__).parents[2] / "benchmarks" / "demo" / "benchmark.yaml"

# ------------------------------------------------------------------ class 1: CI log commands

INVISIBLE_LEADS = sorted({chr(c) for c in range(sys.maxunicode + 1)
                          if (chr(c).isspace() and chr(c) != "\n") or unicodedata.category(chr(c)) == "Cf"})
"""Every character GitHub's runner trims before it looks for `::` (Unicode whitespace), and every
format character (zero-width, BOM, joiners), which shows as nothing before it."""


def _invisible(char: str) -> bool:
    return (char.isspace() or unicodedata.category(char) == "Cf"
            or char in "\u034f\u115f\u1160\u17b4\u17b5\u2800\u3164\uffa0")


def _would_run(line: str) -> bool:
    """Whether a runner could read `line` as a command: `::` after invisible characters, or `##[` /
    `##vso[` anywhere."""
    start = 0
    while start < len(line) and _invisible(line[start]):
        start += 1
    lowered = line.lower()
    return line.startswith("::", start) or "##[" in lowered or "##vso[" in lowered


@pytest.mark.parametrize("lead", ["\u3000", "\u00a0", "\u2003", "\u202f", "\u200b", "\ufeff", "\u2060 \u3000"])
def test_a_command_after_unicode_whitespace_gets_the_prefix(lead: str) -> None:
    first, second = terminal(f"{lead}::error::pwned\nok").split("\n")
    assert not _would_run(first) and first.endswith("::error::pwned") and second == "ok"


def test_no_leading_invisible_character_lets_a_command_through() -> None:
    text = "\n".join(f"{lead}::error::x{i}" for i, lead in enumerate(INVISIBLE_LEADS))
    lines = terminal(text).split("\n")
    assert len(lines) >= len(INVISIBLE_LEADS)
    assert [line for line in lines if _would_run(line)] == []


@pytest.mark.parametrize("text", ["model says ##[error]boom", "x ##vso[task.setvariable variable=a]1",
                                  "##VSO[task.complete result=Succeeded]", "a##[group]b ##[endgroup]"])
def test_mid_line_commands_are_broken(text: str) -> None:
    out = terminal(text)
    assert not _would_run(out) and out.replace("\\[", "[") == text  # only the `[` is escaped


def test_ordinary_text_is_unchanged() -> None:
    text = "a :: b\nC# ## notes [x]\n\tindented"
    assert terminal(text) == text


# ------------------------------------------------------------------ class 2: benchmark.yaml text fields


def _spec_with(tmp_path: Path, change: dict[str, object]) -> Path:
    data = yaml.safe_load(DEMO.read_text())
    for dotted, value in change.items():
        node = data
        *parents, last = dotted.split(".")
        for part in parents:
            node = node[int(part)] if isinstance(node, list) else node[part]
        if isinstance(node, list):
            node[int(last)] = value
        else:
            node[last] = value
    bench = tmp_path / "benchmarks" / "demo"
    bench.mkdir(parents=True, exist_ok=True)
    (bench / "benchmark.yaml").write_text(yaml.safe_dump(data, allow_unicode=True))
    return bench


@pytest.mark.parametrize(("field", "value", "said"), [
    ("name", "demo\n::error::x", "field 'name': holds a line break"),
    ("name", "demo\x1b]0;owned\x07", "field 'name': holds the control character '\\x1b'"),
    ("name", "n" * (MAX_NAME_LENGTH + 1), f"field 'name': String should have at most {MAX_NAME_LENGTH} characters"),
    ("description", "d" * (MAX_TEXT_LENGTH + 1), f"field 'description': String should have at most {MAX_TEXT_LENGTH} characters"),
    ("description", "fine\n\u202egnp.exe", "field 'description': holds the control character '\\u202e'"),
    ("metrics.0.name", "Avoid\rharm", "field 'metrics[m01].name': holds the control character '\\r'"),
    ("metrics.0.definition", "x\x9b31m", "field 'metrics[m01].definition': holds the control character '\\x9b'"),
    ("demographics.age.1", "Adult\n(18+)", "field 'demographics.age.2': holds a line break"),
])
def test_text_fields_are_one_clear_error(tmp_path: Path, field: str, value: str, said: str) -> None:
    bench = _spec_with(tmp_path, {field: value})
    with pytest.raises(InputError) as caught:
        load_spec(bench)
    assert str(caught.value).startswith(str(bench / "benchmark.yaml")) and said in str(caught.value)


def test_multi_line_texts_and_printable_names_load(tmp_path: Path) -> None:
    bench = _spec_with(tmp_path, {"name": "Demo `x` <b>ünïcode</b> ##[x]", "description": "two\nlines\tand a tab"})
    assert load_spec(bench).name == "Demo `x` <b>ünïcode</b> ##[x]"


def _markdown(benchmark: str, rates: list[RateRow] | None = None, tmp_path: Path = Path(".")) -> str:
    summary = build_summary(kind="scenarios", written=None, gate=gate_verdict(GateDecision(), 0, 0, {}),
                            meta={"benchmark": benchmark}, stats=EngineStats(), errors={}, recorded=0,
                            failed=0, commit=None, files=[])
    summary.rates = rates or []
    return render_markdown(summary, None)


@pytest.mark.parametrize("name", ["x` <img src=x onerror=alert(1)> `", "``` <img src=x>", "`", "a ``` b ` c"])
def test_a_name_with_backticks_stays_inside_the_title_code_span(name: str, tmp_path: Path) -> None:
    title = _markdown(name, tmp_path=tmp_path).splitlines()[0]
    body = title.removeprefix("## ✅ evalbench ").rsplit(": passed", 1)[0]
    fence = body[:len(body) - len(body.lstrip("`"))]
    inner = body[len(fence):len(body) - len(fence)]
    # one code span: the same fence at both ends, and no run of backticks inside as long as it
    assert body.endswith(fence) and fence not in inner.replace("`" * (len(fence) + 1), "")
    assert max((len(r) for r in inner.split(" ") if set(r) == {"`"}), default=0) < len(fence)
    assert inner.strip() == name.strip()


def test_session_stamps_reach_the_rates_table_escaped(tmp_path: Path) -> None:
    row = RateRow(target="t", metric="m01", name=None, type="positive", k=1, n=2, rate=0.5, low=0.1, high=0.9,
                  measured=False, carried_from="2026-11-24T10:00Z <img src=x onerror=alert(1)> | [x](javascript:1)")
    table = [line for line in _markdown("demo", [row], tmp_path).splitlines() if line.startswith("| t |")]
    assert len(table) == 1 and table[0].count(" | ") == 3  # four cells: the stamp's `|` is escaped
    assert "<img" not in table[0] and "&lt;img src=x" in table[0]
    assert "](javascript" not in table[0].replace("\\](", "")  # `\]` renders as `]`: no link


# ------------------------------------------------------------------ class 8: secrets in more shapes


@pytest.mark.parametrize("name", ["subscription-key", "Subscription-Key", "access_key", "AccessKey", "apiKey",
                                  "X-Amz-Signature", "X-Amz-Credential", "sig", "SAS_TOKEN", "client_secret",
                                  "passwd", "pwd", "auth", "code", "api_key_v2", "token.value"])
def test_credential_like_query_names_are_masked(name: str) -> None:
    url = f"https://h.example/v1?api-version=2024-10-01&{name}=S3cretValue123&deployment=gpt"
    assert redact_patterns(url) == f"https://h.example/v1?api-version=2024-10-01&{name}={MASK}&deployment=gpt"


def test_ordinary_query_names_are_kept() -> None:
    url = "https://h.example/v1?api-version=2024&keyword=x&deployment=d&region=eu&signin=1"
    assert redact_patterns(url) == url


def test_the_cache_endpoint_identity_holds_no_query_secret() -> None:
    secret = "Zq8sub-0a1b2c3d4e5f"
    for query in (f"subscription-key={secret}", f"access_key={secret}", f"ACCESS-TOKEN={secret}"):
        identity = Endpoint("m", base_url=f"https://h.example/v1?{query}").identity
        assert secret not in identity and identity.endswith(f"={MASK}")
    # entries recorded without such parameters keep their key material
    assert Endpoint("m", base_url="https://h.example/v1/?api-version=2024").identity == "https://h.example/v1/?api-version=2024"
    assert strip_credentials("http://u:p@h/v1") == "http://h/v1"


KEY = "QZXk-Live-4f9a8b7c6d5e4f3a2b1c"


def test_a_secret_in_another_case_is_masked() -> None:
    secrets = Secrets()
    secrets.add(KEY)
    for shown in (KEY.lower(), KEY.upper(), KEY.swapcase()):
        assert secrets.redact(f"at {shown}.") == f"at {MASK}." and secrets.leaks(shown)


def test_a_redirect_to_a_host_holding_the_key_is_masked() -> None:
    secrets = Secrets()
    secrets.add(KEY)
    message = str(RedirectRefused(302, "https://api.example/v1", f"http://{KEY}.evil.example/x"))
    assert KEY.lower() in message  # the origin is shown lower-cased ...
    shown = secrets.redact(message)
    assert KEY.lower() not in shown.lower() and f"http://{MASK}.evil.example" in shown  # ... and masked


@pytest.mark.parametrize("invisible", ["\u200d", "\u00ad", "\u200b", "\ufeff", "\u2060", "\u200d\u00ad"])
def test_invisible_characters_inside_a_secret_do_not_hide_it(invisible: str) -> None:
    secrets = Secrets()
    secrets.add(KEY)
    secrets.add("Ab3$x")  # short: masked as a whole word only
    hidden = KEY[:6] + invisible + KEY[6:20] + invisible + KEY[20:]
    assert secrets.redact(f"key={hidden} ok") == f"key={MASK} ok" and secrets.leaks(hidden)
    assert secrets.redact(f"p {'Ab' + invisible + '3$x'} q") == f"p {MASK} q"
    assert secrets.redact("xAb3$xy") == "xAb3$xy"  # not a whole word: kept


# ------------------------------------------------------------------ class 10: rows named by their id


def test_a_duplicate_key_reads_as_its_first_value() -> None:
    from pytest_evalbench.base.json_input import DECODER

    row = DECODER.decode('{"id": "m01_s001_v01", "id": "m01_s002_v01"}')
    assert str(row["id"]) == "m01_s001_v01" and repr(row["id"]) == "'m01_s001_v01'"
    assert "object at 0x" not in f"{row}"
