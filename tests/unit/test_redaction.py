"""One redaction (issue 25 rows 2, 3, 8) and output sanitising (row 7), unit level."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_evalbench.base.errors import LLMError, TargetError
from pytest_evalbench.base.safe_text import (
    MASK,
    SECRETS,
    Secrets,
    check_base_url,
    cut,
    markdown,
    secret_params,
    strip_credentials,
    terminal,
)
from pytest_evalbench.formats.spec import ModelConfig, TargetConfig
from pytest_evalbench.kinds.targets import TargetReply, bounded
from pytest_evalbench.llm.cache import ResponseCache
from pytest_evalbench.llm.costs import PriceTable
from pytest_evalbench.llm.engine import Engine, EngineSettings
from pytest_evalbench.llm.transport import HTTPStatusError, classify
from pytest_evalbench.llm.types import Endpoint
from pytest_evalbench.testing import FakeLLMServer

KEY = "QZXk-live-4f9a8b7c6d5e4f3a2b1c"
TOKEN = "QZXt-team-0a1b2c3d4e5f6a7b"


@pytest.fixture
def secrets() -> Secrets:
    found = Secrets()
    found.add(KEY)
    found.add_headers({"X-Team": TOKEN, "User-Agent": "evals/1.0"}, ["X-Team"])
    return found


def test_every_registered_secret_is_masked_wherever_it_occurs(secrets: Secrets) -> None:
    text = f'{{"authorization": "Bearer {KEY}", "x-team": "{TOKEN}", "ua": "evals/1.0"}} x{KEY}y'
    out = secrets.redact(text)
    assert KEY not in out and TOKEN not in out and "QZX" not in out
    assert "evals/1.0" in out  # a literal, non-credential header is not a secret
    assert json.loads(out.split(" x")[0])["x-team"] == MASK  # JSON stays JSON


def test_encoded_forms_are_masked_too() -> None:
    found = Secrets()
    found.add('QZX"quote/plus+slash&amp')
    for form in ['QZX\\"quote/plus+slash&amp', "QZX%22quote%2Fplus%2Bslash%26amp", "QZX&quot;quote/plus+slash&amp;amp"]:
        assert found.redact(f"<{form}>") == f"<{MASK}>", form


@pytest.mark.parametrize("cut_at", range(4, len(KEY)))
def test_a_cut_secret_leaks_no_prefix(secrets: Secrets, cut_at: int) -> None:
    """Row 3: a key somebody else cut (the endpoint, an app) still leaks nothing of 4+ characters."""
    for tail in ("", "…", "...", '"}', " and more"):
        out = secrets.redact(f"invalid key: {KEY[:cut_at]}{tail}")
        assert KEY[:4] not in out, (cut_at, tail, out)


def test_prefix_masking_leaves_ordinary_words_alone() -> None:
    found = Secrets()
    found.add("password-1234")
    assert found.redact("the test passed; compass") == "the test passed; compass"
    assert found.redact("sent passwo") == f"sent {MASK}"  # a cut secret at the end


def test_short_values_only_as_whole_words() -> None:
    found = Secrets()
    found.add("ab")  # too short to be a secret
    found.add("eng42")
    assert found.redact("about eng42 and eng421 / beng42") == f"about {MASK} and eng421 / beng42"


def test_redact_before_cut_near_char_300() -> None:
    """Row 3: the key near char 300 of an error body: masked first, then cut."""
    SECRETS.add(KEY)
    for offset in range(280, 300):
        body = "x" * offset + KEY + " tail" * 20  # unredacted, the 300-character cut goes through the key
        failure = classify(HTTPStatusError(401, body, {}))
        assert "QZX" not in failure.message, offset
        assert KEY[:4] not in cut(body, 300)


def test_url_credentials_are_secrets_and_stripped() -> None:
    url = "https://admin:QZXpass%2Fword@llm.example.com/v1?api-key=QZXquery123&x=1"
    found = Secrets()
    found.add_url(url)
    basic = base64.b64encode(b"admin:QZXpass/word").decode()
    echoed = f"auth: Basic {basic}; pass QZXpass/word; url {url}"
    assert "QZX" not in found.redact(echoed) and basic[:4] not in found.redact(echoed)
    assert found.redact("admin rights") == "admin rights"  # a user name beside a password is no secret
    token_only = Secrets()
    token_only.add_url("https://QZXtok@h/v1")  # GitHub-style: the user part is the token
    assert token_only.redact("QZXtok") == MASK
    assert strip_credentials(url) == "https://llm.example.com/v1?api-key=***&x=1"
    # credentials in any URL, registered or not
    assert "hunter2" not in Secrets().redact("see http://bob:hunter2@h/x and https://h/?token=hunter2&sig=hunter2")


def test_endpoint_identity_and_reprs_hold_no_credentials() -> None:
    """Row 8: OPENAI_BASE_URL with user:pass@ never reaches a cache key, cache entry or repr."""
    endpoint = Endpoint(model="m", base_url="http://QZXu:QZXp@127.0.0.1:9/v1?key=QZXq1234", api_key=KEY,
                        headers={"X-Team": TOKEN})
    assert "QZX" not in endpoint.identity and "QZX" not in repr(endpoint)
    config = ModelConfig(model="m", base_url="http://QZXu:QZXp@127.0.0.1:9/v1", headers={"Authorization": "QZXlit"})
    assert "QZX" not in repr(config) and "QZX" not in str(config)
    assert "QZX" not in repr(TargetConfig(id="t", base_url="https://QZXu:QZXp@h"))
    with pytest.raises(ValueError) as info:
        check_base_url("ftp://QZXu:QZXp@h/v1")
    assert "QZX" not in str(info.value)


@pytest.mark.parametrize("params", [{"api_key": "x"}, {"API-Key": "x"}, {"token": "x"}, {"password": "x"},
                                    {"extra_headers": {"Authorization": "Bearer x"}}])
def test_credentials_in_params_are_refused(params: dict) -> None:
    """Row 8: `params` are sent in the body and stored in the cache: a key there is a config error."""
    with pytest.raises(ValueError, match="looks like a credential"):
        ModelConfig(model="m", params=params)
    assert secret_params({"max_tokens": 5, "temperature": 0, "seed": 1, "top_k": 2}) == []


def test_app_exceptions_and_replies_are_redacted() -> None:
    """Row 8: an app exception or reply quoting the key (even cut by the reply limit) shows none of it."""
    SECRETS.add(KEY)
    assert KEY not in str(TargetError("app", f"RuntimeError: bad key {KEY}"))
    assert KEY not in str(LLMError("request rejected", f"echo {KEY}"))
    reply = bounded(TargetReply("a" * 95 + KEY), 100)
    assert "QZXk" not in reply.content


# ------------------------------------------------------------------ row 7: sanitising


HOSTILE = ("\x1b[2J\x1b]0;owned\x07title\x1b]8;;http://evil\x1b\\link\x1b]8;;\x1b\\\rfake\x08\x9b31m\u202eevil\n"
           "::error file=x::pwned\n  ::stop-commands::tok\n\t##[group]g\n##vso[task.setvariable]x\nok :: mid-line")


def test_terminal_text_has_no_control_characters_and_no_workflow_commands() -> None:
    out = terminal(HOSTILE)
    assert not any((ord(c) < 0x20 and c not in "\n\t") or 0x7F <= ord(c) < 0xA0 or c == "\u202e" for c in out)
    assert "\\x1b[2J" in out and "\\x07" in out and "\\x0d" in out  # visible, not dropped
    lines = out.split("\n")
    assert all(not line.lstrip().startswith(("::", "##[", "##vso[")) for line in lines), lines
    assert lines[1] == "> ::error file=x::pwned" and lines[2] == "  > ::stop-commands::tok"
    assert lines[-1] == "ok :: mid-line"


def test_markdown_text_renders_nothing() -> None:
    out = markdown('<img src=x onerror=alert(1)> [click](javascript:alert(1)) ![i](http://t/p.png) `c` *b*\n| x')
    assert "<" not in out and ">" not in out and "\n" not in out
    assert "](" not in out.replace("\\](", "") and "\\[click\\](javascript:" in out
    assert "&lt;img src=x onerror=alert(1)&gt;" in out


def test_no_credential_is_written_to_the_cache(tmp_path: Path) -> None:
    """Row 8: an answer echoing the key is stored masked; a request holding a secret (a key pasted
    into a prompt) is not stored at all; URL credentials are in neither the key nor the entry."""
    SECRETS.add(KEY)
    SECRETS.add_url("http://admin:QZXpassword9@127.0.0.1/v1")
    engine = Engine(EngineSettings(), ResponseCache(tmp_path, "on"), PriceTable())
    with FakeLLMServer(lambda request: f"your key is {KEY}") as server:
        endpoint = Endpoint(model="m", base_url=server.base_url.replace("://", "://admin:QZXpassword9@"), api_key=KEY)

        async def ask(text: str) -> str | None:
            answer = await engine.complete(endpoint, [{"role": "user", "content": text}], role="target",
                                           phase="simulate", sample=0)
            return answer.content

        try:
            assert engine.run(ask("hello")) == f"your key is {MASK}"
            assert engine.run(ask(f"my key is {KEY}")) == f"your key is {MASK}"
        finally:
            engine.close()
    assert len(server.requests) == 2
    entries = list(tmp_path.rglob("*.json"))
    assert len(entries) == 1  # the request with the key in it was answered, never stored
    text = entries[0].read_text()
    assert "QZX" not in text and "admin" not in text and MASK in text


def test_secrets_are_looked_for_in_a_long_report_folded_a_slice_at_a_time() -> None:
    """A long text that is not ASCII (an HTML report of every failed case) is folded as a whole text
    is, final sigmas included, without `str.lower`'s twelve bytes per character of the whole report:
    its peak stays within a few times the text's own size, and a secret in it is still masked."""
    import sys
    import tracemalloc

    from pytest_evalbench.base import safe_text

    text = "<td>ΑΣ Σα ΣΑΣ é</td>" * 60_000 + "<p>key: SK-PERF-0123456789</p>"
    assert len(text) > 1_000_000 and "\n" not in text  # one line, as the report is
    secrets = safe_text.Secrets()
    secrets.add("sk-perf-0123456789")
    tracemalloc.start()
    try:
        masked = secrets.redact(text)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert "SK-PERF-0123456789" not in masked and masked.endswith(f"<p>key: {safe_text.MASK}</p>")
    assert peak < 5 * sys.getsizeof(text), f"{peak} bytes to redact {sys.getsizeof(text)}"
    assert safe_text._fold(text) == safe_text._INVISIBLES.sub("", text).lower()


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(list("aAΣσςΑé\u0345\u0307'.: \n<>İ\u200b")), max_size=40).map("".join) | st.text(max_size=40))
def test_a_text_folded_a_slice_at_a_time_reads_as_the_whole_text_lowered(text: str) -> None:
    """Slices end only after a character that is neither cased nor case-ignorable, so no lowering rule
    (a final sigma, a dotted capital I) reads across them: shown with slices a few characters long."""
    from pytest_evalbench.base import safe_text

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(safe_text, "FOLD_SLICE", 3)
        assert safe_text._fold(text + "é") == safe_text._INVISIBLES.sub("", text + "é").lower()


_PIECES = st.sampled_from(["sk-perf", "SK-P", "sk-", "perf", "erf-", "rf-0", "0123", "QZXk", "zxk-", "user:pw", "...",
                           "…", "=", "://", "?token=", " ", "\n", "_", "a", "É", "\u200b", "Sure, tell me more?"])


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(["sk-perf", "sk-perf-0123456789", "QZXk-live", "user", "pw12", "Xk\u200bé-9"]),
                min_size=0, max_size=3),
       st.lists(_PIECES, max_size=8).map("".join) | st.text(max_size=30))
def test_a_text_told_untouched_is_what_the_full_redaction_makes_of_it(values: list[str], text: str) -> None:
    """`redact` returns a text as it is when a few scans show nothing in it that any of its rules
    would mask: the full redaction of such a text (whole, cut and encoded secrets, URLs) is the text
    itself, whatever the registered secrets and however the text mixes pieces of them."""
    secrets = Secrets()
    for value in values:
        secrets.add(value)
    told = secrets._untouched(text)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(secrets, "_untouched", lambda _: False)
        full = secrets.redact(text)
    assert secrets.redact(text) == full
    if told:
        assert full == text
