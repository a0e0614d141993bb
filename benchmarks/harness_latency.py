"""How long does evaluating one candidate take? astra-graph's harness against a load_inline one.

For each operation, the production kernel is the candidate and the naive one the baseline:

* ``astra`` (this project): ``Evaluator.evaluate`` = compile with NVRTC, verify on every suite
  (tuning, held-out, edge; every dtype; special values; two poisoned runs per case), then time
  the tuning shapes in device mode. Measured three ways:
  - ``cold``: empty compile cache and a fresh worker process (CUDA context start included);
  - ``warm``: the same evaluation again in the same worker (compile cache and context warm);
  - ``new_candidate``: a candidate the cache has never seen (its source differs by a comment) in
    the warm worker: what each new candidate of an optimisation loop costs.
* ``load_inline`` (how Astra's and KernelBench's evaluators are built): a generated C++/CUDA
  wrapper around the same kernel source compiled by ``torch.utils.cpp_extension.load_inline``,
  5 correctness trials against a PyTorch reference on the first tuning shape, then 3 warm-ups and
  100 event-timed calls. ``cold`` builds in an empty directory, ``warm`` finds the build.

The astra path does far more work per candidate (every suite and dtype, timing every tuning
shape). Ratios are load_inline's seconds over astra's: cold over cold, warm over warm, and per
candidate (load_inline cold, since each candidate is new source it must build, over astra's
``new_candidate``). The three load_inline builds run in parallel processes before the astra
evaluations, so that no timing overlaps. Results go to
``benchmarks/results/harness_latency-<date>.json`` with the device, the date and the git commit.

Usage (on a GPU host with torch, nvcc and ninja): ``python benchmarks/harness_latency.py``.
This is a benchmark, not a test: it never fails on a slow number.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import shutil
import sys
import tempfile
import time
import uuid
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from astra_graph.store.provenance import git_commit

ROOT = Path(__file__).resolve().parents[1]
OPS = ("silu_and_mul", "fused_add_rmsnorm", "merge_attn_states_lse")
CORRECTNESS_TRIALS = 5
TIMING_WARMUP = 3
TIMING_TRIALS = 100
TARGET_WARM_S = 2.0
TARGET_RATIO = 10.0


# --- astra-graph's evaluator -------------------------------------------------------------------


def _timed_evaluation(evaluator: Any, op: str, baseline: Path, candidate: Path) -> dict[str, Any]:
    started = time.perf_counter()
    evaluation = evaluator.evaluate(op, baseline, candidate)
    seconds = time.perf_counter() - started
    bench = evaluation.bench
    return {
        "seconds": seconds,
        "timing_s": bench.seconds if bench else 0.0,
        "accepted": evaluation.verdict.accepted,
        "verdict": evaluation.verdict.message,
        "cases_checked": evaluation.verdict.cases_checked,
        "timed_shapes": len(bench.shapes) if bench else 0,
        "geomean_speedup": bench.geomean_speedup if bench else None,
    }


def astra_latency(op: str) -> dict[str, Any]:
    """Cold, warm and new-candidate evaluation times through :class:`Evaluator`."""
    from astra_graph.harness.evaluator import Evaluator

    folder = ROOT / "kernels" / op
    baseline, candidate = folder / "naive.cu", folder / "production.cu"
    saved = os.environ.get("ASTRA_CACHE_DIR")
    with tempfile.TemporaryDirectory(prefix="astra-latency-") as cache:
        os.environ["ASTRA_CACHE_DIR"] = cache  # the worker is spawned after this: it inherits
        try:
            with Evaluator() as evaluator:
                cold = _timed_evaluation(evaluator, op, baseline, candidate)
                warm = _timed_evaluation(evaluator, op, baseline, candidate)
                variant = Path(cache) / f"variant-{op}.cu"
                variant.write_text(candidate.read_text() + f"\n// variant {uuid.uuid4().hex}\n")
                fresh = _timed_evaluation(evaluator, op, baseline, variant)
        finally:
            if saved is None:
                os.environ.pop("ASTRA_CACHE_DIR", None)
            else:
                os.environ["ASTRA_CACHE_DIR"] = saved
    return {"cold": cold, "warm": warm, "new_candidate": fresh}


def defence_costs(op: str) -> dict[str, Any]:
    """Seconds per step of the check protocol (docs/VERIFICATION.md), summed over the cases of a
    warm full check of production against naive, run in this process (``verify.PROFILE``).

    Each defence's cost is its step: special values and row magnitudes, the guard bands (arena,
    then check and refill inside the runs), the unchecked launches, run 2 (stale outputs,
    changed inputs), run 3 (buffers at other addresses), and the random shapes (their cases).
    """
    from astra_graph.harness import verify
    from astra_graph.harness.payload import CheckRequest, KernelPayload, OperationPayload
    from astra_graph.kernel.catalog import resolve
    from astra_graph.kernel.contract import SUITE_NAMES
    from astra_graph.kernel.header import load_implementation

    spec, production = resolve(op)
    naive = load_implementation(spec.folder / "naive.cu", spec.contract)
    request = CheckRequest(
        op=OperationPayload.of(spec),
        baseline=KernelPayload.of(naive),
        candidate=KernelPayload.of(production),
        suites=list(SUITE_NAMES),
    ).model_dump()
    for _ in range(2):  # cold, then once more: CuPy compiles its kernels on first use per shape
        verify.run_check(request)
    verify.PROFILE = {}
    started = time.perf_counter()
    try:
        verdict = verify.run_check(request)
        steps = dict(verify.PROFILE)
    finally:
        verify.PROFILE = None
    return {
        "check_s": time.perf_counter() - started,
        "accepted": verdict["accepted"],
        "cases": verdict["cases_checked"],
        "steps_s": steps,
    }


# --- the load_inline evaluator ------------------------------------------------------------------

_TORCH_DTYPES = {
    "float16": "float16",
    "bfloat16": "bfloat16",
    "float32": "float32",
    "float64": "float64",
    "int32": "int32",
    "int64": "int64",
}
_C_SCALARS = {"int32": "int", "int64": "long long", "float32": "float", "float64": "double"}


def wrapper_source(spec: Any, impl: Any, dtype: str) -> str:
    """A C++/CUDA file: the kernel source and a host ``launch`` taking torch tensors."""
    from astra_graph.kernel.dtypes import DTYPES

    entry = impl.header.entry_for(DTYPES[dtype], impl.header.default_tunables())
    contract = spec.contract
    args = []
    for i, arg in enumerate(contract.args):
        ctype = contract.dtype_of(arg, dtype).ctype
        args.append(f"reinterpret_cast<{ctype}*>(tensors[{i}].data_ptr())")
    for i, scalar in enumerate(contract.scalars):
        args.append(f"static_cast<{_C_SCALARS[scalar.dtype]}>(scalars[{i}])")
    joined = ",\n        ".join(args)
    return f"""#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>

{impl.source}

void launch(std::vector<torch::Tensor> tensors, std::vector<double> scalars,
            std::vector<int64_t> geometry) {{
    const dim3 grid(geometry[0], geometry[1], geometry[2]);
    const dim3 block(geometry[3], geometry[4], geometry[5]);
    const int smem = static_cast<int>(geometry[6]);
    if (smem > 48 * 1024) {{
        cudaFuncSetAttribute(reinterpret_cast<const void*>(&{entry}),
                             cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    }}
    {entry}<<<grid, block, smem, at::cuda::getCurrentCUDAStream()>>>(
        {joined});
    C10_CUDA_KERNEL_LAUNCH_CHECK();
}}
"""


DECLARATION = (
    "void launch(std::vector<torch::Tensor> tensors, std::vector<double> scalars, "
    "std::vector<int64_t> geometry);"
)


def torch_inputs(spec: Any, dims: dict[str, int], dtype: str) -> list[Any]:
    import torch

    contract = spec.contract
    tensors = []
    for arg in contract.args:
        shape = contract.shape_of(arg, dims)
        torch_dtype = getattr(torch, _TORCH_DTYPES[contract.dtype_of(arg, dtype).name])
        if arg.role == "output":
            tensors.append(torch.empty(shape, dtype=torch_dtype, device="cuda"))
            continue
        init = arg.init
        if init.dist == "normal":
            values = torch.randn(shape, device="cuda") * init.scale + init.mean
        else:
            values = torch.rand(shape, device="cuda") * (init.high - init.low) + init.low
        tensors.append(values.to(torch_dtype))
    return tensors


def torch_reference(op: str, tensors: list[Any], scalars: dict[str, Any]) -> dict[int, Any]:
    """The PyTorch model's outputs (float32 math), keyed by argument position."""
    import torch

    if op == "silu_and_mul":
        out, x = tensors
        d = x.shape[1] // 2
        a, b = x[:, :d].float(), x[:, d:].float()
        return {0: (torch.nn.functional.silu(a) * b).to(out.dtype)}
    if op == "fused_add_rmsnorm":
        inp, residual, weight = tensors
        x = inp.float() + residual.float()
        rms = torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + scalars["eps"])
        return {0: (x * rms * weight.float()).to(inp.dtype), 1: x.to(residual.dtype)}
    if op == "merge_attn_states_lse":
        v_a, s_a, v_b, s_b, v_merged, _ = tensors
        m = torch.maximum(s_a, s_b)
        w_a, w_b = torch.exp2(s_a - m), torch.exp2(s_b - m)
        total = w_a + w_b
        v = (w_a[..., None] * v_a.float() + w_b[..., None] * v_b.float()) / total[..., None]
        return {4: v.to(v_merged.dtype), 5: torch.log2(total) + m}
    raise ValueError(f"no torch reference for {op}")


def inline_evaluation(op: str, build_dir: Path, name: str) -> dict[str, Any]:
    """Compile with load_inline, check against torch 5 times, time 100 calls: seconds of each."""
    import torch
    from torch.utils.cpp_extension import load_inline

    from astra_graph.harness.compile import compile_options
    from astra_graph.kernel.contract import load_contract
    from astra_graph.kernel.dtypes import DTYPES
    from astra_graph.kernel.header import load_implementation

    spec = load_contract(ROOT / "kernels" / op)
    impl = load_implementation(ROOT / "kernels" / op / "production.cu", spec.contract)
    dtype = spec.contract.dtypes[0]
    dims = spec.contract.suite("tuning")[0]
    settings = impl.header.default_tunables()
    flags = ["-O3", *compile_options(settings, bool(settings.get("FAST_MATH", 0)))]
    started = time.perf_counter()
    module = load_inline(
        name=name,
        cpp_sources=DECLARATION,
        cuda_sources=wrapper_source(spec, impl, dtype),
        functions=["launch"],
        extra_cuda_cflags=flags,
        build_directory=str(build_dir),
        verbose=False,
    )
    compiled = time.perf_counter()
    grid, block, smem = impl.header.launch(dims, DTYPES[dtype], settings)
    geometry = [*grid, *block, smem]
    scalars = spec.contract.scalar_values(dims)
    scalar_list = [float(scalars[s.name]) for s in spec.contract.scalars]
    correct = True
    for _ in range(CORRECTNESS_TRIALS):
        tensors = torch_inputs(spec, dims, dtype)
        expected = torch_reference(op, [t.clone() for t in tensors], scalars)
        module.launch(tensors, scalar_list, geometry)
        torch.cuda.synchronize()
        for index, value in expected.items():
            got = tensors[index].float()
            correct &= bool(torch.allclose(got, value.float(), atol=1e-2, rtol=1e-2))
    checked = time.perf_counter()
    tensors = torch_inputs(spec, dims, dtype)
    for _ in range(TIMING_WARMUP):
        module.launch(tensors, scalar_list, geometry)
    torch.cuda.synchronize()
    times = []
    for _ in range(TIMING_TRIALS):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        module.launch(tensors, scalar_list, geometry)
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) * 1000.0)
    done = time.perf_counter()
    times.sort()
    return {
        "seconds": done - started,
        "compile_s": compiled - started,
        "check_s": checked - compiled,
        "time_s": done - checked,
        "correct": correct,
        "shape": dims,
        "median_us": times[len(times) // 2],
    }


def inline_latency(op: str) -> dict[str, Any]:
    build = Path(tempfile.mkdtemp(prefix=f"inline-{op}-"))
    name = f"astra_inline_{op}_{uuid.uuid4().hex[:8]}"
    try:
        cold = inline_evaluation(op, build, name)
        warm = inline_evaluation(op, build, name)
    except Exception as exc:  # a build failure is a result to report, not a crash
        return {"error": f"{type(exc).__name__}: {str(exc).strip().splitlines()[-1][:300]}"}
    finally:
        shutil.rmtree(build, ignore_errors=True)
    return {"cold": cold, "warm": warm}


# --- the run ---------------------------------------------------------------------------------


def _device_name() -> str:
    import cupy

    props = cupy.cuda.runtime.getDeviceProperties(0)
    name = props["name"]
    return name.decode() if isinstance(name, bytes) else str(name)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", nargs="+", default=list(OPS), choices=OPS)
    parser.add_argument("--skip-inline", action="store_true", help="only astra-graph's path")
    parser.add_argument(
        "--inline-only", action="store_true", help="only the load_inline path, to --out"
    )
    parser.add_argument(
        "--inline-from", type=Path, help="load_inline results of an earlier --inline-only run"
    )
    parser.add_argument("--out", type=Path, help="JSON file (default benchmarks/results/...)")
    args = parser.parse_args(argv)
    if args.inline_only:
        if args.out is None:
            parser.error("--inline-only needs --out")
        started = time.perf_counter()
        found = _inline_all(args.ops)
        args.out.write_text(json.dumps({"ops": found, "wall_s": time.perf_counter() - started}))
        return 0
    date = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    results: dict[str, Any] = {
        "benchmark": "harness_latency",
        "device": _device_name(),
        "date": date,
        "commit": git_commit(),
        "python": sys.version.split()[0],
        "targets": {"warm_s": TARGET_WARM_S, "speedup_over_load_inline": TARGET_RATIO},
        "ops": {},
    }
    inline: dict[str, dict[str, Any]] = {}
    if args.inline_from is not None:
        inline = json.loads(args.inline_from.read_text())["ops"]
        results["load_inline_note"] = (
            "measured by an earlier --inline-only run (one process per operation, in parallel), "
            "possibly while other work ran on the host"
        )
    elif not args.skip_inline:
        inline = _inline_all(args.ops)
        results["load_inline_note"] = "one process per operation, in parallel, before astra's"
    out = args.out or ROOT / "benchmarks" / "results" / f"harness_latency-{date[:10]}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    for op in args.ops:
        entry: dict[str, Any] = {"astra": astra_latency(op), "defence_costs": defence_costs(op)}
        if op in inline:
            entry["load_inline"] = inline[op]
            if "error" not in inline[op]:
                entry["ratio"] = _ratios(entry["astra"], inline[op])
        results["ops"][op] = entry
        out.write_text(json.dumps(results, indent=2))  # after each operation: partial results
        print(_summary_line(op, entry), flush=True)
    print(f"wrote {out}")
    return 0


def _inline_all(ops: list[str]) -> dict[str, dict[str, Any]]:
    """The load_inline path for every operation, one process each, all at once (nvcc is
    single-threaded and the GPU work is a few milliseconds per operation)."""
    spawn = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=len(ops), mp_context=spawn) as pool:
        return dict(zip(ops, pool.map(inline_latency, ops), strict=True))


def _ratios(astra: dict[str, Any], inline: dict[str, Any]) -> dict[str, float]:
    """load_inline's seconds over astra-graph's. ``per_candidate`` is the one that matters in an
    optimisation loop: every candidate is new source, which load_inline must build from scratch,
    while astra-graph's warm worker compiles only the kernel with NVRTC."""
    return {
        "cold": inline["cold"]["seconds"] / astra["cold"]["seconds"],
        "warm": inline["warm"]["seconds"] / astra["warm"]["seconds"],
        "per_candidate": inline["cold"]["seconds"] / astra["new_candidate"]["seconds"],
    }


def _summary_line(op: str, entry: dict[str, Any]) -> str:
    astra = entry["astra"]
    fresh = astra["new_candidate"]["seconds"]
    text = (
        f"{op:<24} astra cold {astra['cold']['seconds']:6.2f} s  warm "
        f"{astra['warm']['seconds']:5.2f} s  new candidate {fresh:5.2f} s"
        f"  (accepted {astra['warm']['accepted']}, {astra['warm']['cases_checked']} cases)"
    )
    costs = entry["defence_costs"]
    text += (
        f"\n  {'check (in process, warm)':<52} {costs['check_s']:6.3f} s, {costs['cases']} cases"
    )
    for step, seconds in sorted(costs["steps_s"].items()):
        text += f"\n  {step:<52} {seconds:6.3f} s"
    inline = entry.get("load_inline")
    if inline and "error" in inline:
        text += f" | load_inline failed: {inline['error']}"
    elif inline:
        text += (
            f" | load_inline cold {inline['cold']['seconds']:6.2f} s warm "
            f"{inline['warm']['seconds']:5.2f} s | ratio cold {entry['ratio']['cold']:.1f}x "
            f"warm {entry['ratio']['warm']:.1f}x per candidate "
            f"{entry['ratio']['per_candidate']:.1f}x"
        )
    return text


if __name__ == "__main__":
    sys.exit(main())
