"""Command line: `python -m pytest_evalbench <command>` (also installed as `evalbench`)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from pytest_evalbench.cli.view import add_view_parser
from pytest_evalbench.plugin.options import base_url, positive_int


def _authoring_options() -> argparse.ArgumentParser:
    """Options shared by gen-metrics and gen-scenarios."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("name", help="benchmark name: the directory benchmarks/NAME/ holding benchmark.yaml")
    common.add_argument("--root", type=Path, default=None, metavar="DIR",
                        help="project root that holds benchmarks/ (default: the current directory)")
    common.add_argument("--force", action="store_true",
                        help="regenerate even if the output exists; implies --cache=refresh unless --cache "
                             "is given")
    common.add_argument("--cache", choices=("on", "off", "refresh", "replay"), default=None,
                        help="response cache in benchmarks/NAME/.evalbench-cache (default: on; refresh with "
                             "--force)")
    common.add_argument("--base-url", metavar="URL", type=base_url, help="OpenAI-compatible endpoint for the user model")
    common.add_argument("--model", metavar="MODEL", help="override benchmark.yaml's user_model")
    common.add_argument("--concurrency", type=positive_int, default=8, metavar="N",
                        help="requests in flight at once (default: 8)")
    common.add_argument("--provider", choices=("openai", "local"),
                        help="'local' runs the embedded llama.cpp model (needs the [local] extra)")
    return common


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    cut = argv.index("--") if "--" in argv else len(argv)
    argv, passed = argv[:cut], argv[cut + 1:]  # after `--`: the mutants' pytest run's own arguments
    parser = argparse.ArgumentParser(prog="evalbench", description="pytest-evalbench authoring commands")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("schemas", help="Regenerate the JSON Schemas shipped in pytest_evalbench/schemas/")
    add_view_parser(sub)
    init = sub.add_parser("init", help="Write a working scenario benchmark to start from: benchmarks/NAME/ "
                                       "with benchmark.yaml and scenarios.json")
    init.add_argument("name", help="benchmark name: the directory benchmarks/NAME/ to write")
    init.add_argument("--model", metavar="MODEL", default=None,
                      help="the model of every role (default: gpt-4o-mini; --evalbench-provider=local runs the "
                           "embedded model whatever the name)")
    init.add_argument("--force", action="store_true", help="overwrite an existing benchmark.yaml and scenarios.json")
    init.add_argument("--root", type=Path, default=None, metavar="DIR",
                      help="project root that holds benchmarks/ (default: the current directory)")
    common = _authoring_options()
    sub.add_parser("gen-metrics", parents=[common],
                   help="Draft metrics from benchmark.yaml's name and description (written into it)")
    sub.add_parser("gen-scenarios", parents=[common],
                   help="Write scenarios.json: base scenarios per metric x demographic variants")
    merge = sub.add_parser("merge", help="Combine --evalbench-shard outputs into the files one unsharded run "
                                         "writes (in benchmarks/NAME/)")
    merge.add_argument("name", help="benchmark name: the directory benchmarks/NAME/")
    merge.add_argument("dirs", nargs="+", type=Path, metavar="DIR",
                       help="shard directories (benchmarks/NAME/shards/K-of-N or downloaded CI artifacts)")
    merge.add_argument("--root", type=Path, default=None, metavar="DIR",
                       help="project root that holds benchmarks/ (default: the current directory)")
    merge.add_argument("--store", metavar="URL", default=None,
                       help="record the merged run in this run store (default: $EVALBENCH_STORE, else "
                            ".evalbench/runs.sqlite under --root; 'none' records nothing)")
    rejudge = sub.add_parser("rejudge", help="Judge the stored transcripts k more times (no target or user call) "
                                              "and write runs/<target>/rejudge.json: judge noise after the fact")
    rejudge.add_argument("name", help="benchmark name: the directory benchmarks/NAME/")
    rejudge.add_argument("--samples", type=positive_int, default=3, metavar="K",
                         help="new judgments per transcript and judge (default: 3)")
    rejudge.add_argument("--temperature", type=float, default=None, metavar="T",
                         help="the judges' sampling temperature for these calls (default: benchmark.yaml's)")
    rejudge.add_argument("--target", action="append", default=[], metavar="ID", help="only this target (repeatable)")
    rejudge.add_argument("--cache", choices=("on", "off", "refresh", "replay"), default="on",
                         help="response cache in benchmarks/NAME/.evalbench-cache (default: on)")
    rejudge.add_argument("--judge-model", metavar="MODEL", help="override benchmark.yaml's judge (and panel)")
    rejudge.add_argument("--base-url", metavar="URL", type=base_url, help="OpenAI-compatible endpoint for the judge")
    rejudge.add_argument("--concurrency", type=positive_int, default=8, metavar="N",
                         help="requests in flight at once (default: 8)")
    rejudge.add_argument("--max-cost", type=float, default=None, metavar="USD", help="stop before spending more")
    rejudge.add_argument("--root", type=Path, default=None, metavar="DIR",
                         help="project root that holds benchmarks/ (default: the current directory)")
    mutate = sub.add_parser("mutate", help="Run the benchmark against weakened variants of each model target and "
                                            "report per metric whether the suite detects them "
                                            "(writes benchmarks/NAME/mutants.json); arguments after `--` go to "
                                            "its pytest run (e.g. -- -n 2)")
    mutate.add_argument("name", help="benchmark name: the directory benchmarks/NAME/")
    mutate.add_argument("--root", type=Path, default=None, metavar="DIR",
                        help="project root that holds benchmarks/ (default: the current directory)")
    mutate.add_argument("--base-url", metavar="URL", type=base_url,
                        help="OpenAI-compatible endpoint for every role of the mutants' run (implies "
                             "--provider openai unless --provider is given)")
    mutate.add_argument("--provider", choices=("openai", "local"),
                        help="'local' runs the embedded llama.cpp model (needs the [local] extra)")
    _store_commands(sub)
    args = parser.parse_args(argv)
    if passed and args.command != "mutate":
        parser.error("arguments after `--` are passed to the pytest run of `evalbench mutate` only")
    from pytest_evalbench.base.safe_files import WriteFailed

    try:
        return _run(args, passed)
    except WriteFailed as exc:  # a full disk, whichever command met it: one line naming the file, exit 7
        from pytest_evalbench.base.safe_text import terminal

        print(terminal(f"evalbench {args.command}: {exc}"), file=sys.stderr)
        return 7


def _store_commands(sub: Any) -> None:
    """`runs`, `compare` and `comment`: the run store read back (cli/store.py)."""
    store = argparse.ArgumentParser(add_help=False)
    store.add_argument("--store", metavar="URL", default=None,
                       help="the run store's SQLAlchemy URL (default: $EVALBENCH_STORE, else .evalbench/runs.sqlite "
                            "under --root)")
    store.add_argument("--root", type=Path, default=None, metavar="DIR",
                       help="project root that holds .evalbench/ (default: the current directory)")
    runs = sub.add_parser("runs", parents=[store], help="List the recorded runs, one line each, newest first")
    runs.add_argument("name", nargs="?", default=None, help="only this benchmark's runs")
    compare = sub.add_parser("compare", parents=[store],
                             help="Compare two recorded runs case by case (default: the benchmark's newest two)")
    compare.add_argument("runs", nargs="*", metavar="RUN", help="run ids, older first (`evalbench runs` lists them)")
    compare.add_argument("--benchmark", metavar="NAME", default=None, help="the benchmark whose newest two runs")
    compare.add_argument("--fail-on-regression", action="store_true",
                         help="exit 6 when a metric's drop is significant (the gate's paired test)")
    comment = sub.add_parser("comment", parents=[store],
                             help="On GitHub Actions: post (or update) one pull-request comment with the newest "
                                  "run and its comparison against the base branch's newest run")
    comment.add_argument("name", nargs="?", default=None, help="the benchmark (default: the store's only one)")


def _run(args: argparse.Namespace, passed: list[str]) -> int:
    if args.command == "view":
        from pytest_evalbench.cli.view import run_view

        return run_view(args)
    if args.command in ("runs", "compare", "comment"):
        from pytest_evalbench.cli import store

        root = args.root or Path.cwd()
        if args.command == "runs":
            return store.runs(root, args.name, args.store)
        if args.command == "compare":
            return store.compare(root, args.runs, args.benchmark, args.store, args.fail_on_regression)
        return store.comment(root, args.name, args.store)
    if args.command == "merge":
        return _merge(args.root or Path.cwd(), args.name, args.dirs, args.store)
    if args.command == "init":
        return _init(args.root or Path.cwd(), args.name, args.model, args.force)
    if args.command == "rejudge":
        return _rejudge(args)
    if args.command == "mutate":
        endpoint = [f"--evalbench-base-url={args.base_url}"] if args.base_url else []
        provider = args.provider or ("openai" if args.base_url else None)
        endpoint += [f"--evalbench-provider={provider}"] if provider else []
        return _mutate(args.root or Path.cwd(), args.name, [*endpoint, *passed])
    if args.command == "schemas":
        from pytest_evalbench.cli.schemas import write

        for path in write():
            print(path)
        return 0
    from pytest_evalbench.cli.authoring import AuthoringOptions, run_command

    options = AuthoringOptions(root=args.root or Path.cwd(), force=args.force, cache=args.cache,
                               base_url=args.base_url, model=args.model, concurrency=args.concurrency,
                               provider=args.provider)
    return run_command(args.command, args.name, options)


def _init(root: Path, name: str, model: str | None, force: bool) -> int:
    from pytest_evalbench.base.errors import EvalbenchError
    from pytest_evalbench.base.safe_text import terminal
    from pytest_evalbench.cli.init import DEFAULT_MODEL, init_benchmark, next_commands

    try:
        bench_dir = init_benchmark(root, name, model=model or DEFAULT_MODEL, force=force)
    except EvalbenchError as exc:
        print(terminal(f"evalbench init: error: {' '.join(str(exc).split())}"), file=sys.stderr)
        return 2
    print(f"init: wrote {bench_dir}/benchmark.yaml (1 target, 2 metrics) and {bench_dir}/scenarios.json "
          "(3 scenarios)")
    local, endpoint = next_commands(root, name)
    print(f"next: edit them, then run the benchmark on the embedded model (needs the [local] extra):\n  {local}\n"
          f"or on any OpenAI-compatible endpoint (yours in place of this URL; OPENAI_API_KEY if it needs one):"
          f"\n  {endpoint}")
    return 0


def _merge(root: Path, name: str, dirs: list[Path], store: str | None) -> int:
    from pytest_evalbench.base.errors import EvalbenchError
    from pytest_evalbench.base.safe_text import terminal
    from pytest_evalbench.cli.merge import item_count, merge_shards, record_merge

    try:
        bench_dir, records = merge_shards(root, name, dirs)
        total = item_count(root, name)
    except EvalbenchError as exc:
        print(terminal(f"evalbench merge: {exc}"), file=sys.stderr)  # shards come from other jobs
        return 4
    count = len(records)
    print(f"merged {count} records from {len(dirs)} shard(s) into {bench_dir}")
    status = 0
    if count < total:  # exit 0 promises every row was scored; anything short is exit 7 with the reason
        print(f"evalbench merge: incomplete: {total - count} of the benchmark's {total} items have no record "
              "(a shard missing, or its rows errored or not run)", file=sys.stderr)
        status = 7
    recorded = record_merge(root, name, records, len(dirs), status, store)  # never changes the exit status
    if recorded:
        print(terminal(recorded), file=sys.stderr if "not recorded" in recorded else sys.stdout)
    return status


def _mutate(root: Path, name: str, pytest_args: list[str]) -> int:
    """Exit 0 when every mutant was run and compared; 7 when the mutants' run was incomplete (its
    verdicts are printed but rest on fewer rows); 4 on a usage error."""
    from pytest_evalbench.base.errors import EvalbenchError
    from pytest_evalbench.base.safe_text import terminal
    from pytest_evalbench.cli.mutate import MUTANTS_FILE, SUFFIX, mutate, run_problems

    try:
        report, status = mutate(root, name, pytest_args)
    except EvalbenchError as exc:
        print(terminal(f"evalbench mutate: {exc}"), file=sys.stderr)
        return 4
    for line in report.lines():
        print(terminal(line))
    print(f"results: benchmarks/{name}/{MUTANTS_FILE}; the mutants' run: benchmarks/{name}.mutants/")
    if status not in (0, 1, 6):
        problems = run_problems(root / "benchmarks" / f"{name}{SUFFIX}")
        errored = sum(n for n, _ in problems)
        why = f": {errored} item{'s' if errored != 1 else ''} errored" if problems else ""
        print(f"evalbench mutate: incomplete: the mutants' pytest run ended with exit status {status}{why} "
              f"(its report: benchmarks/{name}{SUFFIX}/report.html)", file=sys.stderr)
        for n, message in problems[:3]:  # each reason once, with what to do as the error says it
            print(terminal(f"  {n} item{'s' if n != 1 else ''}: {message}"), file=sys.stderr)
        if len(problems) > 3:
            print(f"  and {len(problems) - 3} other errors (the report lists them)", file=sys.stderr)
        if problems:
            print(f"  (to run the mutants on another OpenAI-compatible endpoint: evalbench mutate {name} "
                  "--base-url URL)", file=sys.stderr)
        return 7 if status == 7 else status
    return 0


def _rejudge(args: argparse.Namespace) -> int:
    import os

    from pytest_evalbench.base.errors import EvalbenchError
    from pytest_evalbench.base.safe_text import redact, terminal
    from pytest_evalbench.kinds.scenarios.rejudge import RejudgeOptions, rejudge, summary_lines

    root = args.root or Path.cwd()
    options = RejudgeOptions(root=root, samples=args.samples, temperature=args.temperature, cache=args.cache,
                             base_url=args.base_url, judge_model=args.judge_model, concurrency=args.concurrency,
                             max_cost=args.max_cost, targets=args.target)
    try:
        result = rejudge(args.name, options, os.environ)
    except EvalbenchError as exc:  # one line; an endpoint's words are redacted and made printable
        text = " ".join(str(exc).split()).replace("--evalbench-max-cost", "--max-cost")
        print(terminal(redact(f"evalbench rejudge: error: {text}")), file=sys.stderr)
        return 2
    for line in summary_lines(result, root):
        print(terminal(line))
    return 0


if __name__ == "__main__":
    sys.exit(main())
