"""The ``astra`` command line. Each subcommand lives in ``astra_graph.commands.<name>``.

Exit codes: 0 success, 1 a negative result (e.g. a rejected candidate), 2 bad input, a missing
GPU or tool, said in one line on stderr, 130 interrupted (Ctrl-C, also while starting; the
process then ends at once, without the interpreter's teardown: see ``_exit_now``). No
traceback reaches the user for expected failures. A reader that closes the pipe early
(``astra kernels | head -1``) ends the command quietly.
``python -m astra_graph.cli`` and ``python -m astra_graph`` behave exactly as ``astra``.

Only the chosen subcommand's module is imported (``astra --help`` lists the summaries below
without importing any): the agent commands pull in LangGraph and LangChain, which take seconds
to import, and ``kernels``, ``compile`` or ``check`` should not pay for them.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import signal
import sys
from collections.abc import Sequence
from types import FrameType
from typing import NoReturn

from astra_graph.commands import INTERRUPTED, UsageError

COMMANDS: dict[str, str] = {
    "kernels": "list the operations and their implementations",
    "new": "draft contract.toml and reference.py from a kernel file",
    "import": "bring in a framework's kernel file as written (every launcher)",
    "validate": "check an operation or a kernel file without a GPU",
    "compile": "compile an implementation and report its resources",
    "report": "write report.md and report.html for a run directory",
    "check": "verify a candidate kernel against a baseline",
    "bench": "time an implementation per shape (and against another)",
    "optimize": "make a kernel faster with the agents, and prove it",
    "reply": "answer the request a waiting run (external agents) stopped at, continue",
    "export": "a run's kernel as a drop-in torch op or a framework patch; verify and gate it",
}
"""Each subcommand and its one-line summary (``astra --help`` shows these)."""
MODULES = {"import": "import_"}
"""Subcommands whose module name differs (``import`` is a Python keyword)."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # one line and exit 2, like every other bad input
        self.exit(2, f"{self.prog}: error: {message}\n")


def _chosen(argv: Sequence[str]) -> str | None:
    """The subcommand named on the command line (its first word that is not an option)."""
    word = next((arg for arg in argv if not arg.startswith("-")), None)
    return word if word in COMMANDS else None


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The parser; with ``argv``, only the subcommand it names gets its arguments (and its
    module imported); without, every subcommand does."""
    chosen = _chosen(argv) if argv is not None else None
    parser = _Parser(prog="astra", description="Make CUDA kernels faster, and prove it.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    for name, summary in COMMANDS.items():
        command = sub.add_parser(name, help=summary, description=summary)
        if argv is None or name == chosen:
            module = MODULES.get(name, name)
            importlib.import_module(f"astra_graph.commands.{module}").add_arguments(command)
            _add_path_option(command)
    return parser


def _add_path_option(command: argparse.ArgumentParser) -> None:
    """Every command finds operations on the same path."""
    from astra_graph.kernel.catalog import PATH_VARIABLE

    command.add_argument(
        "--path",
        action="append",
        metavar="DIR",
        help=f"also look for operations in DIR (repeatable; also ${PATH_VARIABLE})",
    )


def main(argv: Sequence[str] | None = None) -> int:
    arguments = list(sys.argv[1:] if argv is None else argv)
    own_process = argv is None
    try:
        code = _main(arguments, own_process)
    except KeyboardInterrupt:  # Ctrl-C in a quick command, or while a caller's main() starts
        print(_interrupted(arguments), file=sys.stderr)
        code = INTERRUPTED
    except BrokenPipeError:  # the reader went away (| head): nothing more to say, to no one
        _quiet_stdout()
        return 0
    if code == INTERRUPTED and own_process:  # the process's own command line, not a caller's
        _exit_now(code)
    return code


def _interrupted(arguments: Sequence[str]) -> str:
    return f"astra {_chosen(arguments) or ''}: interrupted".replace(" :", ":")


def _stop_while_starting(arguments: Sequence[str]) -> None:
    """Until the command runs, Ctrl-C ends the process at once with the one line and 130.

    The interpreter's own handler raises ``KeyboardInterrupt`` wherever the import is, and a
    library may turn that into its own error: pydantic-core, building a model's validator
    when the signal came, raised ``SchemaError`` with the interrupt inside it (a traceback and
    exit 1, seen once in CI). While starting, nothing has been written, so nothing is lost."""

    def stop(signum: int, frame: FrameType | None) -> None:
        print(_interrupted(arguments), file=sys.stderr)
        _exit_now(INTERRUPTED)

    signal.signal(signal.SIGINT, stop)


def _exit_now(code: int) -> NoReturn:
    """End an interrupted process at once: everything is written and closed by now (run.json,
    the report, the checkpoint; the pool closed with its workers), and the interpreter's
    teardown of the loaded libraries took 0.4 s on 2 idle cores and 2.8 s with 5 runs sharing
    them: most of a stop that issue 26 wants within a second. Only a process's own command
    line ends so (``main(argv)`` from Python returns), after flushing what it printed."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # a closed pipe or stream: nothing lost
            stream.flush()
    os._exit(code)


def _main(arguments: list[str], own_process: bool) -> int:
    if own_process:
        _stop_while_starting(arguments)
    args = build_parser(arguments).parse_args(arguments)
    # imported after parsing: the contract module loads pydantic and NumPy
    from astra_graph.kernel.catalog import set_search_dirs
    from astra_graph.kernel.contract import ContractError

    if own_process:  # started: from here an interrupt is the command's to handle
        signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        set_search_dirs(args.path)
        code = int(args.run(args))
        sys.stdout.flush()  # a closed pipe shows here, inside the handler, not at exit
        return code
    except (ContractError, UsageError) as exc:
        print(f"astra {args.command}: {exc}", file=sys.stderr)
        return 2


def _quiet_stdout() -> None:
    """Point stdout at /dev/null, so that the interpreter's flush at exit finds no closed pipe
    (the remedy the ``signal`` module's documentation gives, "Note on SIGPIPE")."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


if __name__ == "__main__":
    sys.exit(main())
