"""Test inputs beyond the contract's random draws: special values in every case, varied rows.

* **Special values in every case.** Each row (first index) of a case is given one of the
  contract's ``[[specials]]`` scenarios or none: a random half of the rows carry a scenario,
  spread evenly over the scenarios (every scenario appears once a case has twice as many rows as
  there are scenarios), the rest stay plain. Inside a scenario's rows its ``fraction`` of the
  elements of its named inputs take its values, or (``same_as``) another input's values at the
  same positions: exact ties such as equal LSEs, which random draws never produce. So every
  shape of every suite, random shapes included, meets infinities and large magnitudes: a code
  path chosen by shape (a prefill fast path, one head_dim) cannot avoid them, and the plain rows
  still exercise the ordinary path in the same launch.
* **Row magnitudes.** An input whose ``init`` has ``row_scale = [low, high]`` has each row
  multiplied by a factor drawn log-uniformly in that range; arguments with the same row count
  share the factors (so in fused_add_rmsnorm input and residual shrink together and the mean
  square of a row can fall below eps).
* **Values from the whole type.** Besides the contract's scenarios every check has one
  ``whole_type_<input>`` scenario per floating input: in its rows :data:`WHOLE_TYPE_FRACTION`
  of that input's elements take a value of :func:`type_values` (NaN, +-inf, +-0, the smallest
  and largest subnormal, +-the largest finite: for bf16 its square overflows an fp32 sum of
  squares; of NaN and +-inf only those the input's ``non_finite`` keeps in the op's
  domain), one input per scenario so that each value's effect is the reference's own
  propagation of it, not an interaction of two. Red-team kernels that squashed a NaN or -inf
  gate to 0 or wrote zeros for a row whose sum of squares overflows passed without them.
* **Structured rows** (:data:`STRUCTURED`): every input indexed by the rows gets, in the
  scenario's rows, a zero prefix (at least :data:`ZERO_PREFIX_MIN` elements), a constant row,
  a copy of another row, or its row sorted: data shortcuts (a row whose first elements are zero
  taken as all zero, results keyed on a row's content) meet inputs where they go wrong.
* :func:`perturbed` gives inputs that differ from a case's in a random :data:`PERTURB_FRACTION`
  of the elements of every input (values moved there from elsewhere in the same input): the
  inputs of the checked run whose buffers hold a stale result (offsets arrays reordered into
  other valid offsets).
* Inputs drawn as CSR offsets (``init.offsets_into``) take no scenario and no structured row:
  the contract refuses a special naming one, and their values must stay ordered.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from astra_graph.harness.cases import host_generator
from astra_graph.harness.compare import array_module
from astra_graph.kernel.contract import NON_FINITE, OperationSpec, Special, TensorArg
from astra_graph.kernel.dtypes import FP8_E4M3_MAX, DType

WHOLE_TYPE_FRACTION = 1 / 16
"""Share of an input's elements, in its ``whole_type`` rows, set to the type's special values:
with nine values every one appears in a row of 150 elements or more."""
SCALE_CHUNK_ELEMENTS = 1 << 26
"""Rows are scaled in stretches of at most this many elements (~0.5 GiB of float64 each), so a
domain shape of 2^31 elements needs no 16 GiB temporaries."""
STRUCTURED = ("zero_prefix", "constant_row", "repeated_row", "sorted_row")
ZERO_PREFIX_MIN = 16
"""Zero prefixes are at least this long (a red-team kernel took a row whose first 16 elements are
zero as all zero): drawn log-uniformly between it and the whole row but its last element."""
_FLOAT_LAYOUT = {
    "float8_e4m3fn": (3, 4),
    "float16": (10, 5),
    "bfloat16": (7, 8),
    "float32": (23, 8),
    "float64": (52, 11),
}
"""(mantissa bits, exponent bits) of each floating type."""
_FINITE_ONLY = {"float8_e4m3fn": FP8_E4M3_MAX}
"""The largest finite value of each type with no infinity: float8_e4m3fn spends the all-ones
exponent on finite values (up to 448, not IEEE's 240) and one NaN per sign, so +-inf is no value
of it (an FP8 input's whole-type row had no layout, and the check failed with a KeyError on the
H100: FlashInfer's RMSNormQuant at 91c3432)."""
PERTURB_FRACTION = 1 / 16
"""Share of each input's elements changed for the stale-output run: a replay keyed on any few
positions misses the change with high probability, and a replayed result is wrong in ~6% of
the elements or more."""


def row_labels(rows: int, scenarios: int, rng: Any) -> np.ndarray:
    """Per row: 0 (plain) or the 1-based index of its scenario (a host array)."""
    if scenarios == 0 or rows == 0:
        return np.zeros(rows, dtype=np.int64)
    host = host_generator(rng)
    order = host.permutation(rows)  # a random permutation of 0 .. rows - 1
    offset = int(host.integers(0, 2 * scenarios))
    slot = (order + offset) % (2 * scenarios)
    return np.where(slot < scenarios, slot + 1, 0)


def _row_factors(xp: Any, rows: int, low: float, high: float, u: Any) -> Any:
    return xp.exp(math.log(low) + (math.log(high) - math.log(low)) * u[:rows])


def type_values(element: DType, non_finite: Sequence[str] = NON_FINITE) -> list[float]:
    """The special values of a floating type: the non-finite ones the input's domain holds
    (the contract's ``non_finite``, all of NaN, +inf and -inf by default), +-0, the smallest
    and (negated) the largest subnormal, and +-the largest finite value."""
    mantissa, exponent = _FLOAT_LAYOUT[element.name]
    emin = 2 - 2 ** (exponent - 1)
    largest = (2 - 2.0**-mantissa) * 2.0 ** (2 ** (exponent - 1) - 1)
    tiny = 2.0 ** (emin - mantissa)
    if element.name in _FINITE_ONLY:
        largest = _FINITE_ONLY[element.name]
        non_finite = [name for name in non_finite if math.isnan(float(name))]
    return [
        *(float(name) for name in non_finite),
        0.0,
        -0.0,
        tiny,
        -(2.0**emin - tiny),
        largest,
        -largest,
    ]


def _floating_inputs(spec: OperationSpec) -> list[str]:
    contract = spec.contract
    return [
        a.name
        for a in contract.args
        if a.role != "output" and contract.dtype_of(a, contract.dtypes[0]).floating
    ]


def scenario_names(spec: OperationSpec) -> list[str]:
    """Every scenario a row can carry, in label order (label ``i`` is entry ``i - 1``): the
    contract's, one ``whole_type`` per floating input, then :data:`STRUCTURED`."""
    return [
        *(sp.name for sp in spec.contract.specials),
        *(f"whole_type_{name}" for name in _floating_inputs(spec)),
        *STRUCTURED,
    ]


def _type_specials(spec: OperationSpec, dtype: str) -> list[Special]:
    contract = spec.contract
    args = {a.name: a for a in contract.args}
    return [
        Special(
            name=f"whole_type_{name}",
            values={name: type_values(contract.dtype_of(args[name], dtype), args[name].non_finite)},
            # a 1-D input's rows are single elements: each of its scenario rows gets a value
            fraction=WHOLE_TYPE_FRACTION if len(args[name].shape) > 1 else 1.0,
        )
        for name in _floating_inputs(spec)
    ]


def apply(
    spec: OperationSpec, arrays: dict[str, Any], dtype: str, rng: Any
) -> dict[int, np.ndarray]:
    """Scale rows and set special values and structured rows in the case's input arrays
    (storage dtype), in place.

    Returns the row labels by row count (see :func:`row_labels`; label ``i`` is
    ``scenario_names(spec)[i - 1]``), for naming the scenario of a failing element.
    """
    contract = spec.contract
    xp = array_module(next(iter(arrays.values())))
    inputs = [a for a in contract.args if a.role != "output"]
    shared_u: dict[int, Any] = {}
    for arg in inputs:
        if arg.init.row_scale is None:
            continue
        array = arrays[arg.name]
        rows = int(array.shape[0])
        if rows not in shared_u:
            shared_u[rows] = rng.random(rows, dtype=np.float32).astype(xp.float64)
        element = contract.dtype_of(arg, dtype)
        factors = _row_factors(xp, rows, *arg.init.row_scale, shared_u[rows])
        factors = factors.reshape((rows,) + (1,) * (array.ndim - 1))
        step = max(1, SCALE_CHUNK_ELEMENTS // max(1, array.size // max(rows, 1)))
        for start in range(0, rows, step):  # in row chunks: float64 temporaries stay bounded
            part = array[start : start + step]
            scaled = element.to_float64(xp, part) * factors[start : start + step]
            part[...] = element.from_float64(xp, scaled)
    labels: dict[int, np.ndarray] = {}
    specials = [*contract.specials, *_type_specials(spec, dtype)]
    count = len(specials) + len(STRUCTURED)
    for arg in inputs:
        rows = int(arrays[arg.name].shape[0])
        if rows not in labels:
            labels[rows] = row_labels(rows, count, rng)
    for index, special in enumerate(specials, start=1):
        _apply_special(spec, arrays, dtype, special, index, labels, rng)
    rows_name = next(iter(contract.dims))
    # slots stay distinct and offsets ordered: a repeated or zeroed row would give two tokens
    # one slot, or break the offsets' order
    by_rows = [a.name for a in inputs if a.shape[0] == rows_name and not a.init.arranged]
    for offset, kind in enumerate(STRUCTURED, start=len(specials) + 1):
        _apply_structured(arrays, by_rows, kind, offset, labels, rng)
    return labels


def _apply_structured(
    arrays: dict[str, Any],
    names: list[str],
    kind: str,
    index: int,
    labels: Mapping[int, np.ndarray],
    rng: Any,
) -> None:
    """One structured scenario (:data:`STRUCTURED`) in its rows of every row-indexed input."""
    host = host_generator(rng)
    sources: dict[int, Any] = {}
    """Per row count, the rows copied into repeated rows: the same for every input, so a copied
    row keeps its inputs together (a v row with its own LSEs)."""
    for name in names:
        target = arrays[name]
        xp = array_module(target)
        rows = int(target.shape[0])
        chosen = np.nonzero(labels[rows] == index)[0]
        if chosen.size == 0:
            continue
        flat = target.reshape(rows, -1)  # a view: the arrays are contiguous
        width = int(flat.shape[1])
        picked = xp.asarray(chosen)
        block = flat[picked]
        if kind == "zero_prefix":
            top = max(width - 1, 1)
            low = min(ZERO_PREFIX_MIN, top)
            drawn = np.exp(host.uniform(math.log(low), math.log(top + 1), size=chosen.size))
            lengths = xp.asarray(np.clip(drawn.astype(np.int64), 1, top))
            block[xp.arange(width)[None, :] < lengths[:, None]] = 0
        elif kind == "constant_row":
            columns = xp.asarray(host.integers(0, width, size=chosen.size))
            block[...] = block[xp.arange(chosen.size), columns][:, None]
        elif kind == "repeated_row":
            if rows not in sources:
                sources[rows] = xp.asarray(host.integers(0, rows, size=chosen.size))
            block = flat[sources[rows]]
        else:  # sorted_row, by value (bf16's stored bits do not sort as its values)
            order = xp.argsort(_as_values(block), axis=1)
            block = xp.take_along_axis(block, order, axis=1)
        flat[picked] = block


def _finite(array: Any) -> Any:
    """Mask of the finite elements of an array in storage form (bf16 as its raw bits)."""
    xp = array_module(array)
    if array.dtype == xp.uint16:
        return (array & xp.uint16(0x7F80)) != xp.uint16(0x7F80)
    if array.dtype.kind == "f":
        return xp.isfinite(array)
    return xp.ones(array.shape, dtype=bool)


def _as_values(row: Any) -> Any:
    """Sortable values of a row in storage form (bf16's raw bits as their float32 values)."""
    xp = array_module(row)
    if row.dtype == xp.uint16:
        return (row.astype(xp.uint32) << 16).view(xp.float32)
    return row


def _apply_special(
    spec: OperationSpec,
    arrays: dict[str, Any],
    dtype: str,
    special: Special,
    index: int,
    labels: Mapping[int, np.ndarray],
    rng: Any,
) -> None:
    contract = spec.contract
    shared_mask = None
    for name, choices in special.values.items():
        arg = next(a for a in contract.args if a.name == name)
        target = arrays[name]
        xp = array_module(target)
        chosen = np.nonzero(labels[int(target.shape[0])] == index)[0]
        if chosen.size == 0:
            continue
        rows = xp.asarray(chosen)
        block = target[rows]  # only the scenario's rows: random draws in proportion to them
        if special.paired and shared_mask is not None and shared_mask.shape == block.shape:
            mask = shared_mask
        else:
            mask = rng.random(block.shape, dtype=np.float32) < special.fraction
            shared_mask = mask
        element = contract.dtype_of(arg, dtype)
        picks = element.from_float64(xp, xp.asarray(np.asarray(choices, dtype=np.float64)))
        which = rng.integers(0, len(choices), size=block.shape)
        xp.copyto(block, picks[which], where=mask)
        target[rows] = block
    for name, source in special.same_as.items():  # ties: the source's values, bit for bit
        target = arrays[name]
        xp = array_module(target)
        chosen = np.nonzero(labels[int(target.shape[0])] == index)[0]
        if chosen.size == 0:
            continue
        rows = xp.asarray(chosen)
        block = target[rows]
        if special.paired and shared_mask is not None and shared_mask.shape == block.shape:
            mask = shared_mask
        else:
            mask = rng.random(block.shape, dtype=np.float32) < special.fraction
            shared_mask = mask
        xp.copyto(block, arrays[source][rows], where=mask)
        target[rows] = block


def scenario_of(labels: Mapping[int, np.ndarray], spec: OperationSpec, index: list[int]) -> str:
    """The scenario name of the row an element index falls in ('' for a plain row)."""
    if not index:
        return ""
    names = scenario_names(spec)
    for rows, per_row in labels.items():
        if index[0] < rows and per_row.size == rows:
            label = int(per_row[index[0]])
            return names[label - 1] if label else ""
    return ""


def perturbed(arrays: Mapping[str, Any], args: list[TensorArg], rng: Any) -> dict[str, Any]:
    """Copies of the arguments' arrays with :data:`PERTURB_FRACTION` of their elements replaced
    by values from elsewhere in the same array (a random cyclic shift). In an offsets input
    (``init.offsets_into``) only the inner offsets move, and each array is sorted again: still 0
    first, its end last, non-decreasing, with other segment lengths.

    NaN and infinities are not moved: in their own rows they meet the values the reference
    states; moved next to another scenario's values (an LSE whose fp32 weight underflows) they
    would meet ``0 * inf``, whose result fp32 and float64 disagree on for correct kernels. A
    slot tensor's (``init.distinct``) chosen elements trade values among themselves instead, so
    no two stay alike: a value copied from elsewhere gave two tokens one slot, and SGLang's
    KV-cache store differed from itself (H100, ec20d5d)."""
    out = {}
    for arg in args:
        array = arrays[arg.name]
        xp = array_module(array)
        flat = array.reshape(-1)
        shift = 1 + int(host_generator(rng).integers(0, max(flat.size - 1, 1)))
        mask = rng.random(flat.size, dtype=np.float32) < PERTURB_FRACTION
        if arg.init.distinct:
            chosen = xp.nonzero(mask)[0]
            traded = flat.copy()
            traded[chosen] = flat[xp.roll(chosen, 1)]
            out[arg.name] = traded.reshape(array.shape)
            continue
        moved = xp.roll(flat, shift)
        if arg.init.offsets_into is not None:
            inner = xp.ones(array.shape, dtype=bool)
            inner[..., 0] = inner[..., -1] = False
            mask &= inner.reshape(-1) & _finite(moved)
            out[arg.name] = xp.sort(xp.where(mask, moved, flat).reshape(array.shape), axis=-1)
            continue
        out[arg.name] = xp.where(mask & _finite(moved), moved, flat).reshape(array.shape)
    return out
