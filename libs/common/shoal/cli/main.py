"""The `shoal` command: one sub-command per module in shoal.cli.

Each sub-command module exposes `add_parser(subparsers)` (registers its parser and sets
`func=run`) and `run(args) -> int`. Modules are imported lazily so `shoal simulate` never
loads Kafka or Kubernetes clients.
"""

from __future__ import annotations

import argparse
import importlib
import sys

COMMANDS = {
    "simulate": "shoal.cli.simulate",
    "bench": "shoal.cli.bench",
    "dev": "shoal.cli.dev",
    "events": "shoal.cli.events",
    "explain": "shoal.cli.explain",
    "queues": "shoal.cli.queues",
    "demo": "shoal.cli.demo",
}


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="shoal", description="Shoal: a KAI-compatible GPU batch scheduler")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, module_name in COMMANDS.items():
        if only is not None and name != only:
            continue
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name != module_name:
                raise
            continue
        module.add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    first = next((a for a in argv if not a.startswith("-")), None)
    parser = build_parser(first if first in COMMANDS else None)
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
