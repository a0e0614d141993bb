"""The tuner's gain: per-shape speedup of the tuned dispatch table over each implementation's
default tunables, in device mode, for every naive and production implementation.

    python benchmarks/tuning_speedup.py [--ops silu_and_mul,...] [--implementations naive]
        [--budget-s 60] [--out FILE]

Each implementation is swept on its contract's tuning suite
(``astra_graph.harness.tuning.tune``), then
every bucket's chosen setting is timed against the default setting on that bucket's shapes and
on the held-out shapes of the same bucket (which the sweep never saw). Results go to
``benchmarks/results/tuning-<device>-<date>.json`` with device, date and commit.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
from pathlib import Path

from astra_graph.harness.evaluator import Evaluator
from astra_graph.harness.tuning import group_by_bucket, tune
from astra_graph.kernel.catalog import operations
from astra_graph.store.provenance import git_commit

RESULTS = Path(__file__).parent / "results"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", help="comma-separated operations (default: all)")
    parser.add_argument(
        "--implementations",
        default="naive,production",
        help="comma-separated implementations to tune (issue 25's tuner-only gain: naive)",
    )
    parser.add_argument("--budget-s", type=float, default=60.0, help="sweep budget per kernel")
    parser.add_argument("--out", type=Path, help="result file (default under benchmarks/results)")
    args = parser.parse_args()
    wanted = set(args.ops.split(",")) if args.ops else None
    for impl_name in args.implementations.split(","):
        if impl_name not in ("naive", "production"):
            parser.error(f"--implementations: expected naive and/or production, got {impl_name!r}")
    rows: list[dict[str, object]] = []
    device = "unknown"
    with Evaluator() as evaluator:
        for spec in operations():
            if wanted and spec.name not in wanted:
                continue
            dtype = spec.contract.dtypes[0]
            for impl_name in args.implementations.split(","):
                path = spec.folder / f"{impl_name}.cu"
                report = tune(
                    evaluator,
                    spec,
                    path,
                    baseline=path,
                    shapes=spec.contract.suite("tuning"),
                    dtype=dtype,
                    budget_s=args.budget_s,
                )
                table = []
                for suite in ("tuning", "heldout"):
                    by_bucket = group_by_bucket(spec, spec.contract.suite(suite), dtype)
                    for entry in report.dispatch:
                        shapes = by_bucket.get(entry.bucket)
                        if not shapes:
                            continue
                        timing = evaluator.bench(
                            spec,
                            path,
                            against=path,
                            shapes=shapes,
                            dtypes=[dtype],
                            tunables=entry.tunables,
                        )
                        device = timing.device
                        table += [
                            {
                                "suite": suite,
                                "bucket": entry.bucket,
                                "shape": s.label,
                                "tunables": entry.tunables,
                                "default_us": s.baseline.median_us if s.baseline else None,
                                "tuned_us": s.candidate.median_us,
                                "speedup": s.speedup,
                                "speedup_err": s.speedup_err,
                                "call": s.call,
                            }
                            for s in timing.shapes
                        ]
                speedups = [r["speedup"] for r in table if r["speedup"]]
                geomean = (
                    math.exp(sum(map(math.log, speedups)) / len(speedups)) if speedups else None
                )
                rows.append(
                    {
                        "op": spec.name,
                        "implementation": impl_name,
                        "dtype": dtype,
                        "geomean_speedup": geomean,
                        "tuning": report.model_dump(),
                        "shapes": table,
                    }
                )
                print(
                    f"{spec.name:<24} {impl_name:<11} geomean {geomean or float('nan'):.3f}x  "
                    f"({len(report.dispatch)} buckets, {report.tried} timed, "
                    f"{len(report.skipped)} skipped, {report.seconds:.0f} s)"
                )
                for r in table:
                    print(
                        f"    {r['suite']:<8} {r['bucket']:<15} {r['shape']:<16} "
                        f"{r['tunables']!s:<32} {r['speedup'] or float('nan'):.3f}x {r['call']}"
                    )
    stamp = dt.datetime.now(dt.UTC)
    out = args.out or RESULTS / f"tuning-{device.replace(' ', '_')}-{stamp:%Y%m%d}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(
        json.dumps(
            {
                "device": device,
                "date": stamp.isoformat(),
                "commit": git_commit(),
                "mode": "device",
                "results": rows,
            },
            indent=2,
        )
    )
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
