"""Secrets in the shapes that leaked: credential query names by a rule (not a list), percent-encoded
names, a secret split across a cut (masked before the cut, at either end), log-probability tokens."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_evalbench.base.safe_text import MASK, SECRETS, Secrets, credential_name, cut, redact_patterns
from pytest_evalbench.llm.cache import ResponseCache, cache_key
from pytest_evalbench.llm.costs import PriceTable
from pytest_evalbench.llm.engine import Engine, EngineSettings
from pytest_evalbench.llm.types import Completion, Endpoint
from pytest_evalbench.testing import FakeLLMServer, Reply

KEY = "QZXs-live-7c6d5e4f3a2b1c0d9e8f"


@pytest.mark.parametrize("name", ["passphrase", "pw", "PW", "AWSAccessKeyId", "apikey2", "api%2Dkey", "api%2dKEY",
                                  "client%5Fsecret", "x_api_key_2", "refreshToken", "oauth_code", "totp", "session_2"])
def test_a_credential_query_name_is_known_by_the_rule(name: str) -> None:
    url = f"https://h.example/v1?api-version=2024&{name}=S3cretValue123&deployment=gpt"
    assert credential_name(name)
    assert redact_patterns(url) == f"https://h.example/v1?api-version=2024&{name}={MASK}&deployment=gpt"
    found = Secrets()
    found.add_url(url)
    assert found.redact("said S3cretValue123.") == f"said {MASK}."


@pytest.mark.parametrize("name", ["keyword", "signin", "api-version", "deployment", "region", "page", "model", "q"])
def test_an_ordinary_query_name_is_not(name: str) -> None:
    assert not credential_name(name)


def test_a_percent_encoded_credential_name_keeps_the_cache_on(tmp_path: Path) -> None:
    """`api%2Dkey=...` in the base URL: the cache's endpoint identity holds the value masked, so the
    answer is cached (before, the identity held the key and every entry was refused)."""
    secret = "QZXp-9a8b7c6d5e4f3a2b1c0d"
    base_url = f"https://llm.example/v1?api%2Dkey={secret}"
    SECRETS.add_url(base_url)
    endpoint = Endpoint(model="m", base_url=base_url, api_key="x" * 20)
    assert secret not in endpoint.identity and not SECRETS.leaks(endpoint.identity)
    engine = Engine(EngineSettings(), ResponseCache(tmp_path, "on"), PriceTable())
    material = {"endpoint": endpoint.identity, "body": {"model": "m", "messages": []}, "sample": 0, "attempt": 0}

    async def fetch() -> Completion:
        return Completion(content="fine")

    try:
        engine.run(engine.cached.answer(cache_key(material), material, "target", "m", fetch))
    finally:
        engine.close()
    entries = list(tmp_path.rglob("*.json"))
    assert len(entries) == 1 and secret not in entries[0].read_text()
    assert not engine.stats.failures


def test_a_secret_split_by_any_cut_leaks_no_four_characters() -> None:
    """The text was cut before it reached us, through the key, at its end or at its start: no 4
    characters of the key survive; and `cut` masks before it cuts."""
    found = Secrets()
    found.add(KEY)
    windows = [KEY[i:i + 4] for i in range(len(KEY) - 3)]
    for at in range(1, len(KEY)):
        for shown in (f"error: {KEY[:at]}", f"error: {KEY[:at]}…", f"{KEY[at:]} was refused", f"…{KEY[at:]}: no"):
            masked = found.redact(shown)
            assert [w for w in windows if w in masked] == [], (at, shown, masked)
    SECRETS.add(KEY)
    for limit in range(5, 60):
        text = "x" * 20 + KEY + " tail"
        assert [w for w in windows if w in cut(text, limit)] == [], limit


def test_log_probability_tokens_are_masked_before_the_cache(tmp_path: Path) -> None:
    SECRETS.add(KEY)
    whole = [{"token": f'{{"key": "{KEY}", ', "logprob": -0.1, "top_logprobs": [{"token": KEY, "logprob": -0.2}]},
             {"token": '"present": true}', "logprob": 0.0, "top_logprobs": []}]
    spread = [{"token": KEY[i:i + 3], "logprob": 0.0, "top_logprobs": []} for i in range(0, len(KEY), 3)]
    replies = iter([Reply(content="ok one", logprobs={"content": whole}),
                    Reply(content="ok two", logprobs={"content": spread})])
    engine = Engine(EngineSettings(), ResponseCache(tmp_path, "on"), PriceTable())
    with FakeLLMServer(lambda request: next(replies)) as server:
        endpoint = Endpoint(model="m", base_url=server.base_url, api_key="x" * 20)
        try:
            answers = [engine.run(engine.complete(endpoint, [{"role": "user", "content": text}], role="judge",
                                                  phase="evaluate", sample=0, top_logprobs=5))
                       for text in ("first", "second")]
        finally:
            engine.close()
    assert answers[0].logprobs is not None and MASK in str(answers[0].logprobs)
    assert answers[1].logprobs is None  # spread over tokens: dropped, the sampled judgment stands
    entries = [p.read_text() for p in tmp_path.rglob("*.json")]
    assert len(entries) == 2 and not any(KEY[:4] in e or KEY[8:12] in e for e in entries)
