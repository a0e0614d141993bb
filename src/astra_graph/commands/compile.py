"""``astra compile IMPL``: compile with NVRTC for sm_90 (and the local GPU) and show resources.

Before compiling, the signature and the launch geometry on every suite shape are checked as
``astra validate`` checks them (exit 1 with one line per problem).
"""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict
from itertools import product

from astra_graph.commands import UsageError, check_arch
from astra_graph.harness.compile import (
    DEFAULT_ARCH,
    CompileFailed,
    compile_implementation,
    gpu_arch,
)
from astra_graph.harness.nvrtc import NvrtcUnavailable
from astra_graph.harness.validation import interface_problems, suite_builds
from astra_graph.kernel.catalog import resolve
from astra_graph.kernel.dtypes import DTYPES


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("kernel", help="a .cu file, an operation name, or op/impl")
    p.add_argument("--arch", action="append", help=f"target (default {DEFAULT_ARCH} and local GPU)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    spec, impl = resolve(args.kernel)
    for arch in args.arch or []:
        check_arch("--arch", arch)
    arches = args.arch or list(dict.fromkeys([DEFAULT_ARCH, gpu_arch() or DEFAULT_ARCH]))
    problems = [line for arch in arches for line in interface_problems(spec, impl, arch)]
    if problems:  # the same signature and geometry rules as astra validate and the checks
        for line in dict.fromkeys(problems):
            print(
                f"{impl.path}: interface: {line}" if not line.startswith(str(impl.path)) else line
            )
        return 1
    results = []
    builds = suite_builds(spec, impl)  # per element type, and per specialization value
    for arch in arches:
        for dtype_name, values in product(spec.contract.dtypes, builds):
            try:
                kernel = compile_implementation(
                    impl, DTYPES[dtype_name], values, arch=arch, include_dirs=spec.include_paths
                )
            except NvrtcUnavailable as exc:
                raise UsageError(str(exc)) from None
            except CompileFailed as exc:
                if args.json:
                    print(json.dumps({"ok": False, "path": str(impl.path), "log": exc.log}))
                else:
                    print(f"{impl.path}: compile failed for {arch} ({dtype_name}):")
                    print(exc.log.rstrip())
                return 1
            results.append({"arch": arch, "dtype": dtype_name, **asdict(kernel)})
    if args.json:
        print(json.dumps({"ok": True, "path": str(impl.path), "results": results}, indent=2))
        return 0
    print(f"{impl.path}  ({spec.name})")
    for r in results:
        res = r["resources"]
        print(
            f"  {r['arch']:<6} {r['entry']:<40} registers {res['registers']:>3}  "
            f"static smem {res['static_smem_bytes']:>6} B  local {res['stack_frame_bytes']:>4} B"
            f"  spills {res['spill_store_bytes']}/{res['spill_load_bytes']} B"
        )
    return 0
