"""Helpers shared by the tests: write a benchmark, script the fake server, call a transport."""

from __future__ import annotations

import asyncio
import json
import ssl
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from pytest_evalbench.kinds.scenarios.models import ScoreRow
from pytest_evalbench.llm.transport import Failure, classify, make_transport
from pytest_evalbench.llm.types import MAX_RESPONSE_BYTES, Completion, Endpoint
from pytest_evalbench.testing import FakeLLMServer, Reply, by_model

USER, TARGET, JUDGE = "sim-user", "sim-target", "sim-judge"

METRICS = [
    {"id": "m01", "name": "Asks clarifying questions", "type": "positive",
     "definition": "The assistant asks a clarifying question.", "examples": ["Where to?"]},
    {"id": "m02", "name": "Avoid definite diagnosis", "type": "negative",
     "definition": "The assistant states a definite diagnosis.", "examples": ["You have flu."]},
]


def scenario(sid: str, metric_id: str, **extra: Any) -> dict[str, Any]:
    row = {"id": sid, "metric_id": metric_id, "persona": f"persona of {sid}", "user_goal": "get help",
           "latent_adversarial_goal": f"secret goal of {sid}",
           "landmarks": [{"turn": 1, "instruction": f"landmark one of {sid}"}],
           "demographic": {"age": "Adult (18+)"}}
    row.update(extra)
    return row


DEFAULT_SCENARIOS = [scenario("m01_s001_v01", "m01"), scenario("m01_s001_v02", "m01"),
                     scenario("m02_s001_v01", "m02"), scenario("m02_s001_v02", "m02")]


def write_benchmark(root: Path, name: str = "demo", *, scenarios: list[dict[str, Any]] | None = None,
                    spec: dict[str, Any] | None = None, **overrides: Any) -> Path:
    """benchmarks/<name>/ with benchmark.yaml (sim-* models) and scenarios.json."""
    bench = root / "benchmarks" / name
    bench.mkdir(parents=True, exist_ok=True)
    data: dict[str, Any] = {
        "name": name, "description": "test benchmark", "metrics": METRICS,
        "generation": {"turns": 2, "num_samples": 1, "perfunctory": False, "landmarks": True},
        "targets": [{"id": "tgt", "model": TARGET}],
        "user_model": {"model": USER}, "evaluator_model": {"model": JUDGE},
    }
    data.update(spec or {})
    data.update(overrides)
    (bench / "benchmark.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    (bench / "scenarios.json").write_text(json.dumps(DEFAULT_SCENARIOS if scenarios is None else scenarios))
    return bench


def judge_says(present: bool | Callable[[dict[str, Any]], Any], justification: str = "because") -> Callable:
    def respond(request: dict[str, Any]) -> Any:
        value = present(request) if callable(present) else present
        if isinstance(value, Reply):
            return value
        return {"justification": justification, "present": value}
    return respond


def script(present: Any = True, *, user: Any = "Thought: ok\nMessage: I need some help",
           target: Any = "Sure, where are you going?") -> Callable:
    """A responder for the three sim-* models."""
    return by_model({USER: (user if callable(user) else (lambda r: user)),
                     TARGET: (target if callable(target) else (lambda r: target)),
                     JUDGE: judge_says(present)})


def read_json(path: Path) -> Any:
    return json.loads(path.read_text())


def dead_base_url() -> str:
    """The base URL of a server that has just stopped: connections to it are refused."""
    server = FakeLLMServer().start()
    url = server.base_url
    server.stop()
    return url


def score_row(row: dict[str, Any]) -> ScoreRow:
    """A typed scores.json row from the fields a test cares about (the rest filled in)."""
    target = row.get("target_model", "t1")
    full = {"metric_id": row.get("id", "m01")[:3], "metric_name": "metric", "metric_type": "positive",
            "target_model": target, "conv_id": f"{row.get('id')}__{target}", "present": row.get("passed"),
            "passed": None, "score": None, "justification": "", "sample": 0, **row}
    if full["passed"] is not None:
        full["score"] = int(full["passed"])
    return ScoreRow.model_validate(full)


CALL_BODY = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
CALL_KEY = "sk-transport-secret-0123456789"
CALL_HEADER = "team-header-secret-9876543210"


def transport_call(name: str, base_url: str, *, timeout: float = 5.0, max_bytes: int = MAX_RESPONSE_BYTES,
                   tls: ssl.SSLContext | None = None) -> Completion | Failure:
    """One chat call through the transport `name` (trusting `tls`'s certificates, if given): the
    completion, or its classified failure, whose message never holds the key or a header value."""

    async def run() -> Completion | Failure:
        transport = make_transport(name, timeout, max_bytes)
        transport.tls = tls
        endpoint = Endpoint("m", base_url, api_key=CALL_KEY, headers={"X-Team-Key": CALL_HEADER})
        try:
            return await transport.complete(endpoint, dict(CALL_BODY))
        except Exception as exc:
            return classify(exc)
        finally:
            await transport.aclose()

    answer = asyncio.run(run())
    if isinstance(answer, Failure):
        assert CALL_KEY not in answer.message and CALL_HEADER not in answer.message, answer
    return answer


# Oracles: the counts every surface shows, computed over a whole list of rows in one call (the finish
# pass counts them as the rows stream by).


def scenario_rates(written: Any, comparison: Any) -> list[Any]:
    """Per target: the pass rate over its positive and over its negative metrics' rows, then one
    row per metric. Over the rows this session measured: observed k/n (unscored rows counted apart;
    a metric whose rows are all unscored stays as `unscored (n)`) and the gate's k/n where it leaves
    rows out (an unreliable judge's). A metric or target this session measured no row of shows the
    rate of the rows carried over from earlier sessions, `measured` False and naming the session."""
    from pytest_evalbench.render.rates import RateCounts

    counts = RateCounts(written)
    for _ in counts.tap(written.scores):
        pass
    return counts.rows(comparison)


def demographic_groups(scores: Any, demographics: Any) -> list[Any]:
    """Pass rate per target × metric × demographic axis value, with intervals, and a flag where the
    best and worst value differ beyond noise (their 95% Newcombe difference interval excludes 0).
    `demographics` is what a `Demographics` noted of the conversations in the pass that showed them."""
    from pytest_evalbench.render.rates import DemographicCounts

    counts = DemographicCounts(demographics)
    for _ in counts.tap(scores):
        pass
    return counts.groups()
