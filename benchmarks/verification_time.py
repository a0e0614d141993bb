"""What the domain suite costs: full verification time per operation, before and after issue 22.

For each operation the production kernel is checked against itself (``Evaluator.check``: every
suite, both dtypes, random shapes) twice in one warm worker: with ``domain=False`` (the check as
it was before the domain suite: suites and random shapes, though with the values from the whole
type and structured rows, which cost no extra cases) and with ``domain=True`` (the domain suite
added: min/max per dim, 2^31 elements and bytes, gridDim limits, non-multiples, a whole-domain
sample; large shapes by the light protocol or skipped when they exceed the free memory). A first,
untimed check warms the compile cache and the worker. The verdict's notes say which domain
shapes were skipped and how long the domain cases took. Then the step every accepted candidate
also takes (``Evaluator.sanitize``: compute-sanitizer memcheck and racecheck over the small
shapes, every dtype) is timed once; where the tool is missing the row says so instead of a time.

Usage (GPU host): ``python benchmarks/verification_time.py [--out FILE] [--repeats N]``. Writes
JSON (device, date, commit, seconds per operation and setting, notes) and prints a summary last.
This is a benchmark, not a test: it never fails on a slow number.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

from astra_graph.harness.evaluator import Evaluator
from astra_graph.kernel.catalog import operations, resolve
from astra_graph.store.provenance import git_commit

ROOT = Path(__file__).resolve().parents[1]


def _device() -> str:
    try:
        import cupy

        props = cupy.cuda.runtime.getDeviceProperties(0)
        return str(props["name"].decode())
    except Exception as exc:  # no GPU: the script still says why it measured nothing
        return f"no GPU ({type(exc).__name__})"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=None, help="JSON file to write")
    parser.add_argument("--repeats", type=int, default=1, help="timed checks per setting")
    args = parser.parse_args(argv)
    if args.repeats < 1:
        print("--repeats: expected a whole number >= 1", file=sys.stderr)
        return 2
    date = datetime.now(UTC).isoformat(timespec="seconds")
    out = args.out or ROOT / "benchmarks" / "results" / f"verification_time-{date[:10]}.json"
    results: dict[str, object] = {
        "device": _device(),
        "date": date,
        "commit": git_commit() or "unknown",
        "ops": {},
    }
    ops: dict[str, dict[str, object]] = {}
    with Evaluator(deadline_s=600) as evaluator:
        for op in sorted(spec.name for spec in operations()):  # every shipped operation
            spec, production = resolve(op)
            evaluator.check(spec, production.path, production.path, domain=False)  # warm-up
            row: dict[str, object] = {}
            for setting, domain in (("before", False), ("after", True)):
                seconds, notes, accepted = [], [], True
                for _ in range(args.repeats):
                    started = time.perf_counter()
                    verdict = evaluator.check(spec, production.path, production.path, domain=domain)
                    seconds.append(time.perf_counter() - started)
                    accepted = accepted and verdict.accepted
                    notes = verdict.notes or ([verdict.message] if not verdict.accepted else [])
                row[setting] = {
                    "seconds": statistics.median(seconds),
                    "all_seconds": seconds,
                    "accepted": accepted,
                    "cases": verdict.cases_checked,
                    "notes": notes,
                }
                print(
                    f"{op} {setting}: {statistics.median(seconds):.2f} s, "
                    f"{verdict.cases_checked} cases, accepted={accepted}; {' | '.join(notes)}",
                    flush=True,
                )
            started = time.perf_counter()
            report = evaluator.sanitize(spec, production.path)
            sanitizer_seconds = time.perf_counter() - started
            row["sanitizer"] = {
                "seconds": sanitizer_seconds,
                "available": report.available,
                "summaries": [r.summary for r in report.results],
            }
            print(
                f"{op} sanitizer: {sanitizer_seconds:.2f} s, available={report.available}",
                flush=True,
            )
            ops[op] = row
            results["ops"] = ops
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(json.dumps(results, indent=2))  # after each operation: partial results
    print(f"\nwritten {out}")
    print(f"SUMMARY verification time per operation on {results['device']} ({results['commit']}):")
    for op, row in ops.items():
        before, after, sanitizer = row["before"], row["after"], row["sanitizer"]
        assert isinstance(before, dict) and isinstance(after, dict) and isinstance(sanitizer, dict)
        added = after["seconds"] - before["seconds"]
        sanitized = f"{sanitizer['seconds']:.2f} s" if sanitizer["available"] else "not installed"
        print(
            f"  {op}: before {before['seconds']:.2f} s ({before['cases']} cases), after "
            f"{after['seconds']:.2f} s ({after['cases']} cases): +{added:.2f} s; "
            f"compute-sanitizer {sanitized}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
