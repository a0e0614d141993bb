"""The contract's domain as test shapes: every limit a real call can hit, not sample points.

A kernel is exported to a serving engine that calls it with every shape its contract allows,
so each check adds, per element type, the *domain suite* (:data:`DOMAIN_SUITE`) derived from the
dims' ``min`` and ``max`` (a dim without ``max`` uses the largest value the plan draws for it):

* ``min``/``max``: every dim at its minimum, and each dim at its maximum with every other dim at
  its minimum (minimum-size work in the other dims);
* ``widest``: every dim but the rows at its maximum with one row, where per-row shared memory,
  registers and block sizes peak; and ``rows_and_width``: the rows at their maximum with the
  other dims at theirs but the innermost at its minimum (products of rows and heads);
* ``elements_2^31`` / ``bytes_2^31``: the widest rows with just enough rows that the largest
  argument holds more than :data:`OFFSET_LIMIT` elements (or bytes): 32-bit offsets overflow
  there; where the domain cannot get there, the largest element count it allows;
* ``grid_65535``: each dim at :data:`GRID_YZ_LIMIT` and just above (rounded to its
  ``multiple_of``), the others at their minimum: ``gridDim.y``/``z`` refuse more;
* ``non_multiple``: each dim at ``2^k - m``, ``2^k + m`` (``m`` its ``multiple_of``) and ``m``
  times a prime, for a random ``k``, the other dims from a random tuning shape: tile loops that
  skip a tail;
* ``threshold ...``: each constant the candidate's code or ``requires`` compares a dim with
  (``harness.thresholds``), the dim just below and just above it;
* ``sample``: :data:`DOMAIN_SAMPLE_SHAPES` shapes drawn log-uniformly per dim over the whole
  domain, fresh at every check from the plan's seed (OS entropy, never shown to agents;
  recorded in a rejection's evidence so it can be replayed).

Shapes large in memory are kept here; the check (``harness.verify``) runs each with the whole
protocol where it fits the GPU's free memory (:func:`full_check_bytes`), else with one poisoned
run and a row-chunked reference (:func:`light_check_bytes`, contracts whose rows are
independent), else skips it and says so in the verdict's notes.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from astra_graph.harness.thresholds import MAX_THRESHOLDS, Threshold, threshold_values
from astra_graph.kernel.contract import OperationSpec

DOMAIN_SUITE = "domain"
OFFSET_LIMIT = 1 << 31
"""Element and byte counts cross this: a 32-bit signed offset (``int``) overflows there."""
GRID_YZ_LIMIT = 65535
"""``gridDim.y`` and ``gridDim.z`` at most this (CUDA's limit on every architecture): a kernel
launching one block row per token is refused above it."""
DOMAIN_SAMPLE_SHAPES = 2
"""Random shapes over the whole domain per check and element type (log-uniform per dim)."""
UNBOUNDED_FACTOR = 16
"""A dim without a contract ``max`` is taken up to this multiple of its suites' largest value
(the contract should state its maximum; this keeps the domain suite finite without one)."""
FULL_STORAGE_COPIES = 9
"""Copies of every argument in its storage type that the whole protocol holds at once, counted in
``harness.verify.check_case``: the drawn case, the pristine inputs, the arena, the baseline's
arrays, the changed inputs, the second run's written copy, the stale outputs, the poison and the
relocated arena."""
FULL_FLOAT64_COPIES = 8
"""Float64 arrays per argument element the whole protocol holds at its peak (the reference's
inputs and outputs, the second reference, and the reference's own temporaries), counted: 5,
plus the error bounds a reference returns beside its outputs (one per output, in both
references) and the comparison's settled copy of a reference."""
LIGHT_STORAGE_COPIES = 3
"""Storage copies in the light protocol: the drawn inputs, the arena, the inout arguments'
pristine copies."""
LIGHT_TRANSIENT_BYTES_PER_ELEMENT = 8
"""Bytes per element of the largest argument held besides the storage copies, counted: the float32
draw of the inputs (4; ``cases.make_case``), then the poison's float32 draw and the boolean
masks of the checks (4); the row scaling and the reference work in bounded row chunks
(``scenarios.SCALE_CHUNK_ELEMENTS``, ``verify.LIGHT_CHUNK_ELEMENTS``)."""
MEMORY_HEADROOM = 0.85
"""Share of the free GPU memory a case may plan to use: the rest absorbs the memory pool's
rounding and the allocator's fragmentation."""


def plannable_gpu_bytes(cupy: Any) -> int:
    """GPU memory a step may plan to use: the device's free memory and what CuPy's pool holds
    unused (it gives that back and retries when an allocation finds too little), times
    :data:`MEMORY_HEADROOM`. Nothing is freed here: giving the pool's blocks back before every
    timed shape made each shape allocate afresh."""
    free, _ = cupy.cuda.runtime.memGetInfo()
    return int(MEMORY_HEADROOM * (free + cupy.get_default_memory_pool().free_bytes()))


@dataclass(frozen=True)
class DomainShape:
    kind: str
    """Which limit the shape probes (``max``, ``elements_2^31``, ``sample`` ...)."""
    dims: dict[str, int]


def dim_bounds(spec: OperationSpec, name: str) -> tuple[int, int]:
    """(min, max) of a dim's domain: the contract's, else :data:`UNBOUNDED_FACTOR` times the
    suites' largest value."""
    contract = spec.contract
    dim = contract.dims[name]
    low = _round_up(max(dim.min, 1), dim.multiple_of)
    if dim.max is not None:
        return low, max(low, dim.max // dim.multiple_of * dim.multiple_of)
    seen = [d[name] for suite in ("tuning", "heldout", "edge") for d in contract.suite(suite)]
    return low, max(low, UNBOUNDED_FACTOR * max([*seen, low]))


def _round_up(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple


def _clamp(spec: OperationSpec, name: str, value: int) -> int:
    low, high = dim_bounds(spec, name)
    multiple = spec.contract.dims[name].multiple_of
    return max(low, min(high, value // multiple * multiple))


def largest_arg_elements(spec: OperationSpec, dims: Mapping[str, int]) -> int:
    return max(math.prod(spec.contract.shape_of(a, dims)) for a in spec.contract.args)


def largest_arg_bytes(spec: OperationSpec, dims: Mapping[str, int], dtype: str) -> int:
    contract = spec.contract
    return max(
        math.prod(contract.shape_of(a, dims)) * contract.dtype_of(a, dtype).itemsize
        for a in contract.args
    )


def _smallest_prime_at_least(value: int) -> int:
    candidate = max(value, 2)
    while any(candidate % p == 0 for p in range(2, math.isqrt(candidate) + 1)):
        candidate += 1
    return candidate


def domain_shapes(
    spec: OperationSpec,
    dtype: str,
    rng: np.random.Generator,
    thresholds: Sequence[Threshold] = (),
    offsets: bool = True,
) -> list[DomainShape]:
    """The domain suite for one element type (module docstring), without duplicates; with
    ``thresholds`` (``harness.thresholds``) also each one's dim on both sides of it, the other
    dims from a random tuning shape. ``offsets=False`` leaves out the 2^31 shapes (the largest):
    a type of the same width as one already planned overflows its offsets at the same shapes."""
    contract = spec.contract
    names = list(contract.dims)
    rows = names[0]
    bounds = {n: dim_bounds(spec, n) for n in names}
    least = {n: bounds[n][0] for n in names}
    shapes: list[DomainShape] = [DomainShape("min", dict(least))]
    for name in names:
        shapes.append(DomainShape("max", {**least, name: bounds[name][1]}))
    widest = {n: bounds[n][1] for n in names} | {rows: least[rows]}
    shapes.append(DomainShape("widest", widest))
    if len(names) > 2:
        shapes.append(
            DomainShape(
                "rows_and_width",
                {n: bounds[n][1] for n in names} | {names[-1]: least[names[-1]]},
            )
        )
    per_row = largest_arg_elements(spec, widest) // max(widest[rows], 1)
    per_row_bytes = largest_arg_bytes(spec, widest, dtype) // max(widest[rows], 1)
    crossings = (("elements_2^31", per_row), ("bytes_2^31", per_row_bytes)) if offsets else ()
    for kind, unit in crossings:
        wanted = OFFSET_LIMIT // max(unit, 1) + 1
        shapes.append(DomainShape(kind, widest | {rows: _clamp(spec, rows, wanted)}))
    for name in names:
        multiple = contract.dims[name].multiple_of
        below = GRID_YZ_LIMIT // multiple * multiple
        for near in (below, _round_up(GRID_YZ_LIMIT + 1, multiple)):
            if bounds[name][0] <= near <= bounds[name][1]:
                shapes.append(DomainShape("grid_65535", {**least, name: near}))
    tuning = contract.suite("tuning")
    for name in names:
        low, high = bounds[name]
        multiple = contract.dims[name].multiple_of
        others = dict(tuning[int(rng.integers(0, len(tuning)))])
        top = int(math.log2(max(high, 2)))
        bottom = max(1, int(math.log2(max(low, 1))) + 1)
        k = int(rng.integers(bottom, top + 1)) if top >= bottom else top
        drawn = math.exp(rng.uniform(math.log(3), math.log(max(4, high // multiple))))
        prime = _smallest_prime_at_least(int(drawn))
        for value in (2**k - multiple, 2**k + multiple, multiple * prime):
            if low <= value <= high and value % multiple == 0:
                shapes.append(DomainShape("non_multiple", {**others, name: value}))
    for threshold in thresholds[:MAX_THRESHOLDS]:
        others = dict(tuning[int(rng.integers(0, len(tuning)))])
        for value in threshold_values(spec, threshold, bounds[threshold.dim]):
            shapes.append(
                DomainShape(f"threshold {threshold.source}", {**others, threshold.dim: value})
            )
    for _ in range(DOMAIN_SAMPLE_SHAPES):
        sample = {}
        for name in names:
            low, high = bounds[name]
            value = math.exp(rng.uniform(math.log(low), math.log(high + 1)))
            sample[name] = _clamp(spec, name, int(value))
        shapes.append(DomainShape("sample", sample))
    unique: list[DomainShape] = []
    for shape in shapes:
        if contract.shape_problem(shape.dims) is None and all(shape.dims != u.dims for u in unique):
            unique.append(shape)
    return unique


def _elements(spec: OperationSpec, dims: Mapping[str, int], dtype: str) -> tuple[int, int]:
    """(storage bytes of every argument, elements of every argument)."""
    contract = spec.contract
    total_bytes = total_elements = 0
    for arg in contract.args:
        count = math.prod(contract.shape_of(arg, dims))
        total_elements += count
        total_bytes += count * contract.dtype_of(arg, dtype).itemsize
    return total_bytes, total_elements


def full_check_bytes(spec: OperationSpec, dims: Mapping[str, int], dtype: str) -> int:
    """GPU memory the whole protocol needs for one case (an upper estimate, counted)."""
    storage, elements = _elements(spec, dims, dtype)
    return FULL_STORAGE_COPIES * storage + FULL_FLOAT64_COPIES * 8 * elements


def light_check_bytes(spec: OperationSpec, dims: Mapping[str, int], dtype: str) -> int:
    """GPU memory of the light protocol (one poisoned run, row-chunked reference)."""
    storage, _ = _elements(spec, dims, dtype)
    transient = LIGHT_TRANSIENT_BYTES_PER_ELEMENT * largest_arg_elements(spec, dims)
    return LIGHT_STORAGE_COPIES * storage + transient
