"""``astra new OP --from FILE.cu --entry NAME``: draft an operation around a kernel as written.

The arguments are checked here; the draft itself (``OP/contract.toml``, ``OP/reference.py`` to
fill in and ``OP/production.cu``: header lines that include FILE unchanged) is
:mod:`astra_graph.kernel.drafting`'s. The command writes it and prints what is left to decide.
The draft parses; ``astra validate OP`` fails until the reference is written. OP goes into the
first ``--path`` folder (else the first of ``$ASTRA_KERNEL_PATH``, else the current folder).
"""

from __future__ import annotations

import argparse
import os
import re
from pathlib import Path

from astra_graph.commands import UsageError
from astra_graph.kernel.catalog import PATH_VARIABLE
from astra_graph.kernel.contract import CONTRACT_FILE, read_text
from astra_graph.kernel.drafting import DraftError, draft_operation
from astra_graph.kernel.header import split_entry


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("op", help="name of the new operation (lower case, digits, underscores)")
    p.add_argument("--from", dest="source", required=True, help="the .cu/.cuh file, unchanged")
    p.add_argument("--entry", required=True, help="the __global__ kernel, e.g. ns::kernel")
    p.set_defaults(run=run)


def _destination(args: argparse.Namespace) -> Path:
    env = [p for p in os.environ.get(PATH_VARIABLE, "").split(os.pathsep) if p]
    root = Path((args.path or env or ["."])[0])
    return root / args.op


def run(args: argparse.Namespace) -> int:
    if not re.fullmatch(r"[a-z_][a-z0-9_]*", args.op):
        raise UsageError(
            f"OP: expected lower case letters, digits and underscores, got {args.op!r}"
        )
    source_path = Path(args.source)
    source = read_text(source_path, "kernel file")
    try:
        qualified, _ = split_entry(args.entry)
    except ValueError as exc:
        raise UsageError(f"--entry: {exc}") from None
    folder = _destination(args)
    command = f"astra new {args.op} --from {source_path} --entry {args.entry}"
    try:
        draft = draft_operation(args.op, source_path, source, qualified, folder, command)
    except DraftError as exc:
        raise UsageError(str(exc)) from None
    if (folder / CONTRACT_FILE).exists():
        raise UsageError(f"{folder / CONTRACT_FILE}: exists already; pick another OP or folder")
    folder.mkdir(parents=True, exist_ok=True)
    (folder / CONTRACT_FILE).write_text(draft.contract)
    (folder / "reference.py").write_text(draft.reference)
    (folder / "production.cu").write_text(draft.production)
    print(f"wrote {folder / CONTRACT_FILE}, {folder / 'reference.py'}, {folder / 'production.cu'}")
    print("left to decide:")
    for item in draft.todo:
        print(f"  - {item}")
    print(f"then: astra validate {folder} && astra check {folder}/production.cu <another>.cu")
    return 0
