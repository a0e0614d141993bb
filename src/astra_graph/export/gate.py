"""``astra export --gate``: keep or revert, decided on a model block around the op, not the op.

A kernel 1.3x faster alone may be invisible next to the matmuls it sits between. The gate builds
the block a Llama-style decoder layer runs around the operation, in torch, at a serving model's
sizes (:data:`MODEL`, Llama-3-8B) and the token counts a serving engine runs
(:data:`DECODE_TOKENS` one CUDA graph per batch size, :data:`PREFILL_TOKENS` a chunked-prefill
chunk), once with the original op and once with the export, each captured in a CUDA graph and
replayed alternately (``measure.compare_graphs``):

- ``silu_and_mul``: the MLP, ``gate_up = x @ W_gu`` -> ``act(out, gate_up)`` -> ``out @ W_down``;
- ``fused_add_rmsnorm``: the norm block, ``fused_add_rmsnorm(h, residual, w, eps)`` ->
  ``h @ W_qkv``;
- ``merge_attn_states_lse``: the end of split-KV attention, ``merge`` -> ``o @ W_o``.

The decision uses the project's selection rule on the geometric mean of the block speedups over
the token counts (``astra_graph.harness.selection.call``): ``keep`` only when the block is faster
beyond a tie; a tie is ``revert`` with "the speedup disappears inside the block".
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import torch

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

MODEL = {"hidden": 4096, "intermediate": 14336, "qkv": 6144, "heads": 32, "head_dim": 128}
"""Llama-3-8B: hidden 4096, MLP 14336, q + k + v = 4096 + 2 * 1024 (8 KV heads of 128)."""
DECODE_TOKENS = (1, 16, 64, 256)
PREFILL_TOKENS = (2048,)
SEED = 20261125
GRAPH_CALLS = 8
"""Blocks per captured graph: one block of a decode step lasts a few microseconds, so several
per replay keep the event timing's resolution (about 0.5 us) out of the result."""


def _block(
    op_name: str, tokens: int, dtype: torch.dtype, generator: torch.Generator
) -> tuple[dict[str, int], Callable[[Any, dict[str, torch.Tensor]], None], dict[str, Any]]:
    """(dims of the op, block(op, op tensors), weights) for one token count."""
    h = MODEL["hidden"]

    def weight(rows: int, cols: int) -> torch.Tensor:
        values = torch.randn(rows, cols, generator=generator, device="cuda") / math.sqrt(rows)
        return values.to(dtype)

    if op_name == "silu_and_mul":
        i = MODEL["intermediate"]
        x = torch.randn(tokens, h, generator=generator, device="cuda").to(dtype)
        w = {"x": x, "gate_up": weight(h, 2 * i), "down": weight(i, h)}

        def mlp(op: Any, t: dict[str, torch.Tensor]) -> None:
            torch.matmul(w["x"], w["gate_up"], out=t["x"])
            op(t)
            torch.matmul(t["out"], w["down"], out=w["y"])

        w["y"] = torch.empty(tokens, h, dtype=dtype, device="cuda")
        return {"tokens": tokens, "d": i}, mlp, w
    if op_name == "fused_add_rmsnorm":
        w = {"qkv": weight(h, MODEL["qkv"])}
        w["y"] = torch.empty(tokens, MODEL["qkv"], dtype=dtype, device="cuda")

        def norm(op: Any, t: dict[str, torch.Tensor]) -> None:
            op(t)
            torch.matmul(t["input"], w["qkv"], out=w["y"])

        return {"tokens": tokens, "hidden": h}, norm, w
    heads, head_dim = MODEL["heads"], MODEL["head_dim"]
    w = {"o": weight(heads * head_dim, h)}
    w["y"] = torch.empty(tokens, h, dtype=dtype, device="cuda")

    def merge(op: Any, t: dict[str, torch.Tensor]) -> None:
        op(t)
        torch.matmul(t["v_merged"].view(tokens, heads * head_dim), w["o"], out=w["y"])

    return {"tokens": tokens, "heads": heads, "head_dim": head_dim}, merge, w


def gate(run: FinishedRun, package: Path, original_source: Path) -> dict[str, Any]:
    spec, fw = run.spec, run.framework
    original = load_original(spec, fw, original_source)
    exported = load_package(package).load(fallback=original)
    generator = torch.Generator(device="cuda")
    generator.manual_seed(SEED)
    dtype = spec.contract.dtypes[0]
    rows: list[dict[str, Any]] = []
    for tokens in (*DECODE_TOKENS, *PREFILL_TOKENS):
        dims, block, _ = _block(spec.name, tokens, getattr(torch, dtype), generator)
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
        "blocks": rows,
        "geomean_speedup": geomean,
        "geomean_speedup_err": err,
        "call": verdict,
        "decision": decision,
        "summary": f"{spec.name}: {decision}: block speedup {geomean:.3f}x +- {err:.3f} "
        f"over {len(rows)} token counts ({reason})",
    }
