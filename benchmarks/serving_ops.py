"""Issue 25's serving operations: production against naive on every suite shape, both dtypes.

    python benchmarks/serving_ops.py [--ops rms_norm,...] [--suites tuning,heldout] [--out FILE]

Device-mode timing (``Evaluator.bench``: CUDA graphs, cold L2, interleaved) of each operation's
production kernel against its naive kernel on the contract's suites, in each dtype. Per shape:
both medians, the speedup with its error and call (``tie`` inside the noise), the production
kernel's achieved bandwidth and share of the copy roofline. The last lines printed are a summary
per operation (geomean speedup, its range, and the lowest roofline share). Results go to
``benchmarks/results/serving-ops-<device>-<date>.json`` with device, date and commit.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import statistics
from pathlib import Path

from astra_graph.harness.evaluator import Evaluator
from astra_graph.kernel.catalog import resolve
from astra_graph.store.provenance import git_commit

RESULTS = Path(__file__).parent / "results"
SERVING_OPERATIONS = (
    "rms_norm",
    "gelu_and_mul",
    "gelu_tanh_and_mul",
    "rotary_embedding",
    "per_token_fp8_quant",
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", help=f"comma-separated operations (default: {SERVING_OPERATIONS})")
    parser.add_argument("--suites", default="tuning,heldout", help="comma-separated suites")
    parser.add_argument("--out", type=Path, help="result file (default under benchmarks/results)")
    args = parser.parse_args()
    ops = args.ops.split(",") if args.ops else list(SERVING_OPERATIONS)
    suites = args.suites.split(",")
    rows: list[dict[str, object]] = []
    summary: list[str] = []
    device = "unknown"
    with Evaluator() as evaluator:
        for op in ops:
            spec, _ = resolve(op)
            shapes = [dims for suite in suites for dims in spec.contract.suite(suite)]
            report = evaluator.bench(
                spec,
                spec.folder / "production.cu",
                against=spec.folder / "naive.cu",
                shapes=shapes,
                dtypes=spec.contract.dtypes,
            )
            device = report.device
            if report.rejection is not None:
                summary.append(f"{op:<22} REJECTED while timed: {report.rejection.message}")
                rows.append({"op": op, "rejection": report.rejection.model_dump()})
                continue
            table = [
                {
                    "shape": s.label,
                    "dtype": s.dtype,
                    "naive_us": s.baseline.median_us if s.baseline else None,
                    "production_us": s.candidate.median_us,
                    "speedup": s.speedup,
                    "speedup_err": s.speedup_err,
                    "call": s.call,
                    "achieved_gbps": s.achieved_gbps,
                    "roofline_pct": s.roofline_pct,
                }
                for s in report.shapes
            ]
            for r in table:
                print(
                    f"{op:<22} {r['dtype']:<9} {r['shape']:<22} naive {r['naive_us'] or 0:9.2f} us"
                    f"  production {r['production_us']:9.2f} us  {r['speedup'] or 0:6.2f}x "
                    f"{r['call'] or '':<8} {r['roofline_pct']:5.1f}% of roof"
                )
            speedups = [s.speedup for s in report.shapes if s.speedup]
            geomean = statistics.geometric_mean(speedups) if speedups else None
            lowest_roof = min(s.roofline_pct for s in report.shapes)
            low, high = min(speedups, default=math.nan), max(speedups, default=math.nan)
            rows.append({"op": op, "geomean_speedup": geomean, "shapes": table})
            summary.append(
                f"{op:<22} production vs naive: geomean {geomean or math.nan:.2f}x "
                f"(min {low:.2f}x, max {high:.2f}x) over {len(table)} shape-dtypes; "
                f"lowest roofline share {lowest_roof:.1f}%"
            )
    stamp = dt.datetime.now(dt.UTC)
    out = args.out or RESULTS / f"serving-ops-{device.replace(' ', '_')}-{stamp:%Y%m%d}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(
        json.dumps(
            {
                "device": device,
                "date": stamp.isoformat(),
                "commit": git_commit(),
                "mode": "device",
                "suites": suites,
                "results": rows,
            },
            indent=2,
        )
    )
    print(f"wrote {out}")
    print("summary:")
    for line in summary:
        print(line)


if __name__ == "__main__":
    main()
