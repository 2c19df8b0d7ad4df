"""The response cache replays only entries that verify, and never stores empty answers."""

from __future__ import annotations

import asyncio
import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from pytest_evalbench.llm.cache import CorruptEntry, ResponseCache, cache_key, canonical_json, completion_material, entry_digest
from pytest_evalbench.llm.types import Endpoint

REQUEST = {"endpoint": "http://x/v1", "body": {"model": "m", "messages": []}, "sample": 0, "attempt": 0}
RESPONSE = {"content": "hi", "tool_calls": None, "finish_reason": "stop", "input_tokens": 3, "output_tokens": 1}


def stored(tmp_path: Path, **response: Any) -> tuple[ResponseCache, str]:
    cache = ResponseCache(tmp_path, "on")
    key = cache_key(REQUEST)
    cache.put(key, REQUEST, {**RESPONSE, **response})
    return cache, key


def test_sound_entry_replays(tmp_path: Path) -> None:
    cache, key = stored(tmp_path)
    assert cache.get(key) == RESPONSE
    assert ResponseCache(tmp_path, "replay").get(key) == RESPONSE
    assert ResponseCache(tmp_path, "refresh").get(key) is None
    assert cache.get(cache_key({**REQUEST, "sample": 1})) is None  # absent: a plain miss


@pytest.mark.parametrize(("change", "reason"), [
    ({"content": 42}, "content is int, not text"),
    ({"input_tokens": "7"}, "input_tokens is '7', not a token count"),
    ({"output_tokens": True}, "output_tokens is True, not a token count"),
    ({"tool_calls": "call"}, "tool_calls is not a list of objects"),
])
def test_malformed_response_is_corrupt(tmp_path: Path, change: dict[str, Any], reason: str) -> None:
    cache, key = stored(tmp_path)
    path = cache.path_for(key)
    entry = json.loads(path.read_text())
    entry["response"].update(change)
    path.write_text(json.dumps(entry))
    with pytest.raises(CorruptEntry, match=reason) as info:
        cache.get(key)
    assert info.value.path == path


def test_entry_copied_under_another_key_is_corrupt(tmp_path: Path) -> None:
    cache, key = stored(tmp_path)
    other = {**REQUEST, "sample": 1}
    other_key = cache_key(other)
    cache.put(other_key, other, {**RESPONSE, "content": "other answer"})
    entry = json.loads(cache.path_for(other_key).read_text())
    cache.path_for(key).write_text(json.dumps({**entry, "key": key}))
    with pytest.raises(CorruptEntry, match="does not hash to its key"):
        cache.get(key)
    cache.path_for(key).write_text(json.dumps(entry))  # the file of another key, unchanged
    with pytest.raises(CorruptEntry, match="not under its file name"):
        cache.get(key)


@pytest.mark.parametrize("response", [{"content": ""}, {"content": "  \n"}, {"content": None}])
def test_empty_answers_are_never_stored(tmp_path: Path, response: dict[str, Any]) -> None:
    cache, key = stored(tmp_path, **response)
    assert not cache.path_for(key).exists()
    assert cache.get(key) is None


def test_tool_calls_alone_are_an_answer(tmp_path: Path) -> None:
    calls = [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]
    cache, key = stored(tmp_path, content=None, tool_calls=calls)
    assert cache.get(key) == {**RESPONSE, "content": None, "tool_calls": calls}


def test_edited_entry_fails_its_digest(tmp_path: Path) -> None:
    cache, key = stored(tmp_path)
    path = cache.path_for(key)
    entry = json.loads(path.read_text())
    assert entry["digest"] == entry_digest(key, REQUEST, RESPONSE)
    entry["response"]["content"] = "an edited, still usable answer"
    path.write_text(json.dumps(entry))
    with pytest.raises(CorruptEntry, match="digest does not match"):
        cache.get(key)
    entry["digest"] = "0" * 64  # a digest of something else: same
    path.write_text(json.dumps(entry))
    with pytest.raises(CorruptEntry, match="digest does not match"):
        cache.get(key)


def test_entry_recorded_before_digests_still_replays(tmp_path: Path) -> None:
    cache, key = stored(tmp_path)
    path = cache.path_for(key)
    entry = json.loads(path.read_text())
    del entry["digest"]
    path.write_text(json.dumps(entry, ensure_ascii=False, indent=1))
    assert cache.get(key) == RESPONSE


def test_lone_surrogates_are_stored_and_read_back_safely(tmp_path: Path) -> None:
    cache, key = stored(tmp_path, content="bad \ud800 text")
    raw = cache.path_for(key).read_bytes()
    assert raw.isascii() and b"\\ud800" in raw  # stored as written, escaped
    assert cache.get(key) == {**RESPONSE, "content": "bad \ufffd text"}  # never handed on as a surrogate


@pytest.mark.parametrize("damage", [b"\xff\xfe not utf-8", b'{"key": "\\ud800", "request": {"x": "\\udfff"}}',
                                    b'{"key": 1' + b"0" * 5000 + b"}", b"[" * 100_000])
def test_unreadable_entry_is_corrupt_not_a_crash(tmp_path: Path, damage: bytes) -> None:
    cache, key = stored(tmp_path)
    cache.path_for(key).write_bytes(damage)
    with pytest.raises(CorruptEntry):
        cache.get(key)


@pytest.mark.parametrize("request_", [
    {"attempt": 0, "body": {"model": "m", "messages": [{"role": "user", "content": "hé \ud800"}]},
     "endpoint": "http://x/v1", "sample": 1},
    {"attempt": 0, "body": {}, "endpoint": "e", "sample": 0, "w": 1},  # a key sorting after "v"
    {"v": 2, "body": {}},  # a forged version field
    {"": [1.5, None, True]},
    {},
])
def test_fast_key_and_digest_match_the_canonical_definitions(request_: dict) -> None:
    """The replay path hashes the request's canonical JSON once for both checks; it must give what
    `cache_key` and `entry_digest` define, for any request a file may hold."""
    from pytest_evalbench.llm.cache import _digest, cache_key, canonical_json, entry_digest

    response = {"content": "ok", "finish_reason": "stop", "input_tokens": 1, "output_tokens": 2}
    encoded = canonical_json(request_)
    assert cache_key(request_, encoded) == cache_key(request_)
    assert cache_key(request_) == hashlib.sha256(canonical_json({"v": 1, **request_}).encode("utf-8", "surrogatepass")
                                                 ).hexdigest()
    key = cache_key(request_)
    assert _digest(key, encoded, canonical_json(response)) == entry_digest(key, request_, response)


def damaged_entries(tmp_path: Path) -> list[tuple[str, Any]]:
    """A sound entry and every kind of damage the checks name, each as (what, entry as stored)."""
    cache, key = stored(tmp_path)
    entry = json.loads(cache.path_for(key).read_text())
    other = {**REQUEST, "sample": 1}
    return [
        ("sound", entry),
        ("no digest", {k: v for k, v in entry.items() if k != "digest"}),
        ("edited answer", {**entry, "response": {**RESPONSE, "content": "edited"}}),
        ("edited request", {**entry, "request": {**REQUEST, "attempt": 1}}),
        ("copied request", {**entry, "request": other, "digest": entry_digest(key, other, RESPONSE)}),
        ("float for int", {**entry, "request": {**REQUEST, "sample": 0.0}}),
        ("other key", {**entry, "key": cache_key(other)}),
        ("bad response", {**entry, "response": {**RESPONSE, "input_tokens": -1}}),
        ("empty response", {**entry, "response": {**RESPONSE, "content": " "}}),
        ("surrogate", {**entry, "response": {**RESPONSE, "content": "x \ud800"},
                       "digest": entry_digest(key, REQUEST, {**RESPONSE, "content": "x \ud800"})}),
        ("newer version", {**entry, "version": 99}),
        ("digest not text", {**entry, "digest": 7}),
    ]


def outcome(cache: ResponseCache, key: str, request: tuple[dict[str, Any], str] | None) -> Any:
    try:
        return cache.get(key, request)
    except CorruptEntry as exc:
        return ("corrupt", exc.reason)


def test_the_callers_request_changes_no_verdict(tmp_path: Path) -> None:
    """The replay hot path (the engine passes its own request and its canonical JSON) replays
    exactly what the full checks replay and names exactly what they name, for every damage. One
    difference, by design: a stored request equal in value to the call's but spelled differently
    (0.0 for 0) still replays there, since the digest proves the answer was recorded for exactly
    this call; the full check, re-hashing the stored spelling, names it."""
    from pytest_evalbench.llm.cache import canonical_json

    cache, key = stored(tmp_path / "c")
    path = cache.path_for(key)
    for what, entry in damaged_entries(tmp_path / "d"):
        path.write_text(json.dumps(entry, ensure_ascii=True, indent=1, sort_keys=True))
        full = outcome(cache, key, None)
        fast = outcome(cache, key, (REQUEST, canonical_json(REQUEST)))
        if what == "float for int":
            assert (fast, full[0]) == (RESPONSE, "corrupt")
            continue
        assert fast == full, what
        if what == "sound":
            assert full == RESPONSE
        elif what == "surrogate":
            assert full == {**RESPONSE, "content": "x \ufffd"}
        elif what != "no digest":
            assert full[0] == "corrupt", what


def test_a_sound_entry_is_not_re_encoded_when_the_caller_gives_its_request(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """70,000 replayed calls each re-encoding and re-hashing a whole conversation was the largest
    cost of a cached run: given the caller's request, a sound entry skips the full checks."""
    from pytest_evalbench.llm import cache as cache_module

    cache, key = stored(tmp_path)
    request = (REQUEST, cache_module.canonical_json(REQUEST))

    def full_check(*_: object) -> str:
        raise AssertionError("the full check ran for a sound entry")

    monkeypatch.setattr(cache_module, "entry_problem", full_check)
    assert cache.get(key, request) == RESPONSE
    with pytest.raises(AssertionError):
        cache.get(key)  # without the caller's request, the full check is the only one


def test_entry_read_as_bytes_keeps_what_text_reading_gave(tmp_path: Path) -> None:
    """Entries are read through bare file descriptors: CRLF line ends (an editor on Windows) still
    replay, a large entry is read whole, a directory in an entry's place is unreadable, not a crash."""
    cache, key = stored(tmp_path, content="long " * 40_000)
    path = cache.path_for(key)
    assert path.stat().st_size > 1 << 17 and cache.get(key) == {**RESPONSE, "content": "long " * 40_000}
    path.write_bytes(path.read_bytes().replace(b"\n", b"\r\n"))
    assert cache.get(key) == {**RESPONSE, "content": "long " * 40_000}
    path.unlink()
    path.mkdir()
    with pytest.raises(CorruptEntry, match="unreadable"):
        cache.get(key)


@pytest.mark.parametrize(("sample", "attempt"), [(1, True), (True, 1), (0, 0), (1, 1)])
def test_the_key_tells_values_that_compare_equal_apart(sample: int, attempt: int) -> None:
    """True == 1, but they encode differently: so do their keys."""
    from pytest_evalbench.llm.cache import canonical_json, completion_material

    keys = set()
    for s, a in ((1, 1), (sample, attempt)):
        material = completion_material("e", {}, s, a)
        keys.add(cache_key(material, canonical_json(material)))
        assert cache_key(material, canonical_json(material)) == cache_key(material)
    assert len(keys) == (1 if (type(sample), type(attempt), sample, attempt) == (int, int, 1, 1) else 2)


def test_an_entry_past_the_size_cap_is_refused_unread(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A huge file where an entry belongs (a leftover, or planted) is a corrupt entry named with its
    size cap, never loaded whole into memory; entries under the cap replay as before."""
    from pytest_evalbench.llm import cache as cache_module

    cache, key = stored(tmp_path)
    path = cache.path_for(key)
    monkeypatch.setattr(cache_module, "MAX_ENTRY_BYTES", 200_000)
    assert cache.get(key) == RESPONSE
    reads: list[int] = []
    real_read = cache_module.os.read

    def counting_read(fd: int, n: int) -> bytes:
        data = real_read(fd, n)
        reads.append(len(data))
        return data

    monkeypatch.setattr(cache_module.os, "read", counting_read)
    path.write_bytes(path.read_bytes() + b" " * 10_000_000)  # still valid JSON, 10 MB past the cap
    with pytest.raises(CorruptEntry) as raised:
        cache.get(key)
    assert "larger than 200,000 bytes: not read" in str(raised.value) and str(path) in str(raised.value)
    assert sum(reads) <= 200_000 + (1 << 16) * 2  # stopped at the cap, not after 10 MB


def test_cache_key_is_canonical() -> None:
    assert cache_key({"a": 1, "b": [1, 2]}) == cache_key({"b": [1, 2], "a": 1})
    assert cache_key({"a": 1}) != cache_key({"a": 2})


@pytest.mark.parametrize("body", [
    {"model": "m", "messages": [{"role": "user", "content": "héllo \u2603 \"quoted\"\n"}], "temperature": 0.5},
    {"model": "m", "messages": [], "response_format": {"type": "json_schema", "json_schema": {"b": 1, "a": [2.0]}}},
])
@pytest.mark.parametrize(("sample", "attempt"), [(0, 0), (3, 2)])
def test_request_key_is_the_cache_key_of_the_call(body: dict[str, Any], sample: int, attempt: int) -> None:
    """The engine hashes the material's canonical JSON into the key: the same key as the material
    encoded anew, the key the cache verifies a stored request against."""
    material = completion_material("openai:https://x/v1", body, sample, attempt)
    assert material == {"endpoint": "openai:https://x/v1", "body": body, "sample": sample, "attempt": attempt}
    assert cache_key(material, canonical_json(material)) == cache_key(material)


def test_cache_keys_stay_what_recorded_caches_hold() -> None:
    """Keys are byte-identical to those every recorded cache (the demo's committed one) is filed under:
    a changed key is a cache that no longer replays."""
    body = {"model": "m", "messages": [{"role": "user", "content": "h\u00e9 \u2603 \"q\""}], "temperature": 0.5}
    for sample, key in ((2, "3dc6b09d5379b5313e05de7b868957d105d123284d119abd72a6a77eb1e94fb4"),
                        (True, "eb7b143686db356bc550c442c1d41c3d6069f3f934436447cbbbf5795b1cc4dd")):
        material = completion_material("openai:https://x/v1", body, sample, 1)
        assert cache_key(material) == cache_key(material, canonical_json(material)) == key


_LEAVES = st.one_of(st.none(), st.booleans(), st.integers(), st.integers(-2**70, 2**70), st.floats(),
                   st.floats(-1e-3, 1e-3), st.text(), st.sampled_from(["5e-7", "0.00001", "null", "e-mail"]))
_DATA = st.recursive(_LEAVES, lambda inner: st.one_of(st.lists(inner, max_size=4), st.tuples(inner, inner),
                                                       st.dictionaries(st.text(max_size=4), inner, max_size=4)),
                     max_leaves=20)


@settings(max_examples=2000, deadline=None)
@given(_DATA)
@example([1e-05, 2.5e-07, float("nan"), None, float("-inf")])
@example(float("nan"))  # orjson writes `null` for the whole text too
@example({"\U0001f600": 1, "\uffff": 2, "é": 3, "e": 4, "\ud800": 5})
@example([[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]])
def test_the_canonical_json_is_the_standard_librarys_to_the_byte(data: Any) -> None:
    """Keys are made from the canonical JSON: whichever encoder makes it, its text is the standard
    library's, for every value (small floats, NaN, huge integers, lone surrogates, any key order)."""
    from pytest_evalbench.llm.cache import _CANONICAL, _holds_non_finite

    assert canonical_json(data) == _CANONICAL.encode(data)
    if not _holds_non_finite(data):  # what `parse_json` gives: it refuses NaN and the infinities
        assert canonical_json(data, parsed=True) == _CANONICAL.encode(data)


def test_data_orjson_refuses_is_encoded_as_the_standard_library_does() -> None:
    """A text subclass or a non-text key: orjson refuses it, the library encodes it (or refuses it
    alike), so no value changes its key with the encoder."""
    import enum

    class Role(str, enum.Enum):
        USER = "user"

    from pytest_evalbench.llm.cache import _CANONICAL

    for data in ({"role": Role.USER}, {2: "a", 1: 2.5}, {True: None}, [2**64, -2**63 - 1]):
        assert canonical_json(data) == _CANONICAL.encode(data)
    for refused in ({"when": object()}, {1: "a", "b": 2}):
        with pytest.raises(TypeError):
            _CANONICAL.encode(refused)
        with pytest.raises(TypeError):
            canonical_json(refused)


def test_identical_concurrent_calls_are_made_once(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from pytest_evalbench.llm.cache import ResponseCache
    from pytest_evalbench.llm.costs import PriceTable
    from pytest_evalbench.llm.engine import Engine, EngineSettings
    from pytest_evalbench.testing import FakeLLMServer

    with FakeLLMServer(lambda r: "same", latency=0.2) as server:
        engine = Engine(EngineSettings(), ResponseCache(tmp_path, "off"), PriceTable())
        endpoint = Endpoint(model="m", base_url=server.base_url, api_key="k")
        messages = [{"role": "user", "content": "hi"}]

        async def many() -> list[str | None]:
            calls = [engine.complete(endpoint, messages, role="target", phase="simulate", sample=0)
                     for _ in range(5)]
            other = engine.complete(endpoint, messages, role="target", phase="simulate", sample=1)
            return [c.content for c in await asyncio.gather(*calls, other)]

        try:
            assert engine.run(many()) == ["same"] * 6
        finally:
            engine.close()
        assert len(server.requests) == 2  # sample 0 once, sample 1 once
        assert engine.stats.cache_hits == 4
