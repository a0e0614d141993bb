"""``astra kernels [--json]``: the operations, their dims, dtypes, suites and implementations.

Operations come from the search path (``--path``, ``$ASTRA_KERNEL_PATH``, ``kernels/``). A broken
contract or implementation file is one line (``BROKEN: file: field: problem``) and never hides
the others; the exit code is then 1.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from astra_graph.kernel.catalog import scan, shadowed
from astra_graph.kernel.contract import SUITE_NAMES, ContractError, OperationSpec
from astra_graph.kernel.header import load_implementation


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(run=run)


def describe(spec: OperationSpec) -> dict[str, Any]:
    c = spec.contract
    impls: list[dict[str, Any]] = []
    for path in spec.implementations():
        try:
            header = load_implementation(path, c).header
        except ContractError as exc:  # one broken file is one line, the others still listed
            impls.append({"name": path.stem, "path": str(path), "error": str(exc)})
            continue
        impls.append(
            {
                "name": path.stem,
                "path": str(path),
                "entry": header.entry,
                "description": header.description,
                "tunables": header.tunables,
            }
        )
    return {
        "name": c.name,
        "summary": c.summary,
        "folder": str(spec.folder),
        "dims": {name: d.model_dump(exclude_defaults=True) for name, d in c.dims.items()},
        "dtypes": c.dtypes,
        "args": [
            {"name": a.name, "dtype": a.dtype, "shape": a.shape, "role": a.role} for a in c.args
        ],
        "scalars": [s.model_dump(exclude_none=True, exclude_defaults=True) for s in c.scalars],
        "suites": {name: c.suite(name) for name in SUITE_NAMES},
        "implementations": impls,
    }


def run(args: argparse.Namespace) -> int:
    specs, broken = scan()
    for line in shadowed():  # not broken, but the user should know which one is used
        print(f"astra kernels: warning: {line}", file=sys.stderr)
    described = [describe(spec) for spec in specs]
    broken += [i["error"] for op in described for i in op["implementations"] if "error" in i]
    if args.json:
        print(json.dumps({"operations": described, "broken": broken}, indent=2))
        return 1 if broken else 0
    for op in described:
        dims = ", ".join(op["dims"])
        sizes = ", ".join(f"{k} {len(v)}" for k, v in op["suites"].items())
        print(f"{op['name']}  [{dims}]  {'/'.join(op['dtypes'])}")
        print(f"  {op['summary']}")
        print(f"  suites: {sizes} shapes")
        for impl in op["implementations"]:
            if "error" in impl:
                print(f"  - {impl['name']:<12} BROKEN: {impl['error']}")
            else:
                print(f"  - {impl['name']:<12} {impl['entry']:<36} {impl['description']}")
    for line in broken:
        if not any(line == i.get("error") for op in described for i in op["implementations"]):
            print(f"BROKEN: {line}")
    return 1 if broken else 0
