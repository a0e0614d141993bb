"""Checks of an operation that need no GPU: the one place ``astra validate`` and ``astra compile``
take them from.

* :func:`reference_problem`: the reference imports and, on the smallest suite shape drawn with
  NumPy, returns every written argument with its contract shape and finite values somewhere.
* :func:`interface_check`: THE interface rule, the one function the coding node (before a
  candidate is written), ``astra validate`` / ``astra compile`` and the evaluator's check (before
  its worker runs anything) call, each with the shapes it may name. Per element type: the
  kernel's signature matches the bindings (:func:`astra_graph.kernel.signature.interface_problem`)
  at the tunables checked; on every shape the header's ``requires`` holds at those tunables (the
  worker rejects a candidate that excludes a shape it must run, so an excluded shape is a problem
  here too; other tunable settings may exclude shapes, the tuner skips them there); and for every
  tunable setting the launch geometry where it applies is positive and within the limits of the
  architecture (:func:`astra_graph.harness.geometry.launch_problem`). The architecture is the
  GPU's where the caller knows it (the evaluator's worker), else the target ``sm_90``; it may be
  given as a function, asked only when a geometry is checked, so that a signature mismatch is
  decided without starting a GPU worker.
* :func:`interface_problems`: that check on every suite shape, one line per problem (validate
  and compile).

Each problem is one line; an empty list means the check passed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import NamedTuple

import numpy as np

from astra_graph.harness.cases import make_case
from astra_graph.harness.geometry import launch_problem
from astra_graph.kernel import expr
from astra_graph.kernel.contract import SUITE_NAMES, ContractError, OperationSpec
from astra_graph.kernel.dtypes import DTYPES
from astra_graph.kernel.header import Implementation
from astra_graph.kernel.signature import interface_problem

TINY_CASE_SEED = 0


def suite_shapes(spec: OperationSpec) -> Iterator[tuple[str, dict[str, int]]]:
    for suite in SUITE_NAMES:
        for dims in spec.contract.suite(suite):
            yield suite, dims


def suite_builds(spec: OperationSpec, impl: Implementation) -> list[dict[str, int]]:
    """The specialization values a build for the contract's suites compiles, one per distinct
    value the suites take (``[{}]`` for an implementation without ``specialize``)."""
    return impl.header.specialized_over(dims for _, dims in suite_shapes(spec))


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


Arch = str | Callable[[], str]
"""An architecture (``sm_90``), or a function that finds it (asked at most once per check)."""


class InterfaceProblem(NamedTuple):
    """Why an implementation cannot implement its contract in one element type: one line."""

    dtype: str
    message: str


def interface_check(
    spec: OperationSpec,
    impl: Implementation,
    arch: Arch,
    shapes: Sequence[Mapping[str, int]],
    tunables: Mapping[str, int] | None = None,
) -> list[InterfaceProblem]:
    """The interface rule (module docstring): the first problem per element type, on ``shapes``
    at ``tunables`` (None: the header's defaults, and every setting's geometry)."""
    found: dict[str, str] = {}  # the architecture, once asked
    problems = []
    for dtype_name in spec.contract.dtypes:
        problem = _dtype_problem(
            spec, impl, dtype_name, lambda: _arch(arch, found), shapes, tunables
        )
        if problem:
            problems.append(InterfaceProblem(dtype_name, problem))
    return problems


def _arch(arch: Arch, found: dict[str, str]) -> str:
    if "arch" not in found:
        found["arch"] = arch if isinstance(arch, str) else arch()
    return found["arch"]


def _dtype_problem(
    spec: OperationSpec,
    impl: Implementation,
    dtype_name: str,
    arch: Callable[[], str],
    shapes: Sequence[Mapping[str, int]],
    tunables: Mapping[str, int] | None,
) -> str | None:
    problem = interface_problem(spec, impl, dtype_name, tunables)
    if problem:
        return problem
    dtype = DTYPES[dtype_name]
    checked = {**impl.header.default_tunables(), **(tunables or {})}
    settings = [checked] if tunables is not None else list(impl.header.configurations())
    for dims in shapes:
        label = spec.contract.label(dims)
        try:
            unmet = impl.header.unmet_requirement(dims, dtype, checked)
        except (expr.ExprError, ArithmeticError) as exc:
            return f"{impl.path}: header.requires: {exc} (shape {label} {dtype_name})"
        if unmet:
            return (
                f"{impl.path}: header.requires: {unmet!r} excludes shape {label} ({dtype_name}); "
                "every shape checked must be supported"
            )
        for setting in settings:
            problem = launch_problem(impl.header, dims, dtype, setting, arch(), label)
            if problem:
                return f"{impl.path}: {problem}"
    return None


def interface_problems(spec: OperationSpec, impl: Implementation, arch: str) -> list[str]:
    """:func:`interface_check` on every suite shape, one line per problem."""
    shapes = [dims for _, dims in suite_shapes(spec)]
    return [p.message for p in interface_check(spec, impl, arch, shapes)]
