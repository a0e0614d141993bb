"""Test cases from the contract: random inputs (never all zero), outputs, scalars per shape.

A case is one shape and element type. Inputs are drawn in float32 from each argument's ``init``
distribution (plus an optional ``[[specials]]`` scenario) and stored in the storage dtype; an
input whose ``init`` has ``offsets_into`` is drawn as CSR offsets instead (:func:`offsets_values`).
A
CuPy generator gives device arrays; a NumPy generator gives host arrays, so the verification
logic and ``astra validate``'s reference run are tested without a GPU.
"""

from __future__ import annotations

import math
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from astra_graph.kernel import expr
from astra_graph.kernel.contract import OperationSpec, Special, TensorArg

if TYPE_CHECKING:
    import cupy


@dataclass
class Case:
    """One shape and element type: device buffers in storage dtype (bf16 as uint16), scalars."""

    dims: dict[str, int]
    dtype: str
    arrays: dict[str, cupy.ndarray]
    scalars: dict[str, float | int]
    special: str | None = None
    """Name of the ``[[specials]]`` scenario the inputs were drawn for, if any."""

    @property
    def nbytes(self) -> int:
        return sum(int(a.nbytes) for a in self.arrays.values())


def _array_module(rng: Any) -> Any:
    """The array module a generator draws into: ``cupy`` on the GPU, ``numpy`` in CPU tests."""
    if type(rng).__module__.startswith("cupy"):
        import cupy

        return cupy
    return np


_HOST_RNG: np.random.Generator | None = None


def host_generator(rng: Any) -> np.random.Generator:
    """A NumPy generator for the few numbers a check draws on the host (row labels, shifts,
    offsets): ``rng`` itself when it is one (CPU tests, reproducible), else one per process
    seeded from the OS. Drawing those on the GPU cost a synchronisation and a copy each."""
    global _HOST_RNG
    if isinstance(rng, np.random.Generator):
        return rng
    if _HOST_RNG is None:
        _HOST_RNG = np.random.default_rng(secrets.randbits(63))
    return _HOST_RNG


EMPTY_SEGMENT_FRACTION = 1 / 8
"""Share of the segments of an offsets draw made empty (equal consecutive offsets): a serving
batch holds requests with no token in this step, and a kernel that assumes none meets them."""
SEGMENT_SKEW = 64.0
"""Segment lengths of an offsets draw vary by up to this factor (weights log-uniform in [1,
this]): a batch mixes long prefills with single-token decodes."""


def offsets_values(xp: Any, rng: Any, shape: tuple[int, ...], end: int) -> Any:
    """Float64 CSR offsets along the last axis of ``shape`` (each row one array of segments + 1
    offsets): 0 first, ``end`` last, non-decreasing, whole numbers (float64 holds every count
    exactly, float32 only to 2^24). Each segment's length is in proportion to a weight drawn
    log-uniformly in [1, :data:`SEGMENT_SKEW`], :data:`EMPTY_SEGMENT_FRACTION` of the weights
    zero (never a row's largest, so the offsets reach ``end``), and the cut points are floors
    of the cumulative share of ``end``: monotone, and exact at both ends."""
    *lead, length = shape
    segments = (*lead, max(length - 1, 0))
    u = rng.random(segments)
    weights = xp.exp(u * np.log(SEGMENT_SKEW))
    empty = rng.random(segments) < EMPTY_SEGMENT_FRACTION
    if segments[-1]:
        empty &= u != u.max(axis=-1, keepdims=True)
    weights = xp.where(empty, 0.0, weights)
    cumulative = xp.cumsum(weights, axis=-1)
    total = cumulative[..., -1:] if segments[-1] else xp.ones((*lead, 1))
    cuts = xp.floor(cumulative * (float(end) / total))
    cuts[..., -1:] = float(end)  # the last cut is end itself, whatever the rounding
    return xp.concatenate([xp.zeros((*lead, 1)), cuts], axis=-1)


def random_values(arg: TensorArg, shape: tuple[int, ...], rng: Any, dims: Mapping[str, int]) -> Any:
    """Float32 draws from the argument's ``init`` distribution at the case's ``dims`` (float32
    keeps memory low); float64 offsets for ``init.offsets_into`` (:func:`offsets_values`)."""
    init = arg.init
    if init.offsets_into is not None:
        end = expr.evaluate_int(init.offsets_into, dict(dims))
        return offsets_values(_array_module(rng), rng, shape, end)
    if init.distinct:
        return distinct_values(arg, shape, rng, dims)
    if init.dist == "normal":
        values = rng.standard_normal(shape, dtype=np.float32)
        if init.scale != 1.0:
            values *= np.float32(init.scale)
        if init.mean != 0.0:
            values += np.float32(init.mean)
        return values
    values = rng.random(shape, dtype=np.float32)
    values *= np.float32(init.high_at(dims) - init.low)
    values += np.float32(init.low)
    return values


PERMUTED_SPAN_LIMIT = 1 << 24
"""Largest range of whole numbers :func:`distinct_values` permutes whole (64 MiB of float32
keys on the GPU); above it, and above 4x the count asked, it draws with replacement and drops
repeats, which needs few redraws when the range is that much wider than the count."""


def distinct_values(
    arg: TensorArg, shape: tuple[int, ...], rng: Any, dims: Mapping[str, int]
) -> Any:
    """Whole numbers in [low, high] at ``dims`` (``init.distinct``), no two alike, in random
    order, as float64 (exact past float32's 2^24). Raises ValueError, naming the argument, where
    the range holds fewer whole numbers than the tensor has elements."""
    xp = _array_module(rng)
    count = int(np.prod(shape, dtype=np.int64))
    low = math.ceil(arg.init.low)
    span = math.floor(arg.init.high_at(dims)) - low + 1
    if count > span:
        raise ValueError(
            f"args.{arg.name}.init.distinct: {count} elements cannot be distinct whole numbers "
            f"in [{low}, {low + span - 1}] at {dict(dims)}: the contract's requires must keep "
            "the count within the range"
        )
    if span <= max(PERMUTED_SPAN_LIMIT, 4 * count):
        picked = xp.argsort(rng.random(span, dtype=np.float32))[:count].astype(np.float64)
    else:
        picked = xp.empty(0, dtype=np.float64)
        while picked.size < count:  # sorted by unique: shuffled below
            more = xp.floor(rng.random(2 * count, dtype=np.float64) * span)
            picked = xp.unique(xp.concatenate([picked, more]))
        picked = picked[xp.argsort(rng.random(picked.size, dtype=np.float32))[:count]]
    return (picked + low).reshape(shape)


def _apply_special(values: dict[str, Any], special: Special, rng: Any) -> None:
    """Set a random fraction of the named inputs' elements to the scenario's values."""
    xp = _array_module(rng)
    shared_mask = None
    for name, choices in special.values.items():
        target = values[name]
        if special.paired and shared_mask is not None and shared_mask.shape == target.shape:
            mask = shared_mask
        else:
            mask = rng.random(target.shape, dtype=np.float32) < special.fraction
            shared_mask = mask
        picks = xp.asarray(np.asarray(choices, dtype=np.float64)).astype(target.dtype)
        which = rng.integers(0, len(choices), size=target.shape)
        xp.copyto(target, picks[which], where=mask)


def make_case(
    spec: OperationSpec,
    dims: Mapping[str, int],
    dtype: str,
    rng: cupy.random.Generator,
    params: Mapping[str, float] | None = None,
    special: Special | None = None,
) -> Case:
    """Fresh random inputs (never all zero) and uninitialised outputs for one shape and type.

    A NumPy generator gives NumPy arrays (for CPU tests of the verification logic).
    """
    xp = _array_module(rng)
    contract = spec.contract
    raw: dict[str, Any] = {}
    for arg in contract.args:
        if arg.role != "output":
            raw[arg.name] = random_values(arg, contract.shape_of(arg, dims), rng, dims)
    if special is not None:
        _apply_special(raw, special, rng)
    arrays: dict[str, Any] = {}
    for arg in contract.args:
        element = contract.dtype_of(arg, dtype)
        shape = contract.shape_of(arg, dims)
        if arg.name in raw:
            arrays[arg.name] = element.from_float64(xp, raw.pop(arg.name))
        else:
            arrays[arg.name] = xp.empty(shape, dtype=element.storage)
    return Case(
        dims=dict(dims),
        dtype=dtype,
        arrays=arrays,
        scalars=contract.scalar_values(dims, params),
        special=special.name if special else None,
    )
