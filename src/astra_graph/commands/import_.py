"""``astra import FILE.cu [--include DIR ...] [--root DIR] [--op NAME] [--out DIR] [--define M]
[--std c++20]``.

Reads a framework source file exactly as it is in the framework's tree and writes one
operation per kernel launch of its host launchers (:mod:`astra_graph.framework.importer`):
``contract.toml``, a self-contained ``production.cu`` and a ``reference.py`` that runs the
original kernel as the oracle. Prints which compiler ran and why, then one line per launcher:
imported (and where) or not, and why. Exit 0 when at least one launcher came in, 1 when none
did, 2 for bad input (a missing file or folder, a parser not installed).
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from astra_graph.commands import UsageError
from astra_graph.kernel.catalog import PATH_VARIABLE
from astra_graph.kernel.header import DEFAULT_STD, STANDARDS

REPORT_FILE = "import.json"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("source", help="the framework's .cu/.cuh file, unchanged")
    p.add_argument(
        "--include",
        action="append",
        default=[],
        metavar="DIR",
        help="a folder the framework's includes are found in (repeatable)",
    )
    p.add_argument(
        "--root", help="the framework's checkout root (its csrc/, include/ are searched)"
    )
    p.add_argument("--op", help="import only the launcher of this name")
    p.add_argument(
        "--out",
        help=f"where the operations go (default: the first --path, ${PATH_VARIABLE}, or .)",
    )
    p.add_argument("--arch", default="sm_90", help="architecture NVRTC compiles for")
    p.add_argument(
        "--define",
        action="append",
        default=[],
        metavar="NAME[=VALUE]",
        help="a macro the framework's build defines (its -D flags; repeatable)",
    )
    p.add_argument(
        "--std",
        choices=STANDARDS,
        help=f"the C++ standard the framework builds with (default {DEFAULT_STD}; SGLang's JIT "
        "kernels: c++20)",
    )
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from astra_graph.framework.flatten import include_folders
    from astra_graph.framework.importer import import_file
    from astra_graph.framework.parse import ParserUnavailable
    from astra_graph.harness.nvrtc import NvrtcUnavailable

    source = Path(args.source)
    if not source.is_file():
        raise UsageError(f"{source}: not found (expected a .cu or .cuh file)")
    for folder in [*args.include, *([args.root] if args.root else [])]:
        if not Path(folder).is_dir():
            raise UsageError(f"--include/--root {folder}: not a folder")
    env = [p for p in os.environ.get(PATH_VARIABLE, "").split(os.pathsep) if p]
    out = Path(args.out or (args.path or env or ["."])[0])
    folders = include_folders(
        source, [Path(f) for f in args.include], Path(args.root) if args.root else None
    )
    try:
        report = import_file(
            source,
            folders,
            out,
            arch=args.arch,
            only={args.op} if args.op else None,
            defines=tuple(args.define),
            root=Path(args.root) if args.root else None,
            std=args.std,
        )
    except (ParserUnavailable, NvrtcUnavailable) as exc:
        raise UsageError(str(exc)) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"{source}: cannot read: {exc}") from None
    except Exception as exc:  # a construct the reader fails on: said, never a traceback
        raise UsageError(
            f"{source}: the import failed on this file's C++ ({type(exc).__name__}: {exc}) and "
            "stopped there; import.json was not written: please report it with the file"
        ) from None
    if args.op and not report.launchers:
        raise UsageError(f"--op {args.op}: no launcher of that name in {source}")
    print(f"compiler: {report.compiler}; {report.compile_seconds:.2f} s")
    if not report.launchers:
        print(f"{source}: no host function launches a __global__ kernel")
    for result in report.launchers:
        where = f"{result.launcher} -> {result.kernel} (line {result.line})"
        if result.imported:
            print(f"imported {where}: {result.folder} [{', '.join(result.dtypes)}]")
            for note in result.notes:
                print(f"  assumed: {note}")
        else:
            print(f"not imported {where}: {result.reason}")
    out.mkdir(parents=True, exist_ok=True)
    (out / REPORT_FILE).write_text(json.dumps(report.model_dump(), indent=1))
    done = sum(r.imported for r in report.launchers)
    elsewhere = sum(not r.applicable for r in report.launchers)
    other = f" ({elsewhere} not applicable on {args.arch})" if elsewhere else ""
    print(
        f"{done} of {len(report.launchers)} launch sites imported{other}; "
        f"report: {out / REPORT_FILE}"
    )
    return 0 if done else 1
