"""One view of an endpoint's limits for every process (llm/shared_limits.py): what one learns paces
the others; what an answer says about the limits is parsed defensively (hostile values bounded or
ignored)."""

from __future__ import annotations

import itertools
import json
import multiprocessing
import time
from email.utils import formatdate
from pathlib import Path

import pytest
from spawned import KEY, learn_429, reserve_slots, send_paced

from pytest_evalbench.llm.shared_limits import (
    BURST_RESERVE,
    MARGIN,
    MAX_DURATION,
    MAX_WAIT,
    EndpointState,
    SharedLimits,
    endpoint_key,
    parse,
    parse_duration,
    retry_after,
)
from pytest_evalbench.testing import FakeLLMServer, RateWindow
from pytest_evalbench.testing._handler import duration


@pytest.fixture
def spawn() -> multiprocessing.context.SpawnContext:
    return multiprocessing.get_context("spawn")  # fresh interpreters: nothing shared but the file


def test_endpoint_key_strips_credentials_and_names_the_port() -> None:
    assert endpoint_key("https://user:secret@api.example.com/v1/?key=sk-abc") == "https://api.example.com:443/v1"
    assert endpoint_key("http://127.0.0.1:8000/v1") == KEY
    assert "secret" not in endpoint_key("http://u:secret@[::1]:9/x")


def test_a_429_in_one_process_holds_another(tmp_path: Path, spawn: multiprocessing.context.SpawnContext) -> None:
    path = tmp_path / ".endpoint-limits"
    here = SharedLimits(path)
    assert here.reserve(KEY) <= time.time()  # nothing learned: no wait
    learner = spawn.Process(target=learn_429, args=(str(path),))
    before = time.time()
    learner.start()
    learner.join(30)
    assert learner.exitcode == 0
    slot = here.reserve(KEY)  # this process learned nothing itself
    assert slot >= before + 1.0  # the other process's Retry-After


def test_two_processes_share_the_pace_the_headers_grant(tmp_path: Path,
                                                        spawn: multiprocessing.context.SpawnContext) -> None:
    path = tmp_path / ".endpoint-limits"
    # the burst used up (none of 60 remains): both are paced from their first request
    SharedLimits(path).learn(KEY, parse({"x-ratelimit-limit-requests": "60", "x-ratelimit-remaining-requests": "0",
                                         "x-ratelimit-reset-requests": "60s"}), limited=False)
    with spawn.Pool(2) as pool:
        slots = sorted(s for part in pool.starmap(reserve_slots, [(str(path), 15)] * 2) for s in part)
    gaps = [b - a for a, b in itertools.pairwise(slots)]
    assert len(slots) == 30 and min(gaps) == pytest.approx(60 / 60 * MARGIN, abs=1e-6)  # one schedule for both


def test_without_headers_429s_stretch_the_pace_and_successes_shorten_it() -> None:
    state = EndpointState()
    state.learn(100.0, parse({}), limited=True, tokens=0)
    first = state.interval(100.0)
    assert first > 0
    state.learn(100.1, parse({}), limited=True, tokens=0)  # the same round: no second cut
    assert state.interval(100.1) == first
    state.learn(101.0, parse({}), limited=True, tokens=0)
    assert state.interval(101.0) > first
    for i in range(3000):
        state.learn(102.0 + i / 1000, parse({}), limited=False, tokens=0)
    assert state.interval(106.0) == 0.0  # back to unpaced


def test_tokens_per_minute_pace_requests_by_their_size() -> None:
    state = EndpointState()
    state.learn(0.0, parse({"x-ratelimit-limit-tokens": "60000"}), limited=False, tokens=500)
    assert state.interval(0.0) == pytest.approx(60 * 500 / 60000 * MARGIN)  # 2 requests a second


def test_a_window_used_up_holds_until_the_next_grant() -> None:
    state = EndpointState()
    state.learn(0.0, parse({"x-ratelimit-remaining-requests": "0", "x-ratelimit-reset-requests": "3s"}),
                limited=False, tokens=0)
    assert state.hold == 3.0  # no sustained limit known: the reset
    state = EndpointState()
    state.learn(0.0, parse({"x-ratelimit-limit-requests": "60", "x-ratelimit-remaining-requests": "0",
                            "x-ratelimit-reset-requests": "3s"}), limited=False, tokens=0)
    assert state.hold == 1.0  # one request a second refills before the window's full reset


def test_remaining_requests_are_spread_over_the_time_to_reset() -> None:
    state = EndpointState()
    state.learn(0.0, parse({"x-ratelimit-remaining-requests": "10", "x-ratelimit-reset-requests": "5s"}),
                limited=False, tokens=0)
    assert state.interval(1.0) == 0.5 and state.interval(6.0) == 0.0


def test_hostile_state_file_is_ignored(tmp_path: Path) -> None:
    path = tmp_path / ".endpoint-limits"
    path.write_text('{"http://127.0.0.1:8000/v1": {"hold": "NaN", "next": 1e400, "backoff": [1]}, "x": 3}')
    with pytest.warns(UserWarning, match=r"\.endpoint-limits: unreadable \(number 1e400 is too large"):
        assert SharedLimits(path).reserve(KEY) <= time.time()
    path.write_text("not json")
    with pytest.warns(UserWarning, match=r"\.endpoint-limits: unreadable \(invalid JSON: Expecting value.*\); ignored"):
        assert SharedLimits(path).reserve(KEY) <= time.time()


def test_a_slot_far_in_the_future_is_not_waited_for(tmp_path: Path) -> None:
    path = tmp_path / ".endpoint-limits"
    now = time.time()
    path.write_text(json.dumps({KEY: {"next": now + 1e9, "hold": now + 1e9, "backoff": 1e9, "updated": now}}))
    limits = SharedLimits(path)
    with pytest.warns(UserWarning, match="an entry claims times more than 60s ahead"):
        assert limits.reserve(KEY) <= time.time() + 1  # the whole entry is ignored, once
    assert limits.reserve(KEY) <= time.time() + 1


def test_a_planted_burst_is_bounded() -> None:
    assert EndpointState.of({"burst": 1e9, "next": 5.0}).burst == MAX_WAIT
    assert EndpointState.of({"burst": -3, "next": 5.0}).burst == 0.0


def test_an_unusable_directory_paces_this_process_alone(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    limits = SharedLimits(tmp_path / "file" / ".endpoint-limits")  # its "directory" is a file
    limits.learn(KEY, parse({"retry-after": "2"}), limited=True)
    assert limits.reserve(KEY) >= time.time() + 1.5  # learned, in memory


def refusals(slots: list[float], start: float, tokens: float, capacity: float, rate: float) -> int:
    """Requests a token bucket (`tokens` of `capacity` at `start`, refilled at `rate` a second) would
    refuse, sent at `slots`."""
    refused, at = 0, start
    for slot in sorted(slots):
        tokens, at = min(capacity, tokens + (slot - at) * rate), slot
        if tokens >= 1:
            tokens -= 1
        else:
            refused += 1
    return refused


def bucket_headers(remaining: int, capacity: int, rate: float) -> dict[str, str]:
    """What the fake server's bucket (`rate` a second) answers with `remaining` of `capacity` left."""
    return {"x-ratelimit-limit-requests": f"{rate * 60:g}", "x-ratelimit-remaining-requests": str(remaining),
            "x-ratelimit-reset-requests": duration((capacity - remaining) / rate)}


@pytest.mark.parametrize(("capacity", "remaining"), [(100, 50), (100, 5), (6000, 5000), (6000, 500)])
def test_the_burst_a_provider_grants_is_used_and_never_exceeded(tmp_path: Path, capacity: int, remaining: int) -> None:
    """A 1-second bucket (the fake server's, capacity 100) or a minute's (OpenAI's, 6,000): the claimed
    starts use what remains and the sustained rate, and never ask for more than the bucket holds."""
    limits = SharedLimits(tmp_path / ".endpoint-limits")
    start = time.time()
    limits.learn(KEY, parse(bucket_headers(remaining, capacity, 100.0)), limited=False)
    count = remaining + 300
    slots, at_once = [], 0
    for _ in range(count):
        slots.append(limits.reserve(KEY))
        at_once += slots[-1] <= time.time()
    reserve = BURST_RESERVE * capacity + 1
    ideal = max(0.0, (count - remaining + reserve) / 100.0)  # what remains at once, then 100 a second
    assert refusals(slots, start, remaining, capacity, 100.0) == 0
    assert max(slots) - start <= ideal * MARGIN + 0.05
    assert at_once >= remaining - reserve  # the burst is not paced


def test_requests_started_before_the_limit_was_known_count_against_its_burst(tmp_path: Path) -> None:
    """60 requests leave before any answer; the first answer's window counted only one of them (the
    others are still on their way): the burst granted after it leaves room for them."""
    limits = SharedLimits(tmp_path / ".endpoint-limits")
    start = time.time()
    early = [limits.reserve(KEY) for _ in range(60)]
    assert max(early) <= time.time()  # nothing known: not paced
    limits.learn(KEY, parse(bucket_headers(99, 100, 100.0)), limited=False)
    later = [limits.reserve(KEY) for _ in range(200)]
    assert refusals(early + later, start, 100, 100, 100.0) == 0
    assert max(later) - start <= (260 - 100 + 11) / 100 * MARGIN + 0.1  # and the rest at the granted rate


def test_a_bucket_others_emptied_is_paced_after_at_most_a_second_of_reserve(tmp_path: Path) -> None:
    limits = SharedLimits(tmp_path / ".endpoint-limits")
    now = time.time()
    limits.learn(KEY, parse({"x-ratelimit-limit-requests": "10000", "x-ratelimit-remaining-requests": "0",
                             "x-ratelimit-reset-requests": "1m0s"}), limited=False)  # 10,000 a minute, all used
    first = limits.reserve(KEY) - now
    assert 0.8 <= first <= 1.2  # a second of the rate rebuilt as reserve, not 10% of the minute (6 s)


def test_claims_take_one_lock_and_write_for_several_requests(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import pytest_evalbench.llm.shared_limits as module

    writes: list[str] = []
    original = module.atomic_write_text
    monkeypatch.setattr(module, "atomic_write_text", lambda path, text, root: (writes.append(text),
                                                                                original(path, text, root)))
    limits = SharedLimits(tmp_path / ".endpoint-limits")
    limits.learn(KEY, parse(bucket_headers(0, 100, 100.0)), limited=False)  # paced at 100 a second
    writes.clear()
    slots = [limits.reserve(KEY) for _ in range(100)]
    assert len(set(slots)) == 100 and len(writes) <= 100 // 4, len(writes)
    gaps = [b - a for a, b in itertools.pairwise(slots)]
    assert min(gaps) == pytest.approx(0.01 * MARGIN, abs=1e-6)
    other = SharedLimits(tmp_path / ".endpoint-limits")  # another process's claims follow all of them
    assert other.reserve(KEY) >= max(slots) + 0.01


def test_a_429_its_window_accounts_for_holds_without_stretching_the_pace() -> None:
    state = EndpointState()
    state.learn(100.0, parse(bucket_headers(0, 100, 100.0) | {"retry-after-ms": "10"}), limited=True, tokens=0)
    assert state.backoff == 0.0 and state.interval(100.0) == pytest.approx(0.01 * MARGIN)
    assert state.hold == pytest.approx(100.01)


def test_a_hold_learned_elsewhere_overtakes_slots_claimed_before(tmp_path: Path) -> None:
    path = tmp_path / ".endpoint-limits"
    here = SharedLimits(path)
    here.learn(KEY, parse(bucket_headers(0, 100, 100.0)), limited=False)
    here.reserve(KEY)  # claims a few slots at once
    SharedLimits(path).learn(KEY, parse({"retry-after": "2"}), limited=True)
    assert here.reserve(KEY) >= time.time() + 1.5


@pytest.mark.parametrize(("text", "seconds"), [("1s", 1.0), ("6m0s", 360.0), ("20ms", 0.02), ("1h2m3.5s", 3723.5),
                                               ("1m3.5s", 63.5), ("0.5", 0.5), ("0s", 0.0), ("2m", 120.0)])
def test_openai_durations(text: str, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["soon", "", "1x", "s", "-1s", "1s2", "nan", "inf", "-3", "1e999s", "1" * 80,
                                  "1s 2s", "\u0661s", "1.2.3s"])
def test_hostile_durations_are_ignored(text: str) -> None:
    assert parse_duration(text) in (None, MAX_DURATION)  # "inf" as plain seconds is capped, never infinite


def test_durations_are_capped() -> None:
    assert parse_duration("99999h") == MAX_DURATION and parse_duration("1e300") == MAX_DURATION


def test_retry_after_seconds_ms_and_http_date() -> None:
    assert retry_after({"retry-after": "2"}) == 2.0
    assert retry_after({"retry-after-ms": "250", "retry-after": "1"}) == 0.25  # the precise one wins
    now = 1_000_000_000.0
    assert retry_after({"retry-after": formatdate(now + 30, usegmt=True)}, now=now) == pytest.approx(30.0)
    assert retry_after({"retry-after": formatdate(now - 30, usegmt=True)}, now=now) == 0.0  # in the past: no wait
    assert retry_after({"retry-after": "86400"}) == MAX_WAIT


@pytest.mark.parametrize("value", ["-1", "nan", "inf", "soon", "Fri, 99 Foo 2024", "9" * 100, "", "1e999"])
def test_hostile_retry_after_is_ignored_or_capped(value: str) -> None:
    for name in ("retry-after", "retry-after-ms"):
        got = retry_after({name: value})
        assert got is None or 0 <= got <= MAX_WAIT


def test_retry_after_of_a_broken_mapping_is_none() -> None:
    assert retry_after(None) is None and retry_after({}) is None
    assert retry_after({"retry-after": 5}) is None  # type: ignore[dict-item]  # not a string


def test_ratelimit_headers() -> None:
    info = parse({"x-ratelimit-limit-requests": "3000", "x-ratelimit-remaining-requests": "2999",
                  "x-ratelimit-reset-requests": "20ms", "x-ratelimit-limit-tokens": "150000",
                  "x-ratelimit-remaining-tokens": "0", "x-ratelimit-reset-tokens": "6m0s"})
    assert (info.requests.limit, info.requests.remaining, info.requests.reset) == (3000, 2999, 0.02)
    assert (info.tokens.limit, info.tokens.remaining, info.tokens.reset) == (150000, 0, 360.0)
    assert not info.empty and parse(None).empty and parse({"content-type": "x"}).empty


@pytest.mark.parametrize("value", ["-5", "nan", "inf", "1e999", "lots", "1" * 70, "0"])
def test_hostile_limits_are_ignored(value: str) -> None:
    info = parse({"x-ratelimit-limit-requests": value, "x-ratelimit-remaining-requests": value})
    assert info.requests.limit is None  # zero, negative, non-finite or absurd: no limit learned
    assert info.requests.remaining in (None, 0.0)


def test_the_fake_servers_durations_read_back() -> None:
    for seconds in (0.02, 1.0, 59.5, 360.0, 3723.5):
        assert parse_duration(duration(seconds)) == pytest.approx(seconds)


def test_two_processes_use_the_rate_an_endpoint_grants_with_few_429s(tmp_path: Path,
                                                                     spawn: multiprocessing.context.SpawnContext) -> None:
    """Two processes against the fake server's bucket (50 a second, 50 at once), knowing nothing at
    first: together they send at the rate it grants, its burst included, and few are refused."""
    path, count = tmp_path / ".endpoint-limits", 60
    with FakeLLMServer() as server, spawn.Manager() as manager:
        server.rate_window = RateWindow(3000, burst=1.0)
        barrier = manager.Barrier(2)
        with spawn.Pool(2) as pool:
            sent = sorted(t for part in pool.starmap(send_paced, [(str(path), server.base_url, count, barrier)] * 2)
                          for t in part)
        refused = server.rate_window.limited
    assert refused <= 0.05 * 2 * count, refused
    # ideal: 50 at once, the other 70 at 50 a second (1.4 s); pacing 2% under the rate without the
    # burst takes 2.4 s
    assert sent[-1] - sent[0] <= 2.0, sent[-1] - sent[0]


def test_answers_without_rate_headers_write_nothing_and_still_see_a_pace_learned_elsewhere(tmp_path: Path) -> None:
    path = tmp_path / ".endpoint-limits"
    quiet, other = SharedLimits(path), SharedLimits(path)
    assert parse({}) == parse(None) == parse({"content-type": "application/json"})
    for _ in range(3):
        quiet.reserve("k")
        quiet.learn("k", parse({}), limited=False, tokens=10)
    assert not path.exists() and quiet.state("k") is None
    other.learn("k", parse({"retry-after": "30"}), limited=True)
    quiet.learn("k", parse({}), limited=False, tokens=10)
    assert quiet.reserve("k") >= time.time() + 20  # the hold another process learned
