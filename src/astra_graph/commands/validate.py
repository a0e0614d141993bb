"""``astra validate OP_OR_FILE``: everything about an operation that can be checked without a GPU.

One line per check: the contract parses, the reference imports and runs on a tiny NumPy case,
each implementation's kernel signature matches its bindings, its launch geometry is positive
and within the target's limits on every suite shape and tunable setting, and it compiles with
NVRTC for every element type. Every implementation is checked even when one fails. Exit 0 when
all pass, 1 when any fails, 2 when the target does not exist or NVRTC is missing.
"""

from __future__ import annotations

import argparse
from itertools import product
from pathlib import Path

from astra_graph.commands import UsageError, check_arch
from astra_graph.harness.compile import DEFAULT_ARCH, CompileFailed, compile_implementation
from astra_graph.harness.nvrtc import NvrtcUnavailable
from astra_graph.harness.validation import (
    interface_problems,
    reference_problem,
    smallest_shape,
    suite_builds,
)
from astra_graph.kernel.catalog import contract_folder_of, find_operation
from astra_graph.kernel.contract import CONTRACT_FILE, ContractError, OperationSpec, load_contract
from astra_graph.kernel.dtypes import DTYPES
from astra_graph.kernel.header import load_implementation


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("target", help="an operation name, its folder, or a .cu file")
    p.add_argument("--arch", default=DEFAULT_ARCH, help=f"target (default {DEFAULT_ARCH})")
    p.add_argument("--no-compile", action="store_true", help="skip the NVRTC compile")
    p.set_defaults(run=run)


def _target(text: str) -> tuple[Path, list[Path] | None]:
    """(operation folder, the .cu files to check or None for all of them)."""
    path = Path(text)
    if path.suffix == ".cu":
        if not path.is_file():
            raise UsageError(f"{path}: file not found")
        return contract_folder_of(path), [path]
    if path.is_dir() and (path / CONTRACT_FILE).is_file():
        return path, None
    folder = find_operation(text)
    if folder is None:
        raise UsageError(f"{text}: no such operation, operation folder or .cu file")
    return folder, None


def run(args: argparse.Namespace) -> int:
    check_arch("--arch", args.arch)
    folder, files = _target(args.target)
    failed = False

    def report(ok: bool, what: str, detail: str) -> None:
        nonlocal failed
        failed |= not ok
        print(f"{'ok  ' if ok else 'FAIL'}  {what:<10} {detail}")

    try:
        spec: OperationSpec = load_contract(folder)
    except ContractError as exc:
        report(False, "contract", str(exc))
        return 1
    report(True, "contract", f"{folder / CONTRACT_FILE} ({spec.name})")
    problem = reference_problem(spec)
    tiny = spec.contract.label(smallest_shape(spec))
    ran = f"runs on {tiny} ({spec.contract.dtypes[0]})"
    if spec.contract.oracle is not None:
        ran = f"the original kernel ({spec.contract.oracle}) is the oracle; it runs on the GPU only"
    report(problem is None, "reference", problem or ran)
    paths = files or spec.implementations()
    if not paths:
        report(False, "kernels", f"{folder}: no .cu implementation")
    for path in paths:
        try:
            impl = load_implementation(path, spec.contract)
        except ContractError as exc:
            report(False, "header", str(exc))
            continue
        problems = interface_problems(spec, impl, args.arch)
        for line in problems:
            report(False, "interface", line)
        if not problems:
            settings = len(list(impl.header.configurations()))
            report(
                True,
                "interface",
                f"{path}: signature, geometry on every shape x {settings} settings",
            )
        if args.no_compile:
            continue
        builds = suite_builds(spec, impl)  # per element type, and per specialization value
        for dtype, values in product(spec.contract.dtypes, builds):
            try:
                kernel = compile_implementation(
                    impl, DTYPES[dtype], values, arch=args.arch, include_dirs=spec.include_paths
                )
            except NvrtcUnavailable as exc:
                raise UsageError(f"{exc} (or pass --no-compile)") from None
            except CompileFailed as exc:
                at = f", {values}" if values else ""  # the specialization that failed
                report(False, "compile", f"{exc} ({dtype}{at})")
                continue
            report(True, "compile", f"{path}: {kernel.entry} for {args.arch}")
    return 1 if failed else 0
