"""Command-line options, their resolution into `RunSettings` (once, at configure time), and what the xdist
controller tells its workers (the `workerinput` keys, the fixed contiguous shares, a worker's index).

`--benchmark` has no prefix by design (`pytest --benchmark=<name>`); it coexists with pytest-benchmark
because argparse abbreviations are off and its options all read `--benchmark-*`. Every other option is
`--evalbench-*` with an `evalbench_*` dest.

pytest loads this module in every run of a project that has the plugin installed, so it imports nothing
beyond the standard library and pytest at module level: whatever resolving the options needs (engine,
gate, pydantic models) is imported inside the functions that run only with `--benchmark`.
"""

from __future__ import annotations

import argparse
import math
import shlex
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pytest_evalbench.llm import CACHE_MODES
from pytest_evalbench.plugin._compat import worker_count, worker_number

if TYPE_CHECKING:
    from pytest_evalbench.gate.decision import GateSettings
    from pytest_evalbench.gate.paired import CompareRule
    from pytest_evalbench.kinds.run import RunSettings


def _number(text: str, kind: type[int] | type[float], least: float, noun: str, rule: str) -> Any:
    try:
        value = kind(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not {noun}") from None
    if value < least:
        raise argparse.ArgumentTypeError(f"{text!r} {rule}")
    return value


def positive_int(text: str) -> int:
    return int(_number(text, int, 1, "a whole number", "must be at least 1"))


def shard(text: str) -> tuple[int, int]:
    """`K/N` with 1 <= K <= N."""
    index, _, count = text.partition("/")
    try:
        k, n = int(index), int(count)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not K/N (e.g. 2/4)") from None
    if not 1 <= k <= n:
        raise argparse.ArgumentTypeError(f"{text!r}: K must be between 1 and N")
    return k, n


def _non_negative_float(text: str) -> float:
    return float(_number(text, float, 0, "a number", "must not be negative"))


def add_options(parser: pytest.Parser) -> None:
    group = parser.getgroup("evalbench", "LLM evaluation benchmarks (pytest-evalbench)")
    group.addoption("--benchmark", dest="evalbench_benchmark", metavar="NAME", default=None,
                    help="Run the benchmark in benchmarks/NAME/ (every scenario row or dataset case is a test)")
    group.addoption("--evalbench-target", dest="evalbench_targets", action="append", default=[],
                    metavar="ID|[ID=]MODEL",
                    help="Run only this target of benchmark.yaml, or test MODEL instead (repeatable)")
    group.addoption("--evalbench-user-model", dest="evalbench_user_model", metavar="MODEL",
                    help="Override the simulated user's model")
    group.addoption("--evalbench-judge-model", dest="evalbench_judge_model", metavar="MODEL",
                    help="Override the evaluator (judge) model")
    group.addoption("--evalbench-base-url", dest="evalbench_base_url", metavar="URL", type=base_url,
                    help="Send every role to this OpenAI-compatible endpoint (overrides benchmark.yaml "
                         "and OPENAI_BASE_URL)")
    group.addoption("--evalbench-provider", dest="evalbench_provider", choices=("openai", "local"),
                    help="'local' runs every role on the embedded llama.cpp model (needs the [local] extra)")
    group.addoption("--evalbench-cache", dest="evalbench_cache", choices=CACHE_MODES, default="on",
                    help="Response cache: on (read+write), off, refresh (re-request, write), replay "
                         "(read only; a miss is an ERROR, zero network). Default: %(default)s")
    group.addoption("--evalbench-cache-dir", dest="evalbench_cache_dir", metavar="DIR",
                    help="Cache directory. Default: benchmarks/NAME/.evalbench-cache")
    group.addoption("--evalbench-concurrency", dest="evalbench_concurrency", type=positive_int, default=16,
                    metavar="N", help="LLM requests in flight in total (xdist workers split them). "
                                      "Default: %(default)s")
    group.addoption("--evalbench-timeout", dest="evalbench_timeout", type=_non_negative_float, default=60.0,
                    metavar="SECONDS", help="Per-request timeout. Default: %(default)s")
    group.addoption("--evalbench-max-attempts", dest="evalbench_max_attempts", type=positive_int, default=5,
                    metavar="N", help="Attempts per request on 429/5xx/timeouts/connection errors. "
                                      "Default: %(default)s")
    group.addoption("--evalbench-retry-budget", dest="evalbench_retry_budget", type=_non_negative_float,
                    default=120.0, metavar="SECONDS",
                    help="Give up retrying one request after this long. Default: %(default)s")
    group.addoption("--evalbench-max-cost", dest="evalbench_max_cost", type=_non_negative_float, default=None,
                    metavar="USD", help="Spend at most USD in the session (all xdist workers together): each call reserves its "
                                    "worst-case price before it is sent; a call that does not fit is not sent "
                                    "(run incomplete)")
    group.addoption("--evalbench-rate-limit", dest="evalbench_rate_limit", type=_non_negative_float, default=None,
                    metavar="RPM", help="At most RPM requests per minute, shared by all xdist workers")
    group.addoption("--evalbench-max-reply-chars", dest="evalbench_max_reply_chars", type=positive_int,
                    default=50_000, metavar="N",
                    help="Cut longer target replies to N characters (noted in the transcript). Default: %(default)s")
    group.addoption("--evalbench-calibrate", dest="evalbench_calibrate", action="store_true", default=False,
                    help="Judge the human-labelled examples of benchmarks/NAME/calibration.jsonl (one test each) "
                         "and write calibration.json: agreement and Cohen's kappa per metric")
    group.addoption("--evalbench-token-limit", dest="evalbench_token_limit", type=_non_negative_float,
                    default=None, metavar="TPM",
                    help="At most TPM tokens (prompt + completion) per minute, split across xdist workers")
    group.addoption("--evalbench-shard", dest="evalbench_shard", type=shard, default=None, metavar="K/N",
                    help="Run only the K-th of N balanced parts of the items (by hash of node id) and write "
                         "results under benchmarks/NAME/shards/K-of-N/; combine with `evalbench merge`")
    group.addoption("--evalbench-transport", dest="evalbench_transport", choices=("aiohttp", "openai"),
                    default="aiohttp", help="HTTP client: aiohttp (raw JSON on one aiohttp session) or openai "
                                            "(the official SDK). Default: %(default)s")
    group.addoption("--evalbench-estimate", dest="evalbench_estimate", action="store_true", default=False,
                    help="Make no LLM call and write nothing: print per role the calls, tokens, cost and time the "
                         "selected items would take (an estimate)")
    group.addoption("--evalbench-batch", dest="evalbench_batch", type=batch_roles, default=frozenset(),
                    metavar="ROLES", help="Send these roles' calls (a comma list of judge, target, user, or all) "
                                          "through the provider's Batch API: half the price, answers within "
                                          "minutes to hours; a rerun resumes the batches already submitted")
    group.addoption("--evalbench-batch-poll", dest="evalbench_batch_poll", type=_positive_float, default=30.0,
                    metavar="SECONDS", help="Longest wait between two polls of a submitted batch. "
                                            "Default: %(default)s")
    add_gate_options(group)


def batch_roles(text: str) -> frozenset[str]:
    from pytest_evalbench.llm.batch import parse_roles

    try:
        return parse_roles(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _positive_float(text: str) -> float:
    value = float(_number(text, float, 0.001, "a number of seconds", "must be at least 0.001"))
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"{text!r} is not a finite number of seconds")
    return value


def _drop(text: str) -> float:
    """argparse type of `--evalbench-plan`: a drop of the pass rate, above 0 and below 1."""
    value = _number(text, float, 0.0, "a number", "is below 0")
    if not 0 < value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a drop of the pass rate between 0 and 1 (e.g. 0.1)")
    return float(value)


def add_gate_options(group: Any) -> None:
    group.addoption("--evalbench-plan", dest="evalbench_plan", type=_drop, metavar="DROP", default=None,
                    help="Make no LLM call and write nothing: print per target and metric how many cases and "
                         "samples a baseline comparison needs to detect a drop of DROP (e.g. 0.1) with 80%% power, "
                         "at the baseline's pass rates (--evalbench-compare, else 0.5)")
    group.addoption("--evalbench-save-baseline", dest="evalbench_save_baseline", metavar="PATH", nargs="?",
                    const="", default=None,
                    help="Write a baseline file to commit. Default path: benchmarks/NAME/baseline.json")
    group.addoption("--evalbench-compare", dest="evalbench_compare", metavar="PATH", nargs="?", const="",
                    default=None, help="Compare with a baseline file (paired one-sided tests, corrected for multiplicity; "
                                       "flipped cases). "
                                       "Default path: benchmarks/NAME/baseline.json")
    group.addoption("--evalbench-compare-fail", dest="evalbench_compare_fail", type=_compare_rule, metavar="RULE",
                    help="Fail (exit 6) on drops vs the baseline: 'significant' (exact paired test, "
                         "significant after the run's multiplicity correction), 'drop:0.1' (observed drop "
                         "> 0.1 and significant) or 'any' (any observed drop)")
    group.addoption("--evalbench-compare-anyway", dest="evalbench_compare_anyway", action="store_true", default=False,
                    help="Compare targets whose judge, simulated user, check rules or plugin version changed since the "
                         "baseline (by default they are not comparable and not evaluated)")
    group.addoption("--evalbench-accept-incomparable", dest="evalbench_accept_incomparable", action="store_true",
                    default=False,
                    help="Let a run gated against a baseline (--evalbench-compare-fail, max_drop) pass although "
                         "targets are not comparable with it; the summary names them (by default such a run is "
                         "incomplete, exit 7)")
    group.addoption("--evalbench-correction", dest="evalbench_correction", choices=("holm", "bh"), default=None,
                    help="Multiplicity correction over all baseline comparisons of the run: holm (family-wise "
                         "error rate) or bh (Benjamini-Hochberg false discovery rate). Default: benchmark.yaml "
                         "gate.correction, else holm")
    group.addoption("--evalbench-html", dest="evalbench_html", metavar="PATH",
                    help="Where the self-contained HTML report goes (always written; 'none' skips it). "
                         "Default: benchmarks/NAME/report.html")
    group.addoption("--evalbench-markdown", dest="evalbench_markdown", metavar="PATH",
                    help="Also write a Markdown summary here (it is appended to $GITHUB_STEP_SUMMARY when set)")
    group.addoption("--evalbench-store", dest="evalbench_store", metavar="URL", default=None,
                    help="Record the run in this run store (an SQLAlchemy URL, e.g. postgresql+psycopg://host/db; "
                         "'none' records nothing). Default: $EVALBENCH_STORE, else the SQLite file "
                         ".evalbench/runs.sqlite under the rootdir")
    group.addoption("--evalbench-progress-every", dest="evalbench_progress_every", type=float, default=30.0,
                    metavar="SECONDS", help="Without a terminal (CI logs), print a progress line at most this "
                                            "often; 0 after every item, -1 never. Default: %(default)s")


def base_url(text: str) -> str:
    """argparse type of an endpoint URL option (the plugin's and the authoring commands')."""
    from pytest_evalbench.base.safe_text import check_base_url

    try:
        return check_base_url(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _compare_rule(text: str) -> CompareRule:
    from pytest_evalbench.gate.paired import parse_compare_rule

    try:
        return parse_compare_rule(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _path_option(config: pytest.Config, option: str, bench_dir: Path) -> Path | None:
    """A PATH option whose bare form means benchmarks/NAME/baseline.json."""
    value = config.getoption(option)
    if value is None:
        return None
    return Path(value).resolve() if value else bench_dir / "baseline.json"


def compare_path(config: pytest.Config, bench_dir: Path) -> Path | None:
    """The baseline to compare with (`--evalbench-compare`, implied by `--evalbench-compare-fail`)."""
    path = _path_option(config, "evalbench_compare", bench_dir)
    if path is None and config.getoption("evalbench_compare_fail") is not None:
        return bench_dir / "baseline.json"
    return path


def gate_settings(config: pytest.Config, bench_dir: Path, spec_gate: Any, selection: bool = False) -> GateSettings:
    from pytest_evalbench.gate.decision import GateSettings

    rule = config.getoption("evalbench_compare_fail")
    return GateSettings(save_baseline=_path_option(config, "evalbench_save_baseline", bench_dir),
                        compare_fail=rule,
                        case_pass_rate=spec_gate.case_pass_rate,
                        mode=spec_gate.mode, fail_inconclusive=spec_gate.fail_inconclusive,
                        correction=config.getoption("evalbench_correction") or spec_gate.correction,
                        alpha=spec_gate.alpha, min_rows=spec_gate.min_rows, selection=selection,
                        compare_anyway=bool(config.getoption("evalbench_compare_anyway")),
                        accept_incomparable=bool(config.getoption("evalbench_accept_incomparable")),
                        resave_command=_resave_command(config, bench_dir))


def _resave_command(config: pytest.Config, bench_dir: Path) -> str:
    """The command that saves a new baseline where this run compares with one."""
    path = compare_path(config, bench_dir)
    where = "" if path is None or path == bench_dir / "baseline.json" else f"={shlex.quote(str(path))}"
    return f"pytest --benchmark={bench_dir.name} --evalbench-save-baseline{where}"


def check_text_options(config: pytest.Config) -> None:
    """Every evalbench option is text UTF-8 can carry: a command-line byte that is not UTF-8 arrives as a
    lone surrogate (Python's surrogateescape), which no request, result file or report could encode."""
    from pytest_evalbench.base.json_input import has_surrogate

    for dest, value in sorted(vars(config.option).items()):
        if not dest.startswith("evalbench_"):
            continue
        for text in value if isinstance(value, list) else [value]:
            if isinstance(text, str) and has_surrogate(text):
                names = {"evalbench_benchmark": "benchmark", "evalbench_targets": "evalbench_target"}
                option = "--" + names.get(dest, dest).replace("_", "-")
                shown = text.encode("utf-8", "backslashreplace").decode("utf-8")[:200]
                raise pytest.UsageError(f"{option}={shown}: not UTF-8 text (an undecodable byte or a lone "
                                        "surrogate); pass it as UTF-8")


def build_settings(config: pytest.Config) -> RunSettings | None:
    """RunSettings from the command line, or None when `--benchmark` is not given."""
    name = config.getoption("evalbench_benchmark")
    if not name:
        return None
    check_text_options(config)
    from pytest_evalbench.kinds.run import RunSettings
    from pytest_evalbench.llm.engine import EngineSettings

    cache_dir = config.getoption("evalbench_cache_dir")
    max_cost = config.getoption("evalbench_max_cost")
    from pytest_evalbench.base.errors import ConfigError
    from pytest_evalbench.base.safe_text import terminal
    from pytest_evalbench.kinds.run import parse_target_option

    targets = list(config.getoption("evalbench_targets"))
    for value in targets:
        try:
            parse_target_option(value)
        except ConfigError as exc:
            raise pytest.UsageError(terminal(str(exc))) from None
    concurrency = config.getoption("evalbench_concurrency")
    token_limit = config.getoption("evalbench_token_limit") or None
    from pytest_evalbench.plugin._compat import worker_count, worker_input

    workerinput = worker_input(config)
    budget_ledger = None
    if workerinput is not None:
        # xdist workers reserve the one budget in the controller's ledger file (llm/limits.py)

        budget_ledger = workerinput.get(BUDGET_INPUT)
    workers = worker_count(workerinput, 1) if workerinput is not None else 1
    if workerinput is not None and workers > 1:
        # each xdist worker keeps its share of the tokens per minute and of the requests in
        # flight, so the totals stay what the options say
        concurrency = worker_share(workerinput, concurrency)
        token_limit = token_limit / workers if token_limit else None
        if budget_ledger is None and max_cost is not None:  # no ledger from the controller: an even split
            max_cost = max_cost / workers
    return RunSettings(
        benchmark=name,
        targets=targets,
        user_model=config.getoption("evalbench_user_model"),
        judge_model=config.getoption("evalbench_judge_model"),
        base_url=config.getoption("evalbench_base_url"),
        provider=config.getoption("evalbench_provider"),
        cache_mode=config.getoption("evalbench_cache"),
        cache_dir=Path(cache_dir).resolve() if cache_dir else None,
        calibrate=bool(config.getoption("evalbench_calibrate")),
        shard=config.getoption("evalbench_shard"),
        engine=EngineSettings(
            concurrency=concurrency,
            timeout=config.getoption("evalbench_timeout"),
            max_attempts=config.getoption("evalbench_max_attempts"),
            max_retry_seconds=config.getoption("evalbench_retry_budget"),
            max_cost=max_cost,
            budget_ledger=budget_ledger,
            rate_limit=config.getoption("evalbench_rate_limit") or None,
            max_reply_chars=config.getoption("evalbench_max_reply_chars"),
            token_limit=token_limit,
            transport=config.getoption("evalbench_transport"),
            batch_roles=config.getoption("evalbench_batch"),
            batch_poll=config.getoption("evalbench_batch_poll"),
        ),
    )


def benchmark_hint(root: Path, args: list[str]) -> str | None:
    """"Pass --benchmark=NAME" when a collected path is (inside) a benchmark directory."""
    for arg in args:
        path = (root / arg.split("::")[0]).resolve()
        for candidate in (path, *path.parents):
            if (candidate / "benchmark.yaml").is_file() and candidate.parent.name == "benchmarks":
                return (f"evalbench: {arg} is a benchmark; its cases run only with "
                        f"`{shlex.join(['pytest', f'--benchmark={candidate.name}', arg])}`")
    return None


RESULT_FILES = ("results.json", "cost.json", ".usage.json", "case_results.json", "agent_summary.json",
                ".results.lock", "last_run.json", "records.json", ".sessions.json")
"""Files a session writes (or locks) in its output directory: the benchmark's, or a shard's."""
BENCH_FILES = ("last_run.json", "history.jsonl", "calibration.json", ".sessions.json")
"""Files a session writes in the benchmark directory itself."""
RUN_FILES = ("conversations.json", "scores.json", "cost.json", ".usage.json")
"""Files of `runs/<target>/`."""


def check_files(config: pytest.Config, settings: RunSettings, bench_dir: Path) -> None:
    """Before the first LLM call (controller only): every place the session will write. Inside the
    benchmark directory nothing may be (or go through) a symbolic link out of it, and files must be
    regular; paths given on the command line must be regular files or new, in a directory where a
    file can be created; a cache directory the session writes to must be writable. ConfigError names
    the first problem (a usage error, exit 4): a run never learns this after spending money."""
    from pytest_evalbench.base.safe_files import check_dir, check_output_file, check_tree, check_writable_dir
    from pytest_evalbench.kinds.run import CACHE_DIR, SHARDS_DIR, shard_dir

    out = shard_dir(bench_dir, settings.shard) if settings.shard else bench_dir
    runs = out / "runs"
    directories = [out, runs] + ([bench_dir / SHARDS_DIR] if settings.shard else [])
    files = [out / name for name in RESULT_FILES] + [bench_dir / name for name in BENCH_FILES]
    if not config.getoption("evalbench_html"):
        files.append(bench_dir / "report.html")
    if config.getoption("evalbench_save_baseline") == "":
        files.append(bench_dir / "baseline.json")
    cache_entries = []
    if settings.cache_dir is None:  # the default cache is in the benchmark: its subdirectories too
        directories.append(bench_dir / CACHE_DIR)
        files += [bench_dir / CACHE_DIR / ".rate-limit", bench_dir / CACHE_DIR / ".rate-limit.lock"]
        files += [bench_dir / CACHE_DIR / ".endpoint-limits", bench_dir / CACHE_DIR / ".endpoint-limits.lock"]
        cache_entries.append(bench_dir / CACHE_DIR)
    check_tree(bench_dir, directories, files, cache_entries)
    if runs.is_dir():
        for run_dir in sorted(runs.iterdir()):
            if run_dir.is_dir() or run_dir.is_symlink():
                check_tree(bench_dir, [check_dir(run_dir, bench_dir)], [run_dir / name for name in RUN_FILES])
    from pytest_evalbench.plugin._compat import junit_path

    explicit = [("--evalbench-save-baseline", config.getoption("evalbench_save_baseline")),
                ("--evalbench-html", config.getoption("evalbench_html")),
                ("--evalbench-markdown", config.getoption("evalbench_markdown")),
                ("--junitxml", junit_path(config))]
    for option, value in explicit:  # the baseline's directory must exist (as before); reports create theirs
        if value and value.lower() != "none":
            check_output_file(Path(value).resolve(), option, new_dirs=option != "--evalbench-save-baseline")
    if settings.cache_mode in ("on", "refresh"):
        cache_dir = settings.cache_dir or bench_dir / CACHE_DIR
        check_writable_dir(cache_dir, "the response cache directory" + (" (--evalbench-cache-dir)"
                                                                     if settings.cache_dir else ""))


STATS_OUTPUT = "evalbench_stats"
SHARES_INPUT = "evalbench_shares"
"""Set in `workerinput` by the controller when the share scheduler runs this session."""
FILES_INPUT = "evalbench_whole_files"
"""Set in `workerinput` by the controller when xdist sends each data file to one worker (workers
themselves see `--dist no`)."""
SHARED_DISTS = ("load", "worksteal")
BUDGET_INPUT = "evalbench_budget_ledger"
"""Set in `workerinput` by the controller with `--evalbench-max-cost`: the session's ledger file."""


def share_bounds(count: int, workers: int, index: int) -> tuple[int, int]:
    """The contiguous slice [start, stop) of `count` items that worker `index` of `workers` runs.

    The first `count % workers` shares hold one item more; the controller and every worker
    compute the same bounds from the same collection.
    """
    size, extra = divmod(count, workers)
    start = index * size + min(index, extra)
    return start, start + size + (1 if index < extra else 0)


def worker_index(workerinput: Mapping[str, Any]) -> int | None:
    """This worker's position among the workers xdist started (`gw3` -> 3); None for a replacement
    of a crashed worker (xdist numbers those past the initial count), which owns no share."""
    index = worker_number(workerinput)
    return index if index is not None and 0 <= index < worker_count(workerinput) else None


def worker_share(workerinput: Mapping[str, Any], concurrency: int) -> int:
    """This worker's part of the requests in flight (at least one). The budget is not split: all
    workers reserve against one ledger (`BudgetController`)."""
    workers = worker_count(workerinput)
    index = worker_index(workerinput)
    start, stop = share_bounds(concurrency, workers, index if index is not None else workers - 1)
    return max(1, stop - start)
