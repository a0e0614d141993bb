"""``astra reply RUN_DIR [--file F | -]``: answer the request a waiting run stopped at, continue.

The run directory must hold a run with status ``waiting`` (``astra optimize --agents external``
or an agent with ``--agent-model AGENT=external``). The answer (the text of a file, or stdin
with ``-``) is recorded beside the request (``external/NNN-<agent>.answer.txt``) before anything
else happens, then the run continues from its checkpoint until the next request (one line says
where it is, exit 0) or the end (the result, exit codes as ``astra optimize``). The answer goes
through the same extraction, validation and repair as a model's reply. A run killed after the
answer was recorded continues with ``astra optimize --resume RUN_DIR`` without asking again.
Bad input (no such run, a run that waits for nothing, a missing or empty answer file) is one
line, exit 2, and records nothing.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import structlog

from astra_graph.commands import UsageError
from astra_graph.commands.run_output import configure_logging, show_outcome
from astra_graph.harness.compile import gpu_arch
from astra_graph.llm.external import waiting_for
from astra_graph.llm.settings import LLMSettings
from astra_graph.run.runner import ConfigurationError, RunFailed, optimize, read_result

STDIN = "-"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("run_dir", metavar="RUN_DIR", help="the waiting run's directory")
    p.add_argument("stdin", nargs="?", choices=[STDIN], help="read the answer from stdin")
    p.add_argument("--file", "-f", metavar="F", help=f"the answer's file ({STDIN}: stdin)")
    p.add_argument(
        "--base-url", help="the OpenAI-compatible server of the run's non-external agents"
    )
    p.add_argument("--mode", choices=["device", "per-call"], default="device", help="timing mode")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.set_defaults(run=run)


def read_answer(args: argparse.Namespace) -> str:
    source = args.file if args.file is not None else args.stdin
    if source is None:
        raise UsageError(f"the answer: give --file F, or {STDIN} to read it from stdin")
    if args.file is not None and args.stdin is not None:
        raise UsageError(f"the answer: give either --file F or {STDIN}, not both")
    if source == STDIN:
        text = sys.stdin.read()
        where = "stdin"
    else:
        path = Path(source)
        if not path.is_file():
            raise UsageError(f"--file: {path}: not found")
        try:
            text = path.read_text()
        except (OSError, UnicodeDecodeError) as exc:
            raise UsageError(f"--file: {path}: cannot be read as text: {exc}") from None
        where = str(path)
    if not text.strip():
        raise UsageError(f"the answer from {where} is empty")
    return text


def run(args: argparse.Namespace) -> int:
    run_dir = Path(args.run_dir)
    try:
        previous = read_result(run_dir)
    except ConfigurationError as exc:
        raise UsageError(str(exc)) from None
    if previous.status != "waiting" or waiting_for(previous.external) is None:
        raise UsageError(
            f"{run_dir}: waits for no answer (status {previous.status}); "
            f"continue it with astra optimize --resume {run_dir}"
        )
    answer = read_answer(args)
    if gpu_arch() is None:
        raise UsageError("no CUDA GPU found: the harness needs one to verify and time candidates")
    configure_logging(sys.stderr if args.json else sys.stdout)
    log = structlog.get_logger("astra.reply")

    def show(event: dict[str, Any]) -> None:
        fields = dict(event)
        log.info(fields.pop("event", "progress"), **fields)

    try:
        result = optimize(
            None,
            resume=run_dir,
            answer=answer,
            timing_mode=args.mode,
            llm_settings=LLMSettings(base_url=args.base_url),
            on_progress=show,
        )
    except ConfigurationError as exc:
        raise UsageError(str(exc)) from None
    except RunFailed as exc:
        print(
            f"astra reply: {exc}; continue with astra optimize --resume {exc.run_dir}",
            file=sys.stderr,
        )
        return 1
    return show_outcome(result, args.json)
