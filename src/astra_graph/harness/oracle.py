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

The dims are read back from the input arrays' shapes (an imported contract names each axis by
a dim). Needs CuPy and a GPU: without one it raises, and ``astra validate`` says it checks the
oracle on the GPU only.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from astra_graph.harness.cases import Case
from astra_graph.kernel.contract import ContractError, load_contract
from astra_graph.kernel.dtypes import DTYPES
from astra_graph.kernel.header import load_implementation


def _dims(contract: Any, inputs: Mapping[str, Any]) -> dict[str, int]:
    dims: dict[str, int] = {}
    for arg in contract.args:
        if arg.name not in inputs:
            continue
        for axis, size in zip(arg.shape, inputs[arg.name].shape, strict=True):
            if isinstance(axis, str) and axis in contract.dims:
                dims[axis] = int(size)
    missing = sorted(set(contract.dims) - set(dims))
    if missing:
        raise ContractError(f"{contract.name}: oracle: dim {missing[0]!r} is no input's axis")
    return dims


def original_outputs(
    folder: Path, dtype: str, xp: Any, inputs: Mapping[str, Any], params: Mapping[str, Any]
) -> dict[str, Any]:
    """Run the operation's oracle implementation at ``dtype``; its written outputs as float64."""
    from astra_graph.harness.launch import load_kernel, synchronize

    if xp.__name__ != "cupy":
        raise ContractError(f"{folder}: the oracle is the original kernel and needs a GPU")
    spec = load_contract(folder)
    contract = spec.contract
    if contract.oracle is None:
        raise ContractError(f"{folder / 'contract.toml'}: oracle: not set")
    impl = load_implementation(folder / contract.oracle, contract)
    kernel = load_kernel(spec, impl, dtype)
    element = DTYPES[dtype]
    dims = _dims(contract, inputs)
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
