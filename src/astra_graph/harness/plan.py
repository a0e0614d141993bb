"""Which cases a check runs, and whether the candidate can run them at all.

A check runs every shape of the suites asked for (and the caller's extra shapes) in every
element type, plus, per element type, :data:`RANDOM_SHAPES_PER_PHASE` shapes per serving phase
drawn at random inside the contract's constraints. The random shapes are drawn afresh for
every check from a seed no prompt, log or verdict shows, so a kernel cannot be fitted to them;
they stay within what the baseline supports (its ``requires``) and
:data:`RANDOM_SHAPE_MAX_BYTES`. Per case the plan also fixes the contract parameters (each one
with a ``range`` is drawn log-uniformly in it and rounded to its type, unless the caller set
it) and how many unchecked launches precede the checked ones (0 to
:data:`MAX_UNCHECKED_LAUNCHES`, so no launch count marks the checked runs).

:func:`preflight` runs before any kernel does: a shape the candidate's ``requires`` excludes,
and a launch geometry that cannot be evaluated, is zero, or exceeds the GPU architecture's
limits (``harness.geometry``, the one geometry rule), is an
``interface_mismatch`` for the whole candidate.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from astra_graph.harness.buckets import DECODE_MAX_ROWS, rows_dim
from astra_graph.harness.compile import CompileFailed
from astra_graph.harness.domain import DOMAIN_SUITE, dim_bounds, domain_shapes
from astra_graph.harness.geometry import geometry_problem
from astra_graph.harness.results import RejectReason
from astra_graph.harness.thresholds import Threshold
from astra_graph.kernel import expr
from astra_graph.kernel.contract import OperationSpec
from astra_graph.kernel.dtypes import DTYPES

RANDOM_SUITE = "random"
RANDOM_SHAPES_PER_PHASE = 1
"""Random shapes per check, phase (decode, prefill) and dtype: each dtype gets its own draws,
so a check with two dtypes meets four random shapes in four cases."""
RANDOM_SHAPE_MAX_BYTES = 64 << 20
"""A random shape moves at most this many bytes: large enough for prefill rows of every contract
here, small enough that the random cases cost milliseconds."""
RANDOM_DRAWS = 400
"""Tries to draw one random shape inside every constraint before the phase is left short (the
first half keep the phase's top stratum, the rest do without it)."""
RANDOM_BEYOND_SUITES = 4
"""A dim the contract leaves unbounded is drawn up to this multiple of the largest value its suites
use: models beyond the suites' (128 heads, 16k-32k-token prefill chunks) are inside the contract,
and red-team kernels wrong only above the suites' largest token count (8192) or head count (64)
passed every check on the H100 (2026-11-24) while draws stopped there."""
TOP_STRATUM = 2.0
"""Each check draws every dim once in its top stratum, the top factor of two of its drawable range:
the decode shape draws every other dim there, the prefill shape the row dim. A red-team kernel
wrong only for hidden above 16392 (of up to 32768) passed about 72% of checks while every dim was
log-uniform over its whole range."""
MAX_UNCHECKED_LAUNCHES = 3


@dataclass(frozen=True)
class CaseSpec:
    suite: str
    dims: dict[str, int]
    dtype: str
    params: dict[str, float] = field(default_factory=dict)
    """Contract parameters (e.g. eps) for this case."""
    unchecked: int = 0
    """Launches before the checked runs whose outputs are not compared."""
    kind: str = ""
    """For a domain case, which limit its shape probes (``harness.domain``)."""
    seed: int | None = None
    """The plan's seed, recorded in a rejection's evidence (replays the plan's shapes)."""

    def progress(self, step: str) -> dict[str, Any]:
        return {"step": step, "suite": self.suite, "dims": self.dims, "dtype": self.dtype}


def draw_params(
    spec: OperationSpec, given: Mapping[str, float], rng: np.random.Generator
) -> dict[str, float]:
    """Every contract parameter: the caller's value, else a draw in its range, else its default.

    Float32 parameters are rounded to float32, so the reference uses the value the kernel gets.
    """
    params: dict[str, float] = {}
    for scalar in spec.contract.scalars:
        if scalar.default is None:
            continue
        if scalar.name in given:
            value = float(given[scalar.name])
        elif scalar.range is not None:
            low, high = scalar.range
            value = float(math.exp(rng.uniform(math.log(low), math.log(high))))
        else:
            value = float(scalar.default)
        if scalar.dtype == "float32":
            value = float(np.float32(value))
        params[scalar.name] = value
    return params


def _dim_range(spec: OperationSpec, name: str) -> tuple[int, int]:
    """(lowest, highest) value to draw for a dim: the contract's limits, else up to
    :data:`RANDOM_BEYOND_SUITES` times the largest value of its suites."""
    contract = spec.contract
    dim = contract.dims[name]
    seen = [dims[name] for suite in ("tuning", "heldout", "edge") for dims in contract.suite(suite)]
    high = dim.max if dim.max is not None else RANDOM_BEYOND_SUITES * max([*seen, dim.min])
    return dim.min, max(dim.min, high)


def _log_uniform_int(rng: np.random.Generator, low: int, high: int, multiple: int) -> int:
    # a dim that may be 0 (rotary_embedding's neox layout flag) is drawn as value + 1 and shifted
    # back, so 0 is drawn too; dims of minimum 1 or more are drawn exactly as before
    shift = 1 if low == 0 else 0
    value = math.exp(rng.uniform(math.log(low + shift), math.log(high + shift + 1))) - shift
    value = int(value) // multiple * multiple
    first = -(-low // multiple) * multiple
    return max(first, min(value, high // multiple * multiple))


def random_shapes(
    spec: OperationSpec,
    rng: np.random.Generator,
    supported: Callable[[Mapping[str, int]], bool],
    dtype: str,
) -> list[dict[str, int]]:
    """:data:`RANDOM_SHAPES_PER_PHASE` shapes per phase inside every constraint, each dim once in
    its top stratum (:data:`TOP_STRATUM`) where the constraints allow."""
    contract = spec.contract
    rows = rows_dim(spec)
    shapes: list[dict[str, int]] = []
    for phase in ("decode", "prefill"):
        drawn = 0
        for attempt in range(RANDOM_DRAWS):
            if drawn == RANDOM_SHAPES_PER_PHASE:
                break
            stratified = attempt < RANDOM_DRAWS // 2
            dims = {}
            for name, dim in contract.dims.items():
                low, high = _dim_range(spec, name)
                if name == rows:
                    if phase == "decode":
                        high = min(high, DECODE_MAX_ROWS)
                    else:
                        low = max(low, DECODE_MAX_ROWS + 1)
                    if low > high:
                        break
                if stratified and (name == rows) == (phase == "prefill"):  # its top stratum
                    low = max(low, math.ceil(high / TOP_STRATUM))
                dims[name] = _log_uniform_int(rng, low, high, dim.multiple_of)
            if len(dims) != len(contract.dims):
                break
            if (
                contract.shape_problem(dims) is None
                and contract.bytes_for(dims, dtype) <= RANDOM_SHAPE_MAX_BYTES
                and supported(dims)
                and dims not in shapes
            ):
                shapes.append(dims)
                drawn += 1
    return shapes


def plan_cases(
    spec: OperationSpec,
    suites: Sequence[str],
    extra_shapes: Sequence[Mapping[str, int]],
    rng: np.random.Generator,
    *,
    params: Mapping[str, float] | None = None,
    supported: Callable[[Mapping[str, int]], bool] = lambda dims: True,
    random: bool = True,
    domain: bool = False,
    seed: int | None = None,
    thresholds: Sequence[Threshold] = (),
) -> list[CaseSpec]:
    """Every (shape, dtype) case of the check, random shapes included (see the docstring);
    with ``domain`` also the domain suite of every dtype (``harness.domain``), last.

    ``seed`` is recorded in every case (the caller seeded ``rng`` with it)."""
    contract = spec.contract
    shaped = [(suite, dims) for suite in suites for dims in contract.suite(suite)]
    shaped += [("extra", dict(dims)) for dims in extra_shapes]
    planned = [(suite, dims, dtype, "") for suite, dims in shaped for dtype in contract.dtypes]
    if random:
        for dtype in contract.dtypes:
            drawn = random_shapes(spec, rng, supported, dtype)
            planned += [(RANDOM_SUITE, dims, dtype, "") for dims in drawn]
    if domain:
        widths: set[int] = set()  # the 2^31 shapes once per element width (see domain_shapes)
        for dtype in contract.dtypes:
            width = DTYPES[dtype].itemsize
            shapes = domain_shapes(spec, dtype, rng, thresholds, offsets=width not in widths)
            widths.add(width)
            planned += [(DOMAIN_SUITE, shape.dims, dtype, shape.kind) for shape in shapes]
    return [
        CaseSpec(
            suite,
            dims,
            dtype,
            params=draw_params(spec, params or {}, rng),
            unchecked=int(rng.integers(0, MAX_UNCHECKED_LAUNCHES + 1)),
            kind=kind,
            seed=seed,
        )
        for suite, dims, dtype, kind in planned
    ]


# --- preflight ---------------------------------------------------------------------------------


def _domain_of(spec: OperationSpec, clause: str) -> str:
    """The contract's domain of the dims a ``requires`` clause names, e.g. ``tokens <= 65536``."""
    named = [n for n in spec.contract.dims if n in expr.names(clause)] or list(spec.contract.dims)
    parts = []
    for name in named:
        low, high = dim_bounds(spec, name)
        parts.append(f"{low} <= {name} <= {high}")
    return ", ".join(parts)


@dataclass(frozen=True)
class Preflight:
    """What preflight found: the first case the candidate cannot run (reason, problem), and the
    ``requires`` clauses that narrow the domain where partial kernels are allowed."""

    case: CaseSpec | None = None
    reason: RejectReason = "interface_mismatch"
    problem: str = ""
    kernel_domain: tuple[str, ...] = ()
    excluded: frozenset[int] = frozenset()
    """Indexes of the cases outside the kernel's own domain (partial kernels: not run)."""


def preflight(
    kernel: Any,
    cases: Sequence[CaseSpec],
    arch: str,
    static_smem: Callable[[Mapping[str, int]], int] | None = None,
    *,
    spec: OperationSpec | None = None,
    partial: bool = False,
) -> Preflight:
    """The first case the candidate cannot run on ``arch`` (see :class:`Preflight`).

    ``kernel`` has ``unsupported(dims)`` and ``geometry(dims)`` (a LoadedKernel); the limits
    are ``harness.geometry``'s, the one rule every checker uses; ``static_smem`` gives the
    kernel's static shared memory at a shape (0 where not given).
    Every planned shape is inside the contract, so a ``requires`` that excludes one is narrower
    than the contract's domain: reason ``domain`` naming the clause and the domain (with
    ``spec``), unless ``partial`` allows partial kernels: the clause is then recorded and its
    cases are not run. A launch
    geometry over a limit at a domain or random shape is ``domain`` too (a real call would be
    refused); at a suite shape, or a zero or negative size anywhere, ``interface_mismatch``.
    """
    narrowing: list[str] = []
    excluded: set[int] = set()
    for index, case in enumerate(cases):
        unmet = kernel.unsupported(case.dims)
        if unmet is not None:
            if spec is None:
                return Preflight(
                    case, problem=f"the candidate does not support this shape (requires {unmet})"
                )
            if partial:
                excluded.add(index)
                if unmet not in narrowing:
                    narrowing.append(unmet)
                continue
            return Preflight(
                case,
                "domain",
                f"requires {unmet} is narrower than the contract's domain "
                f"({_domain_of(spec, unmet)})",
            )
        try:
            grid, block, smem = kernel.geometry(case.dims)
        except CompileFailed as exc:  # a kernel built per shape (specialize): this shape's build
            return Preflight(case, "compile_error", str(exc))
        except (expr.ExprError, ArithmeticError, ValueError) as exc:
            return Preflight(case, problem=f"the launch geometry cannot be evaluated: {exc}")
        static = static_smem(case.dims) if static_smem is not None else 0
        problem = geometry_problem(grid, block, smem, arch, static)
        if problem:
            # over a limit at a shape only the domain or random draws reach: the kernel does not
            # cover the contract's domain; a zero or negative size is an interface bug anywhere
            empty = min(*grid, *block) < 1 or smem < 0
            if case.suite in (DOMAIN_SUITE, RANDOM_SUITE) and not empty:
                where = f" inside the contract's domain ({case.kind or case.suite})"
                return Preflight(case, "domain", f"launch geometry{where}: {problem}")
            return Preflight(case, problem=f"launch geometry: {problem}")
    return Preflight(kernel_domain=tuple(narrowing), excluded=frozenset(excluded))
