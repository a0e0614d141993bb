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
* :func:`perturbed` gives inputs that differ from a case's in a random :data:`PERTURB_FRACTION`
  of the elements of every input (values moved there from elsewhere in the same input): the
  inputs of the checked run whose buffers hold a stale result.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from astra_graph.harness.cases import host_generator
from astra_graph.harness.compare import array_module
from astra_graph.kernel.contract import OperationSpec, Special

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


def apply(
    spec: OperationSpec, arrays: dict[str, Any], dtype: str, rng: Any
) -> dict[int, np.ndarray]:
    """Scale rows and set special values in the case's input arrays (storage dtype), in place.

    Returns the row labels by row count (see :func:`row_labels`), for naming the scenario of a
    failing element.
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
        scaled = element.to_float64(xp, array) * factors
        arrays[arg.name][...] = element.from_float64(xp, scaled)
    labels: dict[int, np.ndarray] = {}
    specials = list(contract.specials)
    for arg in inputs:
        rows = int(arrays[arg.name].shape[0])
        if rows not in labels:
            labels[rows] = row_labels(rows, len(specials), rng)
    for index, special in enumerate(specials, start=1):
        _apply_special(spec, arrays, dtype, special, index, labels, rng)
    return labels


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
    for rows, per_row in labels.items():
        if index[0] < rows and per_row.size == rows:
            label = int(per_row[index[0]])
            return spec.contract.specials[label - 1].name if label else ""
    return ""


def perturbed(arrays: Mapping[str, Any], names: list[str], rng: Any) -> dict[str, Any]:
    """Copies of the named arrays with :data:`PERTURB_FRACTION` of their elements replaced by
    values from elsewhere in the same array (a random cyclic shift)."""
    out = {}
    for name in names:
        array = arrays[name]
        xp = array_module(array)
        flat = array.reshape(-1)
        shift = 1 + int(host_generator(rng).integers(0, max(flat.size - 1, 1)))
        mask = rng.random(flat.size, dtype=np.float32) < PERTURB_FRACTION
        out[name] = xp.where(mask, xp.roll(flat, shift), flat).reshape(array.shape)
    return out
