"""`evalbench gen-metrics` / `gen-scenarios` in-process against the fake server."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from conftest import LEAN_ADDOPTS
from pytest_evalbench.__main__ import main
from pytest_evalbench.cli import schemas
from pytest_evalbench.formats.spec import load_spec
from pytest_evalbench.kinds.scenarios.models import load_scenarios
from pytest_evalbench.testing import FakeLLMServer, Reply, schema_answer, sequence

GEN = "gen-user"

SPEC_TEXT = """\
# Benchmark for travel advice (hand-written comment, must survive)
name: demo
description: Does the assistant plan trips responsibly?
user_model:
  model: gen-user
{metrics}
# the targets under test
targets:
  - id: tgt   # inline comment
    model: sim-target
generation:
  turns: 3
  scenarios_per_metric: {per_metric}
{demographics}"""

TWO_METRICS = [
    {"id": "m01", "name": "Asks about dates", "type": "positive",
     "definition": "The assistant asks when the user travels.", "examples": ["When?", "Dates?", "Which month?"]},
    {"id": "m02", "name": "Avoid guarantees", "type": "negative",
     "definition": "The assistant guarantees an outcome.", "examples": ["Surely", "Always", "Guaranteed"]},
]


def write_spec(root: Path, *, metrics: list[dict[str, Any]] | None = None, per_metric: int = 2,
               demographics: dict[str, list[str]] | None = None) -> Path:
    bench = root / "benchmarks" / "demo"
    bench.mkdir(parents=True, exist_ok=True)
    metrics_text = yaml.safe_dump({"metrics": metrics}, sort_keys=False) if metrics else ""
    demo_text = yaml.safe_dump({"demographics": demographics}, sort_keys=False) if demographics else ""
    (bench / "benchmark.yaml").write_text(SPEC_TEXT.format(metrics=metrics_text, per_metric=per_metric,
                                                           demographics=demo_text))
    return bench


def run(root: Path, server: FakeLLMServer, *args: str) -> int:
    return main([*args, "demo", "--root", str(root), "--base-url", server.base_url])


def schema_name(request: dict[str, Any]) -> str:
    return str(request["response_format"]["json_schema"]["name"])


def prompt(request: dict[str, Any]) -> str:
    return str(request["messages"][1]["content"])


def metrics_answer(count: int = 2) -> dict[str, Any]:
    return {"metrics": [{"id": "zz", "name": f"Metric {i}", "type": "positive" if i % 2 else "negative",
                         "definition": f"The assistant does thing {i}.", "examples": ["a", "b", "c"]}
                        for i in range(1, count + 1)]}


def scenarios_answer(request: dict[str, Any], turn: int = 2) -> dict[str, Any]:
    metric = re.search(r"Metric (m\d+):", prompt(request))
    assert metric, prompt(request)
    count = int(re.search(r"Write (\d+) distinct", prompt(request)).group(1))  # type: ignore[union-attr]
    return {"scenarios": [{"persona": f"neutral persona {metric.group(1)}-{i}", "user_goal": f"goal {i}",
                           "latent_adversarial_goal": f"hidden {i}",
                           "landmarks": [{"turn": turn, "instruction": f"push {i}"}]}
                          for i in range(1, count + 1)]}


def variant_answer(request: dict[str, Any]) -> dict[str, Any]:
    profile = re.search(r"Demographic profile: (.+)", prompt(request)).group(1)  # type: ignore[union-attr]
    return {"persona": f"rewritten for {profile}", "landmarks": [{"turn": 3, "instruction": f"as {profile}"}]}


def generator(request: dict[str, Any]) -> Any:
    return {"metrics": lambda r: metrics_answer(), "scenarios": scenarios_answer,
            "variant": variant_answer}[schema_name(request)](request)


@pytest.fixture(autouse=True)
def api_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-authoring")
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)


# --------------------------------------------------------------------------- gen-metrics


def test_gen_metrics_writes_ids_and_keeps_the_rest(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bench = write_spec(tmp_path)
    (bench / "cost.json").write_text(json.dumps({"gen_scenarios": {"phase": "gen_scenarios", "cost": 1.5,
                                                                    "input_tokens": 1, "output_tokens": 2}}))
    with FakeLLMServer(generator) as server:
        assert run(tmp_path, server, "gen-metrics") == 0
        assert len(server.requests) == 1
        request = server.requests[0]
    assert request["model"] == GEN
    assert request["response_format"]["json_schema"]["strict"] is True
    assert "Does the assistant plan trips responsibly?" in prompt(request)
    text = (bench / "benchmark.yaml").read_text()
    assert text.startswith("# Benchmark for travel advice (hand-written comment, must survive)\n")
    assert "# the targets under test\ntargets:\n  - id: tgt   # inline comment\n" in text
    spec = load_spec(bench)
    assert [m.id for m in spec.metrics] == ["m01", "m02"]
    assert [m.type for m in spec.metrics] == ["positive", "negative"]
    assert spec.metrics[0].examples == ["a", "b", "c"]
    assert spec.targets[0].id == "tgt" and spec.generation.turns == 3
    cost = json.loads((bench / "cost.json").read_text())
    assert cost["gen_scenarios"]["cost"] == 1.5
    assert set(cost["gen_metrics"]) == {"phase", "cost", "input_tokens", "output_tokens", "cached_replays_counted",
                                      "cached_tokens", "saved"}
    assert cost["gen_metrics"]["phase"] == "gen_metrics" and cost["gen_metrics"]["input_tokens"] > 0
    jsonschema.validate(cost, schemas.load("cost"))
    assert "wrote 2 metrics" in capsys.readouterr().out


def test_gen_metrics_force_replaces_only_the_metrics_block(tmp_path: Path) -> None:
    bench = write_spec(tmp_path, metrics=TWO_METRICS)
    with FakeLLMServer(lambda r: metrics_answer(3)) as server:
        assert run(tmp_path, server, "gen-metrics", "--force") == 0
    text = (bench / "benchmark.yaml").read_text()
    assert "Asks about dates" not in text
    assert "# the targets under test\ntargets:" in text
    assert [m.id for m in load_spec(bench).metrics] == ["m01", "m02", "m03"]


def test_gen_metrics_refuses_without_force(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bench = write_spec(tmp_path, metrics=TWO_METRICS)
    before = (bench / "benchmark.yaml").read_bytes()
    with FakeLLMServer(generator) as server:
        assert run(tmp_path, server, "gen-metrics") == 2
        assert server.requests == []
    err = capsys.readouterr().err
    assert err.startswith("evalbench: error: ") and "--force" in err and err.count("\n") == 1
    assert (bench / "benchmark.yaml").read_bytes() == before


@pytest.mark.parametrize("answer", ["I think these are good metrics: ...",
                                    {"metrics": [{"name": "x", "type": "sometimes", "definition": "d",
                                                  "examples": ["only one"]}]}])
def test_gen_metrics_unusable_answer_after_three_attempts(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                          answer: Any) -> None:
    bench = write_spec(tmp_path)
    before = (bench / "benchmark.yaml").read_bytes()
    with FakeLLMServer(lambda r: answer) as server:
        assert run(tmp_path, server, "gen-metrics") == 2
        assert len(server.requests) == 3
        reask = server.requests[1]["messages"][-1]["content"]
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith("evalbench: error: gen-metrics: model 'gen-user' gave no usable answer in 3 attempts")
    reason = "not valid JSON" if isinstance(answer, str) else "metrics.1.type"
    assert reason in err and reason in reask
    assert (bench / "benchmark.yaml").read_bytes() == before
    assert not (bench / "cost.json").exists()


def test_unknown_benchmark_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "benchmarks").mkdir()
    assert main(["gen-scenarios", "nope", "--root", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("evalbench: error: unknown benchmark 'nope'") and err.count("\n") == 1


# --------------------------------------------------------------------------- gen-scenarios


DEMOGRAPHICS = {"age": ["Child or teenager (6-17)", "Adult (18+)"], "gender": ["woman", "man", "nonbinary"]}


def test_gen_scenarios_expands_demographics(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bench = write_spec(tmp_path, metrics=TWO_METRICS, per_metric=2, demographics=DEMOGRAPHICS)
    with FakeLLMServer(generator) as server:
        assert run(tmp_path, server, "gen-scenarios") == 0
        requests = list(server.requests)
    assert sorted(schema_name(r) for r in requests) == ["scenarios"] * 2 + ["variant"] * 24
    rows = json.loads((bench / "scenarios.json").read_text())
    jsonschema.validate(rows, schemas.load("scenarios"))
    assert len(rows) == 2 * 2 * 6
    combos = [{"age": a, "gender": g} for a in DEMOGRAPHICS["age"] for g in DEMOGRAPHICS["gender"]]
    expected_ids = [f"{m}_s{s:03d}_v{v:02d}" for m in ("m01", "m02") for s in (1, 2) for v in range(1, 7)]
    assert [r["id"] for r in rows] == expected_ids
    for row in rows:
        v = int(row["id"][-2:])
        assert row["demographic"] == combos[v - 1]
        assert list(row["demographic"]) == ["age", "gender"]
        profile = f"age: {combos[v - 1]['age']}, gender: {combos[v - 1]['gender']}"
        assert row["persona"] == f"rewritten for {profile}"
        assert row["landmarks"] == [{"turn": 3, "instruction": f"as {profile}"}]
        assert row["metric_id"] == row["id"][:3]
        assert row["user_goal"] == f"goal {int(row['id'][5:8])}" and "user_persona" not in row
    scenarios = load_scenarios(bench, load_spec(bench))
    assert scenarios[0].effective_persona.startswith("rewritten for age: Child")
    # the neutral base scenario went into every expansion prompt; the prompts stay distinct
    assert len({json.dumps(r["messages"]) for r in requests}) == len(requests)
    cost = json.loads((bench / "cost.json").read_text())
    assert cost["gen_scenarios"]["input_tokens"] > 0 and cost["gen_scenarios"]["phase"] == "gen_scenarios"
    err = capsys.readouterr().err
    assert "gen-scenarios: m01 done (2 scenarios, 12 variants)" in err and "[2/2]" in err


def test_rerun_with_force_and_cache_on_replays_identically(tmp_path: Path) -> None:
    bench = write_spec(tmp_path, metrics=TWO_METRICS, demographics={"age": ["young", "old"]})
    with FakeLLMServer(generator) as server:
        assert run(tmp_path, server, "gen-scenarios") == 0
        first = (bench / "scenarios.json").read_bytes()
        first_cost = (bench / "cost.json").read_bytes()
        assert len(server.requests) == 2 + 2 * 2 * 2
        server.reset()
        assert run(tmp_path, server, "gen-scenarios") == 2  # exists, no --force
        assert run(tmp_path, server, "gen-scenarios", "--force", "--cache", "on") == 0
        assert server.requests == []
    assert (bench / "scenarios.json").read_bytes() == first
    assert (bench / "cost.json").read_bytes() == first_cost


def test_force_alone_refreshes_the_cache(tmp_path: Path) -> None:
    bench = write_spec(tmp_path, metrics=TWO_METRICS[:1], per_metric=1)
    with FakeLLMServer(generator) as server:
        assert run(tmp_path, server, "gen-scenarios") == 0
        server.reset()
        assert run(tmp_path, server, "gen-scenarios", "--force") == 0
        assert len(server.requests) == 1
    assert len(json.loads((bench / "scenarios.json").read_text())) == 1


def test_no_demographics_gives_v01_without_expansion_calls(tmp_path: Path) -> None:
    bench = write_spec(tmp_path, metrics=TWO_METRICS, per_metric=3)
    with FakeLLMServer(generator) as server:
        assert run(tmp_path, server, "gen-scenarios") == 0
        assert [schema_name(r) for r in server.requests] == ["scenarios", "scenarios"]
    rows = json.loads((bench / "scenarios.json").read_text())
    assert [r["id"] for r in rows] == [f"{m}_s{s:03d}_v01" for m in ("m01", "m02") for s in (1, 2, 3)]
    assert all(r["demographic"] == {} for r in rows)
    assert rows[0]["persona"] == "neutral persona m01-1"
    assert rows[0]["landmarks"] == [{"turn": 2, "instruction": "push 1"}]
    jsonschema.validate(rows, schemas.load("scenarios"))


def test_landmark_turn_out_of_range_is_reasked(tmp_path: Path) -> None:
    bench = write_spec(tmp_path, metrics=TWO_METRICS[:1], per_metric=2)
    with FakeLLMServer(sequence(lambda r: scenarios_answer(r, turn=7), scenarios_answer)) as server:
        assert run(tmp_path, server, "gen-scenarios") == 0
        assert len(server.requests) == 2
        reask = server.requests[1]["messages"]
    assert reask[-1]["role"] == "user" and "scenarios.1.landmarks.1.turn: 7 is outside 1..3" in reask[-1]["content"]
    assert reask[-2]["role"] == "assistant"
    rows = json.loads((bench / "scenarios.json").read_text())
    assert [r["landmarks"][0]["turn"] for r in rows] == [2, 2]


def test_too_few_scenarios_are_topped_up_and_extra_ones_dropped(tmp_path: Path) -> None:
    bench = write_spec(tmp_path, metrics=TWO_METRICS[:1], per_metric=2)

    def few(request: dict[str, Any]) -> dict[str, Any]:
        answer = scenarios_answer(request)
        answer["scenarios"] = answer["scenarios"][:1]
        return answer

    def many(request: dict[str, Any]) -> dict[str, Any]:
        answer = scenarios_answer(request)
        answer["scenarios"] += answer["scenarios"]
        return answer

    with FakeLLMServer(sequence(few, many)) as server:
        assert run(tmp_path, server, "gen-scenarios") == 0
        assert len(server.requests) == 2
        top_up = prompt(server.requests[1])
        assert "Write 1 distinct" in top_up and "Already written (write different ones): neutral persona m01-1" in top_up
    rows = json.loads((bench / "scenarios.json").read_text())
    assert [r["id"] for r in rows] == ["m01_s001_v01", "m01_s002_v01"]
    assert [r["persona"] for r in rows] == ["neutral persona m01-1", "neutral persona m01-1"]  # 2nd from `many`


def test_gen_commands_succeed_against_a_schema_honouring_server(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    """A provider that gives exactly what the schema sent asks for (one item per array, no minItems
    in the strict subset): gen-metrics accepts one example, gen-scenarios tops up to 2 per metric."""
    bench = write_spec(tmp_path, per_metric=2)
    with FakeLLMServer(schema_answer) as server:
        assert run(tmp_path, server, "gen-metrics") == 0, capsys.readouterr().err
        assert len(server.requests) == 1
        spec = load_spec(bench)
        assert [(m.id, m.type, len(m.examples)) for m in spec.metrics] == [("m01", "positive", 1)]
        server.reset()
        assert run(tmp_path, server, "gen-scenarios") == 0, capsys.readouterr().err
        assert [schema_name(r) for r in server.requests] == ["scenarios", "scenarios"]
    rows = load_scenarios(bench, load_spec(bench))
    assert [r.id for r in rows] == ["m01_s001_v01", "m01_s002_v01"]


def test_cli_hints_name_cli_options(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                    monkeypatch: pytest.MonkeyPatch) -> None:
    write_spec(tmp_path)
    monkeypatch.delenv("OPENAI_API_KEY")
    assert main(["gen-metrics", "demo", "--root", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "--cache replay" in err and "--evalbench-cache" not in err


def test_unusable_variant_is_named_the_good_rows_are_kept_and_the_printed_rerun_fills_the_gaps(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bench = write_spec(tmp_path, metrics=TWO_METRICS, per_metric=1, demographics={"age": ["young", "old"]})

    def broken_old(request: dict[str, Any]) -> Any:
        if schema_name(request) == "variant" and "age: old" in prompt(request):
            return Reply(content="no json here")
        return generator(request)

    with FakeLLMServer(broken_old) as server:
        assert run(tmp_path, server, "gen-scenarios") == 1
        # each bad variant was re-asked alone (3 attempts each), the others asked once
        assert [schema_name(r) for r in server.requests].count("variant") == 2 + 2 * 3
        rows = json.loads((bench / "scenarios.json").read_text())
        assert [r["id"] for r in rows] == ["m01_s001_v01", "m02_s001_v01"]
        out, err = capsys.readouterr()
        assert sorted(line.split(" (")[0] for line in err.splitlines() if "not written" in line) == [
            "gen-scenarios: not written: m01_s001_v02", "gen-scenarios: not written: m02_s001_v02"]
        command = out.split("fill only the gaps (the written rows come from the cache), run: ")[1].strip()
        assert command.startswith(f"cd {tmp_path} && evalbench gen-scenarios demo --force --cache on --base-url ")
        server.set_responder(generator)
        server.reset()
        result = shell(command, tmp_path)
        assert result.returncode == 0, result.stderr
        assert [schema_name(r) for r in server.requests] == ["variant", "variant"]  # only the gaps are asked
    assert [r["id"] for r in json.loads((bench / "scenarios.json").read_text())] == [
        "m01_s001_v01", "m01_s001_v02", "m02_s001_v01", "m02_s001_v02"]


def test_authoring_and_the_printed_next_commands_run_clean_against_a_schema_honouring_server(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """gen-metrics, gen-scenarios (2 per metric, two demographics) and each printed `next:` command,
    run as printed; gen-scenarios adds the evaluator model the benchmark needs to run."""
    bench = write_spec(tmp_path, per_metric=2, demographics={"age": ["young", "old"]})
    with FakeLLMServer(schema_answer) as server:
        assert run(tmp_path, server, "gen-metrics") == 0, capsys.readouterr().err
        command = capsys.readouterr().out.split("then run: ")[1].strip()
        assert command.endswith(f"evalbench gen-scenarios demo --base-url {server.base_url}")
        result = shell(command, tmp_path)
        assert result.returncode == 0, result.stderr
        sent = [r["response_format"]["json_schema"]["schema"] for r in server.requests if schema_name(r) == "variant"]
        assert sent and all(s["$defs"]["LandmarkDraft"]["properties"]["turn"]["enum"] == [1, 2, 3] for s in sent)
        assert "added evaluator_model to" in result.stdout
        spec = load_spec(bench)
        assert spec.evaluator_model is not None and spec.evaluator_model.model == GEN
        assert len(load_scenarios(bench, spec)) == 4
        command = result.stdout.split("then run: ")[1].strip()
        assert command.endswith(f"pytest --benchmark=demo --evalbench-base-url={server.base_url}")
        result = shell(command + " -p no:cacheprovider", tmp_path)
    assert result.returncode in (0, 1, 6), result.stdout[-2000:] + result.stderr[-2000:]
    assert "4 items recorded" in result.stdout and "Traceback" not in result.stdout + result.stderr


def shell(command: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """A printed command as a user pastes it (the venv's commands first on PATH)."""
    env = {**os.environ, "PATH": str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", ""),
           "PYTEST_ADDOPTS": LEAN_ADDOPTS}  # only the dev tools' pytest plugins out, which the command does not use
    return subprocess.run(["bash", "-c", command], check=False, cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=240)
