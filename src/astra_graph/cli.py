"""The ``astra`` command line. Each subcommand lives in ``astra_graph.commands.<name>``.

Exit codes: 0 success, 1 a negative result (e.g. a rejected candidate), 2 bad input, a missing
GPU or tool, said in one line on stderr. No traceback reaches the user for expected failures.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from astra_graph.catalog import PATH_VARIABLE, set_search_dirs
from astra_graph.contract import ContractError

COMMANDS = (
    "kernels",
    "new",
    "validate",
    "compile",
    "report",
    "check",
    "bench",
    "optimize",
    "reply",
)


class UsageError(Exception):
    """Bad input that the user must fix: printed as one line, exit code 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line and exit 2, like every other bad input
        self.exit(2, f"{self.prog}: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="astra", description="Make CUDA kernels faster, and prove it.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    for name in COMMANDS:
        module = importlib.import_module(f"astra_graph.commands.{name}")
        module.add_parser(sub)
    for command in sub.choices.values():  # every command finds operations on the same path
        command.add_argument(
            "--path",
            action="append",
            metavar="DIR",
            help=f"also look for operations in DIR (repeatable; also ${PATH_VARIABLE})",
        )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        set_search_dirs(args.path)
        return int(args.run(args))
    except (ContractError, UsageError) as exc:
        print(f"astra {args.command}: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"astra {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
