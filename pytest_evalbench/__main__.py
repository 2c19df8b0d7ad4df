"""Command line: `python -m pytest_evalbench <command>` (also installed as `evalbench`)."""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="evalbench", description="pytest-evalbench authoring commands")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("schemas", help="Regenerate the JSON Schemas shipped in pytest_evalbench/schemas/")
    args = parser.parse_args(argv)
    if args.command == "schemas":
        from .schemas import write

        for path in write():
            print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
