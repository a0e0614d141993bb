"""``astra report RUN_DIR``: write report.md and a self-contained report.html into a run."""

from __future__ import annotations

import argparse
from pathlib import Path

from astra_graph.commands import UsageError


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("run_dir", type=Path, metavar="RUN_DIR", help="a directory under runs/")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    # imported here: matplotlib would slow down every other subcommand's start
    from astra_graph.report import write_report
    from astra_graph.report.reading import RunLoadError

    try:
        md_path, html_path = write_report(args.run_dir)
    except RunLoadError as exc:
        raise UsageError(str(exc)) from None
    print(md_path)
    print(html_path)
    return 0
