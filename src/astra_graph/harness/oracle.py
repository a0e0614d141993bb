"""The original kernel as the oracle: reference outputs of an imported operation, on the GPU.

An operation brought in by ``astra import`` has no hand-written reference: its contract names
the original implementation (``oracle = "production.cu"``), and its ``reference.py`` calls
:func:`original_outputs`, which runs that kernel at the most precise element type the
framework's dispatch instantiates (``float64`` where it has one, else ``float32``) on the
float64 inputs the harness gives every reference, and returns its outputs as float64. The
inputs of a 16-bit check are exact in float32, so the oracle sees the very values the
candidate sees; the candidate is then held to the contract's tolerance for its own type, as
against any reference. Where the oracle runs in float32, its own rounding (about 6e-8
relative) is far below every 16-bit tolerance, and float32 checks compare like with like.

The original's own error sets the tolerance too (issue 23: "within a tolerance the operation's
dtypes and the original's own float64 error set"). A framework kernel at a 16-bit type may round
twice (vLLM's silu_and_mul rounds silu(x) to the type before the multiply, so an fp16-subnormal
silu(x) times a large y is off by far more than a 16-bit tolerance) or accumulate in float32
where the float64 oracle does not overflow. That is the framework's behaviour, not a bug of the
candidate's, and the original checked against itself must pass. :func:`reference_with_own_error`
therefore runs the original at the checked type on the same inputs and gives each written
output an error bound (``compare.bound_key``) of the original's own distance from the oracle:
an element the plain tolerance rejects is accepted when it is within that distance (plus the
tolerance at its far end), so a candidate is held to the better of the contract's tolerance
and the original's own accuracy, element by element. Where the original and the oracle
disagree about finiteness (NaN from inf - inf in one of them, an overflow in one type only), no
bound can say how far off a candidate may be (an infinite one accepted any value, an unwritten
element included): there the original's own value is the expected one, so a candidate must do
what the framework does, and the comparison's rules for non-finite references apply.

The dims are read back from the input arrays' shapes (an imported contract names each axis by
a dim), and a dim that sizes no tensor from the scalar the import drafts for it. Needs
CuPy and a GPU: without one it raises, and ``astra validate`` says it checks the oracle on the
GPU only.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from astra_graph.harness.cases import Case
from astra_graph.harness.compare import bound_key
from astra_graph.kernel.contract import ContractError, OperationSpec, load_contract
from astra_graph.kernel.dtypes import DTYPES
from astra_graph.kernel.header import load_implementation

ORACLE_KERNELS = 32
"""Loaded originals kept per process (one per operation and element type checked)."""


def oracle_dim_scalar(dim: str) -> str:
    """The contract scalar through which the oracle learns ``dim`` when no tensor has it as an
    axis (a launcher integer: vLLM's ``head_size``); the kernel's own parameters do not name
    it, so it cannot clash with one of them."""
    return f"oracle_{dim}"


def unread_dims(dims: Iterable[str], shapes: Iterable[Sequence[str | int]]) -> list[str]:
    """The ``dims`` the oracle cannot read back from tensors of these ``shapes``: those that
    are no tensor's whole axis (a launcher integer: vLLM's ``head_size``; one only inside an
    axis expression: ``input_1 // 2 // group_size``). It learns each through its
    :func:`oracle_dim_scalar`."""
    whole = {axis for shape in shapes for axis in shape}
    return [dim for dim in dims if dim not in whole]


def _dims(contract: Any, inputs: Mapping[str, Any], params: Mapping[str, Any]) -> dict[str, int]:
    """The dims, from the inputs' axes; a dim that sizes no tensor (a launcher integer) from
    its :func:`oracle_dim_scalar`."""
    dims: dict[str, int] = {}
    for arg in contract.args:
        if arg.name not in inputs:
            continue
        for axis, size in zip(arg.shape, inputs[arg.name].shape, strict=True):
            if isinstance(axis, str) and axis in contract.dims:
                dims[axis] = int(size)
    shapes = (arg.shape for arg in contract.args if arg.name in inputs)
    for dim in unread_dims(contract.dims, shapes):
        if oracle_dim_scalar(dim) in params:
            dims[dim] = int(params[oracle_dim_scalar(dim)])
    missing = sorted(set(contract.dims) - set(dims))
    if missing:
        raise ContractError(f"{contract.name}: oracle: dim {missing[0]!r} is no input's axis")
    return dims


@lru_cache(maxsize=ORACLE_KERNELS)
def _oracle_kernel(folder: Path, dtype: str, stamp: tuple[int, ...]) -> tuple[Any, Any]:
    """(the contract, the loaded original at ``dtype``), once per folder's ``stamp`` (the
    modification times of its files: an import written again over it is loaded again): every
    reference of a check and of a timed re-check runs the original, twice for a 16-bit type, and
    loading it read the contract and the source and hashed the source each time."""
    from astra_graph.harness.launch import load_kernel

    spec = load_contract(folder)
    contract = spec.contract
    if contract.oracle is None:
        raise ContractError(f"{folder / 'contract.toml'}: oracle: not set")
    impl = load_implementation(folder / contract.oracle, contract)
    return contract, load_kernel(spec, impl, dtype)


def original_outputs(
    folder: Path, dtype: str, xp: Any, inputs: Mapping[str, Any], params: Mapping[str, Any]
) -> dict[str, Any]:
    """Run the operation's oracle implementation at ``dtype``; its written outputs as float64."""
    from astra_graph.harness.launch import synchronize

    if xp.__name__ != "cupy":
        raise ContractError(f"{folder}: the oracle is the original kernel and needs a GPU")
    folder = folder.resolve()
    stamp = tuple(f.stat().st_mtime_ns for f in sorted(folder.iterdir()) if f.is_file())
    contract, kernel = _oracle_kernel(folder, dtype, stamp)
    element = DTYPES[dtype]
    dims = _dims(contract, inputs, params)
    arrays = {}
    for arg in contract.args:
        store = DTYPES[dtype if arg.dtype == "T" else arg.dtype]
        if arg.name in inputs:
            arrays[arg.name] = store.from_float64(xp, xp.asarray(inputs[arg.name]))
        else:
            arrays[arg.name] = xp.zeros(contract.shape_of(arg, dims), dtype=store.storage)
    case = Case(dims=dims, dtype=element.name, arrays=arrays, scalars=dict(params))
    kernel.launch(case)
    synchronize()
    return {
        a.name: DTYPES[dtype if a.dtype == "T" else a.dtype].to_float64(xp, arrays[a.name])
        for a in contract.args
        if a.written
    }


def reference_with_own_error(
    spec: OperationSpec, dtype: str, xp: Any, inputs: Mapping[str, Any], params: Mapping[str, Any]
) -> dict[str, Any]:
    """The reference outputs of ``spec`` for float64 ``inputs``; for an operation whose reference
    is its original kernel (``oracle`` set), with each written output's error bound raised to the
    original's own distance from the oracle at ``dtype`` (module docstring). Every reference of
    a check or a timed re-check is computed here, so the rule is the same for both."""
    reference = dict(spec.reference(xp, inputs, params))
    if spec.contract.oracle is None:
        return reference
    own = original_outputs(spec.folder, dtype, xp, inputs, params)
    for name, values in own.items():
        expected = reference[name]
        with np.errstate(invalid="ignore", over="ignore"):  # inf - inf; CuPy warns of nothing
            same = (values == expected) | (xp.isnan(values) & xp.isnan(expected))
            apart = ~same & ~(xp.isfinite(values) & xp.isfinite(expected))
            reference[name] = xp.where(apart, values, expected)
            distance = xp.where(same | apart, 0.0, xp.abs(values - expected))
        key = bound_key(name)
        reference[key] = distance if key not in reference else xp.maximum(reference[key], distance)
    return reference
