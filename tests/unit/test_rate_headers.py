"""What an answer says about the endpoint's limits: parsed defensively (hostile values bounded or ignored)."""

from __future__ import annotations

from email.utils import formatdate

import pytest

from pytest_evalbench.llm.shared_limits import MAX_DURATION, MAX_WAIT, parse, parse_duration, retry_after
from pytest_evalbench.testing.rate_window import duration


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
