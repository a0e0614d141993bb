"""``astra kernels [--json]``: the operations, their dims, dtypes, suites and implementations."""

from __future__ import annotations

import argparse
import json
from typing import Any

from astra_graph.catalog import operations
from astra_graph.contract import SUITE_NAMES, OperationSpec
from astra_graph.header import load_implementation


def add_parser(sub: Any) -> None:
    p = sub.add_parser("kernels", help="list the operations and their implementations")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(run=run)


def describe(spec: OperationSpec) -> dict[str, Any]:
    c = spec.contract
    impls = []
    for path in spec.implementations():
        header = load_implementation(path, c).header
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
    described = [describe(spec) for spec in operations()]
    if args.json:
        print(json.dumps({"operations": described}, indent=2))
        return 0
    for op in described:
        dims = ", ".join(op["dims"])
        sizes = ", ".join(f"{k} {len(v)}" for k, v in op["suites"].items())
        print(f"{op['name']}  [{dims}]  {'/'.join(op['dtypes'])}")
        print(f"  {op['summary']}")
        print(f"  suites: {sizes} shapes")
        for impl in op["implementations"]:
            print(f"  - {impl['name']:<12} {impl['entry']:<36} {impl['description']}")
    return 0
