"""Shape buckets: the serving phase and the row class of a shape, one definition for everyone.

- phase: ``decode`` when the contract's first dim (the row/token count) is at most
  :data:`DECODE_MAX_ROWS`, else ``prefill`` (the serving split the contracts' suites follow);
- row class, from the bytes one row moves (the contract's ``bytes_moved`` over the first dim,
  at the element type): ``small`` below 16 KiB, ``medium`` below 64 KiB, ``large`` above.

The tuner picks one setting per bucket; the verification plan puts special values and random
shapes into every bucket, because kernels choose code paths by exactly these properties.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from astra_graph.kernel.contract import OperationSpec

DECODE_MAX_ROWS = 256
ROW_CLASSES = ((16 * 1024, "small"), (64 * 1024, "medium"))
LARGEST_ROW_CLASS = "large"


def rows_dim(spec: OperationSpec) -> str:
    """The contract's first dim: the row (token) count."""
    return next(iter(spec.contract.dims))


def bucket_of(spec: OperationSpec, dims: Mapping[str, int], dtype: str) -> str:
    """``<phase>/<row class>`` of a shape (see the module docstring)."""
    rows = max(dims[rows_dim(spec)], 1)
    phase = "decode" if rows <= DECODE_MAX_ROWS else "prefill"
    row_bytes = spec.contract.bytes_for(dims, dtype) / rows
    row_class = next((name for limit, name in ROW_CLASSES if row_bytes < limit), LARGEST_ROW_CLASS)
    return f"{phase}/{row_class}"


def group_by_bucket(
    spec: OperationSpec, shapes: Sequence[Mapping[str, int]], dtype: str
) -> dict[str, list[dict[str, int]]]:
    buckets: dict[str, list[dict[str, int]]] = {}
    for dims in shapes:
        buckets.setdefault(bucket_of(spec, dims, dtype), []).append(dict(dims))
    return dict(sorted(buckets.items()))
