"""The `evalbench gen-metrics|gen-scenarios` entry: one command run, its one-line report or one error line."""

from __future__ import annotations

import re
import sys

from pytest_evalbench.authoring.generate import AuthoringOptions, gen_metrics, gen_scenarios
from pytest_evalbench.errors import EvalbenchError
from pytest_evalbench.sanitize import terminal

_PYTEST_TO_CLI = ((re.compile(r"--evalbench-cache=(\w+)"), r"--cache \1"),
                  (re.compile(r"--evalbench-base-url\b"), "--base-url"),
                  (re.compile(r"--evalbench-(?:user|judge)-model\b"), "--model"),
                  (re.compile(r"--evalbench-provider\b"), "--provider"),
                  (re.compile(r"--evalbench-concurrency\b"), "--concurrency"))


def cli_hints(message: str) -> str:
    """Messages shared with the pytest plugin name its options; here the CLI's own options are meant."""
    for pattern, replacement in _PYTEST_TO_CLI:
        message = pattern.sub(replacement, message)
    return message


def run_command(command: str, name: str, options: AuthoringOptions) -> int:
    """CLI entry: run one command; any EvalbenchError is one stderr line and exit code 2."""
    commands = {"gen-metrics": gen_metrics, "gen-scenarios": gen_scenarios}
    try:
        summary = commands[command](name, options)
    except EvalbenchError as exc:
        print(terminal(f"evalbench: error: {cli_hints(' '.join(str(exc).split()))}"), file=sys.stderr)
        return 2
    print(summary.line(command))
    if command == "gen-metrics":
        print(f"next: review the metrics in {summary.path}, then run: evalbench gen-scenarios {name}")
    else:
        print(f"next: review {summary.path}, then run: pytest --benchmark={name}")
    return 0
