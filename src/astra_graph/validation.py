"""Checks of an operation that need no GPU: the one place ``astra validate`` and ``astra compile``
take them from.

* :func:`reference_problem`: the reference imports and, on the smallest suite shape drawn with
  NumPy, returns every written argument with its contract shape and finite values somewhere.
* :func:`interface_problems`: for every element type, the kernel's signature matches the
  bindings (:func:`astra_graph.signature.interface_problem`), and for every suite shape and
  tunable setting the launch geometry is positive and within the target's limits
  (:func:`astra_graph.harness.geometry.launch_problem`).

Each problem is one line; an empty list means the check passed.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from astra_graph.contract import SUITE_NAMES, ContractError, OperationSpec
from astra_graph.dtypes import DTYPES
from astra_graph.harness.cases import make_case
from astra_graph.harness.geometry import launch_problem
from astra_graph.header import Implementation
from astra_graph.signature import interface_problem

TINY_CASE_SEED = 0


def suite_shapes(spec: OperationSpec) -> Iterator[tuple[str, dict[str, int]]]:
    for suite in SUITE_NAMES:
        for dims in spec.contract.suite(suite):
            yield suite, dims


def smallest_shape(spec: OperationSpec) -> dict[str, int]:
    """The suite shape with the fewest elements (by the product of its dims)."""
    return min(
        (dims for _, dims in suite_shapes(spec)), key=lambda d: int(np.prod(list(d.values())))
    )


def reference_problem(spec: OperationSpec) -> str | None:
    """Why the reference cannot be imported or run on a tiny NumPy case, or None.

    An operation whose reference is its original kernel (``oracle``) is not run here: that
    reference runs on the GPU only; its file must exist.
    """
    where = f"{spec.folder}: reference"
    oracle = spec.contract.oracle
    if oracle is not None:
        return None if (spec.folder / oracle).is_file() else f"{where}: oracle {oracle!r} not found"
    try:
        reference = spec.reference
    except ContractError as exc:
        return str(exc)
    dims = smallest_shape(spec)
    dtype = spec.contract.dtypes[0]
    case = make_case(spec, dims, dtype, np.random.default_rng(TINY_CASE_SEED))
    contract = spec.contract
    inputs = {
        a.name: contract.dtype_of(a, dtype).to_float64(np, case.arrays[a.name])
        for a in contract.args
        if a.role != "output"
    }
    label = contract.label(dims)
    try:
        with np.errstate(all="ignore"):
            out = reference(np, inputs, case.scalars)
    except Exception as exc:  # user code: any error is one line
        return f"{where}: fails on shape {label} ({dtype}): {type(exc).__name__}: {exc}"
    if not isinstance(out, dict):
        return f"{where}: returned {type(out).__name__}, expected a dict of output arrays"
    for arg in contract.args:
        if not arg.written:
            continue
        if arg.name not in out:
            return f"{where}: returned no {arg.name!r} (keys {sorted(out)}) on shape {label}"
        got = np.asarray(out[arg.name])
        expected = contract.shape_of(arg, dims)
        if got.shape != expected:
            return f"{where}: {arg.name!r} has shape {got.shape}, expected {expected} ({label})"
        if not np.isfinite(got).any():
            return f"{where}: {arg.name!r} has no finite value on shape {label}"
    return None


def interface_problems(spec: OperationSpec, impl: Implementation, arch: str) -> list[str]:
    """Signature and launch-geometry problems of one implementation (first per element type)."""
    problems: list[str] = []
    for dtype_name in spec.contract.dtypes:
        problem = interface_problem(spec, impl, dtype_name)
        if problem:
            problems.append(problem)
            continue
        dtype = DTYPES[dtype_name]
        for tunables in impl.header.configurations():
            for _, dims in suite_shapes(spec):
                label = spec.contract.label(dims)
                problem = launch_problem(impl.header, dims, dtype, tunables, arch, label)
                if problem:
                    problems.append(f"{impl.path}: {problem}")
                    break
            else:
                continue
            break
    return problems
