"""merge_attn_states_lse's production kernel against FlashInfer's MergeState launch (issue 25).

Times, through the evaluator's device-mode path (``Evaluator.bench``: L2 flushed per sample or
CUDA graphs over rotating copies under 10 us, both sides interleaved, median), in both dtypes,
against ``benchmarks/technique_ports/merge_state_flashinfer.cu`` (FlashInfer's launch and
arithmetic, on the shapes FlashInfer supports: head_dim 64-512, at most 1024 threads a token):

1. the production kernel's default setting at every tuning and held-out shape, decode first;
2. every other tunable setting of the production kernel at the decode shapes (at most
   :data:`DECODE_MAX_TOKENS` tokens, where FlashInfer's launch was ahead), so that a shape where
   the default is slower shows which setting (if any) wins there.

Settings that cannot launch are recorded with their error. Results go to ``--out`` (JSON: device,
date, commit, every report's shapes); the summary printed last lists per shape and dtype the
port's time, the default's, its speedup and call, and the best setting. A benchmark, not a test:
it never fails on a slow number.

    python benchmarks/merge_sweep.py --out merge.json [--settings default]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from astra_graph.store.provenance import git_commit

ROOT = Path(__file__).resolve().parents[1]
OP = "merge_attn_states_lse"
PRODUCTION = ROOT / "kernels" / OP / "production.cu"
PORT = ROOT / "benchmarks" / "technique_ports" / "merge_state_flashinfer.cu"
DTYPES = ("float16", "bfloat16")
DECODE_MAX_TOKENS = 256
"""Decode batches are 1-256 tokens (field notes section 2); prefill chunks start at 512."""


def _shapes(report: Any) -> list[dict[str, Any]]:
    return [
        {
            "label": s.label,
            "dtype": s.dtype,
            "ours_us": s.candidate.median_us,
            "port_us": s.baseline.median_us if s.baseline else None,
            "speedup": s.speedup,
            "speedup_err": s.speedup_err,
            "call": s.call,
            "copy_floor_us": s.copy_floor.median_us if s.copy_floor else None,
            "launch_floor_us": s.launch_floor.median_us if s.launch_floor else None,
            "limit": s.limit,
            "method": s.candidate.method,
        }
        for s in report.shapes
    ]


def _bench(evaluator: Any, tunables: dict[str, int], **kw: Any) -> dict[str, Any]:
    started = time.perf_counter()
    try:
        report = evaluator.bench(OP, PRODUCTION, against=PORT, tunables=tunables, **kw)
    except Exception as exc:  # a setting that cannot launch is a result, not a crash
        return {"tunables": tunables, "error": f"{type(exc).__name__}: {exc}"[:300]}
    entry: dict[str, Any] = {
        "tunables": tunables,
        "shapes": _shapes(report),
        "geomean_speedup": report.geomean_speedup,
        "seconds": time.perf_counter() - started,
    }
    if report.rejection is not None:
        entry["rejection"] = report.rejection.message
    return entry


def _summary(result: dict[str, Any]) -> list[str]:
    """Per shape and dtype: the port, the default and its call, the best setting."""
    default = result["default"]
    lines = [
        f"{'shape':<14}{'dtype':<10}{'port us':>9}{'prod us':>9}{'speedup':>9}  {'call':<7}"
        "best setting (speedup)"
    ]
    slower = []
    for entry in result["default_runs"]:
        for s in entry.get("shapes", []):
            best = max(
                (
                    (t["speedup"], run["tunables"])
                    for run in result["settings"]
                    for t in run.get("shapes", [])
                    if t["label"] == s["label"] and t["dtype"] == s["dtype"] and t["speedup"]
                ),
                default=(None, None),
                key=lambda pair: pair[0] or 0.0,
            )
            best_text = "-" if best[0] is None else f"{best[1]} ({best[0]:.3f}x)"
            lines.append(
                f"{s['label']:<14}{s['dtype']:<10}{s['port_us']:9.2f}{s['ours_us']:9.2f}"
                f"{s['speedup']:8.3f}x  {s['call'] or '-':<7}{best_text}"
            )
            if s["call"] == "slower":
                slower.append(f"{s['label']} {s['dtype']}")
    lines.append(
        f"production {default}: slower than FlashInfer's launch beyond the noise at "
        + (", ".join(slower) if slower else "no shape")
    )
    return lines


def main(argv: list[str] | None = None) -> int:
    from astra_graph.harness.compile import gpu_arch
    from astra_graph.harness.evaluator import Evaluator
    from astra_graph.kernel.contract import load_contract
    from astra_graph.kernel.dtypes import DTYPES as KNOWN
    from astra_graph.kernel.header import load_implementation

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument(
        "--settings", choices=("all", "default"), default="all", help="production settings timed"
    )
    args = parser.parse_args(argv)
    if gpu_arch() is None:
        print("merge_sweep: no CUDA GPU visible: the kernels are timed on a GPU", file=sys.stderr)
        return 2
    spec = load_contract(ROOT / "kernels" / OP)
    header = load_implementation(PRODUCTION, spec.contract).header
    port = load_implementation(PORT, spec.contract).header
    shapes = [*spec.contract.suite("tuning"), *spec.contract.suite("heldout")]
    # decode first: the shapes where FlashInfer's launch was ahead (issue 25)
    shapes.sort(key=lambda d: d["tokens"])
    default = header.default_tunables()
    settings = [s for s in header.configurations() if s != default]
    if args.settings == "default":
        settings = []
    result: dict[str, Any] = {
        "benchmark": "merge_sweep",
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "commit": git_commit(),
        "default": default,
        "default_runs": [],
        "settings": [],
    }
    with Evaluator(deadline_s=120.0) as evaluator:
        import cupy

        name = cupy.cuda.runtime.getDeviceProperties(0)["name"]
        result["device"] = name.decode() if isinstance(name, bytes) else str(name)
        for dtype in DTYPES:
            supported = [d for d in shapes if port.unmet_requirement(d, KNOWN[dtype], {}) is None]
            decode = [d for d in supported if d["tokens"] <= DECODE_MAX_TOKENS]
            entry = _bench(evaluator, default, shapes=supported, dtypes=[dtype])
            entry["dtype"] = dtype
            result["default_runs"].append(entry)
            print(
                f"default {dtype}: geomean {entry.get('geomean_speedup')} {entry.get('error', '')}",
                flush=True,
            )
            for setting in settings:
                run = _bench(evaluator, setting, shapes=decode, dtypes=[dtype])
                run["dtype"] = dtype
                result["settings"].append(run)
                print(
                    f"  {dtype} {setting}: geomean {run.get('geomean_speedup')} "
                    f"{run.get('error', '')}",
                    flush=True,
                )
            args.out.write_text(json.dumps(result, indent=1))
    print("\n".join(_summary(result)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
