"""merge_attn_states_lse's production kernel against the FlashInfer-technique port (issue 14).

Times, through the evaluator's device-mode path (``Evaluator.bench``: L2 flushed per sample or
CUDA graphs over rotating copies under 10 us, both sides interleaved, median):

1. every tunable setting of ``kernels/merge_attn_states_lse/production.cu`` against
   ``benchmarks/technique_ports/merge_state_flashinfer.cu`` at the largest tuning shape
   (8192x64x128, where the port was ahead), in both dtypes;
2. the ``--keep`` best of those, the header's default setting and, with ``--before``, an
   earlier production kernel, against the port at every tuning shape in both dtypes.

Settings that cannot launch (too many registers for the block) are recorded with their error.
Results go to ``--out`` (JSON: device, date, commit, every report's shapes). A benchmark, not a
test: it never fails on a slow number.

    python benchmarks/merge_sweep.py --out sweep.json [--before old_production.cu]
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import sys
import time
from pathlib import Path
from typing import Any

from astra_graph.store.provenance import git_commit

ROOT = Path(__file__).resolve().parents[1]
OP = "merge_attn_states_lse"
PRODUCTION = ROOT / "kernels" / OP / "production.cu"
PORT = ROOT / "benchmarks" / "technique_ports" / "merge_state_flashinfer.cu"
LARGEST = {"tokens": 8192, "heads": 64, "head_dim": 128}
DTYPES = ("float16", "bfloat16")


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
            "latency_floor_us": s.latency_floor.median_us if s.latency_floor else None,
            "method": s.candidate.method,
        }
        for s in report.shapes
    ]


def _bench(evaluator: Any, kernel: Path, tunables: dict[str, int], **kw: Any) -> dict[str, Any]:
    started = time.perf_counter()
    try:
        report = evaluator.bench(OP, kernel, against=PORT, tunables=tunables, **kw)
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


def main(argv: list[str] | None = None) -> int:
    from astra_graph.harness.evaluator import Evaluator
    from astra_graph.kernel.contract import load_contract
    from astra_graph.kernel.header import load_implementation

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--before", type=Path, help="an earlier production kernel to time too")
    parser.add_argument("--keep", type=int, default=3, help="settings timed at every shape")
    parser.add_argument(
        "--threads", type=int, nargs="+", default=[128, 256, 512, 1024], help="THREADS swept"
    )
    args = parser.parse_args(argv)
    spec = load_contract(ROOT / "kernels" / OP)
    header = load_implementation(PRODUCTION, spec.contract).header
    names = list(header.tunables)
    settings = [
        dict(zip(names, v, strict=True)) for v in itertools.product(*header.tunables.values())
    ]
    settings = [s for s in settings if s["THREADS"] in args.threads]
    default = header.default_tunables()
    result: dict[str, Any] = {
        "benchmark": "merge_sweep",
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "commit": git_commit(),
        "largest": [],
        "all_shapes": [],
    }
    with Evaluator(deadline_s=120.0) as evaluator:
        import cupy

        name = cupy.cuda.runtime.getDeviceProperties(0)["name"]
        result["device"] = name.decode() if isinstance(name, bytes) else str(name)
        for setting in settings:
            for dtype in DTYPES:
                entry = _bench(evaluator, PRODUCTION, setting, shapes=[LARGEST], dtypes=[dtype])
                entry["dtype"] = dtype
                result["largest"].append(entry)
                shown = entry.get("shapes") or [{}]
                print(
                    f"largest {dtype} {setting}: {shown[0].get('ours_us')} vs "
                    f"{shown[0].get('port_us')} {entry.get('error', '')}",
                    flush=True,
                )
        args.out.write_text(json.dumps(result, indent=1))

        def score(setting: dict[str, int]) -> float:
            found = [e for e in result["largest"] if e["tunables"] == setting and e.get("shapes")]
            if len(found) < len(DTYPES):
                return -math.inf
            return sum(math.log(e["shapes"][0]["speedup"]) for e in found)

        ranked = sorted(settings, key=score, reverse=True)
        chosen = [default, *[s for s in ranked if s != default][: args.keep]]
        subjects = [(PRODUCTION, s) for s in chosen]
        if args.before is not None:
            subjects.append((args.before, {}))
        for kernel, setting in subjects:
            for dtype in DTYPES:
                entry = _bench(evaluator, kernel, setting, dtypes=[dtype])
                entry.update(
                    kernel=str(kernel.name if kernel != args.before else "before"), dtype=dtype
                )
                result["all_shapes"].append(entry)
                print(
                    f"all shapes {entry['kernel']} {dtype} {setting}: geomean "
                    f"{entry.get('geomean_speedup')} {entry.get('error', '')}",
                    flush=True,
                )
                for s in entry.get("shapes", []):
                    print(
                        f"   {s['label']:>12} {s['ours_us']:8.2f} {s['port_us']:8.2f} "
                        f"{s['speedup']:.3f} {s['call']}",
                        flush=True,
                    )
                args.out.write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
