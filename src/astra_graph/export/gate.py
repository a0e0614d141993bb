"""``astra export --gate``: keep or revert, decided on a model block around the op, not the op.

A kernel 1.3x faster alone may be invisible next to the matmuls it sits between. The gate builds
the block a Llama-style decoder layer runs around the operation, in torch, at a serving model's
sizes (``export.framework.MODEL``, Llama-3-8B) and the token counts a serving engine runs
(:data:`DECODE_TOKENS` one CUDA graph per batch size, :data:`PREFILL_TOKENS` a chunked-prefill
chunk), once with the original op and once with the export, each captured in a CUDA graph and
replayed alternately (``measure.compare_graphs``). Which block, and where the op's tensors sit
in it, is ``[gate]`` of ``framework.toml`` (:class:`~astra_graph.export.framework.GateBlock`),
the same for a shipped operation and an imported one (:data:`BLOCKS`):

- ``mlp`` (silu_and_mul): ``x @ W_gate_up`` into the op's ``writes`` -> the op -> its
  ``reads`` ``@ W_down``;
- ``norm`` (fused_add_rmsnorm): the op -> its ``reads`` ``@ W_qkv``;
- ``attention_out`` (merge_attn_states_lse, the end of split-KV attention): the op -> its
  ``reads`` ``@ W_o``.

The decision uses the project's selection rule on the geometric mean of the block speedups over
the token counts (``astra_graph.harness.selection.call``): ``keep`` only when the block is faster
beyond a tie; a tie is ``revert`` with "the speedup disappears inside the block".
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import torch

from astra_graph.export.dispatch_source import ExportError
from astra_graph.export.framework import FRAMEWORK_FILE, MODEL, GateBlock, gate_of
from astra_graph.export.measure import (
    capture,
    compare_graphs,
    load_original,
    load_package,
    make_inputs,
    op_arguments,
)
from astra_graph.export.torch_package import FinishedRun
from astra_graph.harness.selection import call
from astra_graph.kernel import expr
from astra_graph.kernel.contract import ContractError, OperationSpec

DECODE_TOKENS = (1, 16, 64, 256)
PREFILL_TOKENS = (2048,)
SEED = 20261125
GRAPH_CALLS = 8
"""Blocks per captured graph: one block of a decode step lasts a few microseconds, so several
per replay keep the event timing's resolution (about 0.5 us) out of the result."""
SERVING_DTYPES = ("float16", "bfloat16")
"""The block runs in the first of the contract's element types that is one of these (a serving
engine's model dtypes; an imported contract lists float32 first), else in its first."""


@dataclass(frozen=True)
class Projection:
    """A matmul of the block: ``[tokens, inner] @ [inner, outer]`` (sizes over the model's)."""

    inner: str
    outer: str


BLOCKS: dict[str, tuple[Projection | None, Projection]] = {
    "mlp": (Projection("hidden", "2 * intermediate"), Projection("intermediate", "hidden")),
    "norm": (None, Projection("hidden", "qkv")),
    "attention_out": (None, Projection("heads * head_dim", "hidden")),
}
"""Per ``[gate] block``: the projection before the op (writing its ``writes``), if any, and the
one after it (reading its ``reads``)."""


def serving_dtype(spec: OperationSpec) -> str:
    dtypes = spec.contract.dtypes
    return next((d for d in dtypes if d in SERVING_DTYPES), dtypes[0])


def _rows(tensor: torch.Tensor, tokens: int, width: int, where: str) -> torch.Tensor:
    """The first ``tokens * width`` elements of ``tensor`` as ``[tokens, width]``: how a
    projection reads an op's output laid out token-major (a drafted contract's tensor may be
    larger than what the kernel writes)."""
    if tensor.numel() < tokens * width:
        raise ExportError(
            f"{where}: {tensor.numel()} elements at {tokens} tokens, the block's projection "
            f"takes {tokens} x {width}"
        )
    return tensor.view(-1)[: tokens * width].view(tokens, width)


def _block(
    spec: OperationSpec,
    gate: GateBlock,
    tokens: int,
    dtype: torch.dtype,
    generator: torch.Generator,
) -> tuple[dict[str, int], Callable[[Any, dict[str, torch.Tensor]], None]]:
    """(dims of the op, block(op, op tensors)) for one token count; the block's weights live in
    its closure."""
    env = {"tokens": tokens, **MODEL}
    where = f"{spec.folder / FRAMEWORK_FILE}: gate"
    dims = {dim: expr.evaluate_int(text, env) for dim, text in gate.dims.items()}
    before, after = BLOCKS[gate.block]

    def weight(projection: Projection) -> torch.Tensor:
        rows = expr.evaluate_int(projection.inner, env)
        cols = expr.evaluate_int(projection.outer, env)
        values = torch.randn(rows, cols, generator=generator, device="cuda") / math.sqrt(rows)
        return values.to(dtype)

    up = weight(before) if before is not None else None
    x = torch.randn(tokens, MODEL["hidden"], generator=generator, device="cuda").to(dtype)
    down = weight(after)
    y = torch.empty(tokens, down.shape[1], dtype=dtype, device="cuda")

    def block(op: Any, t: dict[str, torch.Tensor]) -> None:
        if up is not None and gate.writes is not None:
            target = _rows(t[gate.writes], tokens, up.shape[1], f"{where}.writes")
            torch.matmul(x, up, out=target)
        op(t)
        torch.matmul(_rows(t[gate.reads], tokens, down.shape[0], f"{where}.reads"), down, out=y)

    return dims, block


def gate(run: FinishedRun, package: Path, original_source: Path) -> dict[str, Any]:
    spec, fw = run.spec, run.framework
    try:
        block_spec = gate_of(fw, spec.folder)
    except ContractError as exc:
        raise ExportError(str(exc)) from None
    original = load_original(spec, fw, original_source)
    exported = load_package(package).load(fallback=original)
    generator = torch.Generator(device="cuda")
    generator.manual_seed(SEED)
    dtype = serving_dtype(spec)
    rows: list[dict[str, Any]] = []
    for tokens in (*DECODE_TOKENS, *PREFILL_TOKENS):
        dims, block = _block(spec, block_spec, tokens, getattr(torch, dtype), generator)
        sides: dict[str, tuple[torch.cuda.CUDAGraph, int]] = {}
        # a graph holds raw addresses, not tensors: each side's tensors must outlive its
        # replays (torch.cuda.graph empties the cache at capture, so the first side's tensors,
        # dropped when the loop rebinds them, were unmapped and its replays faulted)
        alive: list[dict[str, torch.Tensor]] = []
        for name, op in (("original", original), ("exported", exported)):
            tensors = make_inputs(spec, dims, dtype, generator)
            alive.append(tensors)

            def run_op(t: dict[str, torch.Tensor], op: Any = op) -> None:
                op(*op_arguments(fw, spec, t))

            calls = [partial(block, run_op, tensors) for _ in range(GRAPH_CALLS)]
            sides[name] = (capture(calls), GRAPH_CALLS)
        timing = compare_graphs(sides)
        del alive
        rows.append(
            {
                "phase": "decode" if tokens in DECODE_TOKENS else "prefill",
                "tokens": tokens,
                "dims": dims,
                "original_us": timing["original_us"],
                "exported_us": timing["exported_us"],
                "speedup": timing["speedup"],
                "speedup_err": timing["speedup_err"],
                "call": call(timing["speedup"], timing["speedup_err"]),
            }
        )
        del sides
    logs = [math.log(r["speedup"]) for r in rows]
    geomean = math.exp(sum(logs) / len(logs))
    # error of a geometric mean from the per-shape relative errors (independent timings)
    err = geomean * math.sqrt(sum((r["speedup_err"] / r["speedup"]) ** 2 for r in rows)) / len(rows)
    verdict = call(geomean, err)
    decision = "keep" if verdict == "faster" else "revert"
    reason = {
        "faster": "the block is faster with the export",
        "tie": "the speedup disappears inside the block (a tie)",
        "slower": "the block is slower with the export",
    }[verdict]
    return {
        "op": spec.name,
        "framework_op": fw.qualname,
        "run_id": run.result.run_id,
        "device": torch.cuda.get_device_name(),
        "dtype": dtype,
        "model": MODEL,
        "block": block_spec.block,
        "blocks": rows,
        "geomean_speedup": geomean,
        "geomean_speedup_err": err,
        "call": verdict,
        "decision": decision,
        "summary": f"{spec.name}: {decision}: block speedup {geomean:.3f}x +- {err:.3f} "
        f"over {len(rows)} token counts ({reason})",
    }
