"""``astra bench IMPL [--against IMPL]``: time an implementation per shape, in a worker process.

Prints a table per shape (time, achieved GB/s, percent of the roof: the device's achievable
bandwidth for the operation's read:write mix, and with ``--against`` the speedup with its
standard error and faster/slower/tie), then per shape the floor it is near and how far it is
from each (device mode: the bandwidth roof, the same-bytes copy floor and the launch floor), and
the geometric-mean speedup. ``--sanitize`` and ``--ncu`` add compute-sanitizer and Nsight Compute
results.
Exit codes: 0 timed, 1 the timed runs rejected the implementation (impossible time, wrong
output) or it crashed, 2 bad input or no GPU.
"""

from __future__ import annotations

import argparse
import json
import time

from astra_graph.commands import UsageError
from astra_graph.harness import deep, timing
from astra_graph.harness.compile import gpu_arch
from astra_graph.harness.results import BenchReport, Measurement
from astra_graph.kernel.catalog import resolve
from astra_graph.kernel.contract import SUITE_NAMES, OperationSpec
from astra_graph.store.provenance import git_commit


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("kernel", help="a .cu file, an operation name, or op/impl")
    p.add_argument("--against", help="the baseline to compare with (same operation)")
    p.add_argument(
        "--mode",
        choices=["device", "per-call"],
        default="device",
        help="device: kernel time, L2 flushed, CUDA graphs for short kernels (default); "
        "per-call: the paper's 20 warm-ups + 100 event-timed calls, host overhead included",
    )
    p.add_argument("--shapes", choices=SUITE_NAMES, default="tuning", help="suite to time")
    p.add_argument("--dtype", help="element type to time (default: the contract's first)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--sanitize", action="store_true", help="compute-sanitizer memcheck+racecheck")
    p.add_argument("--ncu", action="store_true", help="Nsight Compute metrics per shape")
    p.set_defaults(run=run)


def _same_operation(spec: OperationSpec, other: OperationSpec, flag: str) -> None:
    if other.name != spec.name:
        raise UsageError(f"{flag}: {other.name!r} is a different operation from {spec.name!r}")


def run(args: argparse.Namespace) -> int:
    from astra_graph.harness.evaluator import Evaluator, HarnessUnavailable
    from astra_graph.harness.worker import WorkerError

    spec, impl = resolve(args.kernel)
    baseline = None
    if args.against:
        base_spec, baseline = resolve(args.against)
        _same_operation(spec, base_spec, "--against")
    dtype = args.dtype or spec.contract.dtypes[0]
    if dtype not in spec.contract.dtypes:
        raise UsageError(f"--dtype: {dtype!r} is not one of {spec.contract.dtypes}")
    if gpu_arch() is None:
        raise UsageError("no CUDA GPU here: timing needs one (CuPy sees no device)")
    shapes = spec.contract.suite(args.shapes)
    with Evaluator() as evaluator:
        try:
            report = evaluator.bench(
                spec,
                impl.path,
                against=baseline.path if baseline else None,
                mode=args.mode,
                shapes=shapes,
                dtypes=[dtype],
            )
        except HarnessUnavailable as exc:
            raise UsageError(str(exc)) from None
        except WorkerError as exc:
            print(f"astra bench: {impl.path}: {type(exc).__name__}: {str(exc).splitlines()[0]}")
            return 1
    rejection = report.rejection
    sanitized = deep.sanitize(spec, impl.path, dtype) if args.sanitize else []
    profiled = None
    if args.ncu:
        profiled = deep.profile(spec, impl.path, dtype, shapes, impl.header.kernel_name)
    if args.json:
        out = {
            "report": report.model_dump(),
            "rejection": rejection.model_dump() if rejection else None,
            "sanitizer": [r.model_dump() for r in sanitized],
            "ncu": profiled.model_dump() if profiled else None,
            "suite": args.shapes,
            "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "commit": git_commit(),
        }
        print(json.dumps(out, indent=2))
    else:
        print(format_report(report, args.shapes))
        for result in sanitized:
            print(result.summary)
        if profiled is not None:
            print(profiled.summary)
        if rejection is not None:
            print(f"REJECTED ({rejection.reason}): {rejection.message}")
    failed = rejection is not None or any(r.available and not r.ok for r in sanitized)
    return 1 if failed else 0


def _time(m: Measurement) -> str:
    return f"{m.median_us:9.2f} ±{100 * m.rel_std_err:4.1f}%"


def format_report(report: BenchReport, suite: str = "") -> str:
    """The per-shape table, the geometric mean and the resources, as plain text."""
    lines = [
        f"{report.op}  {report.mode} mode{'  ' + suite if suite else ''}  {report.device}  "
        f"copy bandwidth {report.copy_bandwidth_gbps:.0f} GB/s",
        f"candidate {report.candidate}"
        + (f"\nbaseline  {report.baseline}" if report.baseline else ""),
    ]
    header = f"{'shape':<16}{'dtype':<10}{'time us':>16}"
    if report.baseline:
        header += f"{'baseline us':>17}"
    header += f"{'GB/s':>8}{'roof':>6}"
    if report.baseline:
        header += f"  {'speedup':<15}{'call':<7}"
    header += "  method"
    lines.append(header)
    for s in report.shapes:
        row = f"{s.label:<16}{s.dtype:<10}{_time(s.candidate):>16}"
        if report.baseline:
            row += f" {_time(s.baseline):>16}" if s.baseline else f"{'':>17}"
        row += f"{s.achieved_gbps:8.0f}{s.roofline_pct:5.0f}%"
        if s.speedup is not None:
            speedup = f"{s.speedup:.3f} ±{s.speedup_err or 0:.3f}"
            row += f"  {speedup:<15}{s.call or '':<7}"
        elif report.baseline:
            row += f"  {'':<22}"
        row += f"  {s.candidate.method}" + ("  IMPOSSIBLE" if s.impossible else "")
        lines.append(row)
    limits = [s for s in report.shapes if s.limit]
    if limits:
        lines.append("limit per shape (bandwidth roof: achievable bandwidth for the read:write")
        lines.append("mix; copy floor: a minimal kernel moving the same bytes; launch floor: an")
        lines.append("empty kernel on the same grid; both timed in the same rounds):")
        for s in limits:
            copy_text = f"copy {s.copy_floor.median_us:.2f} us" if s.copy_floor else "no copy"
            launch_text = f"launch {s.launch_floor.median_us:.2f} us" if s.launch_floor else ""
            lines.append(f"  {s.label:<16}{s.dtype:<10}{copy_text:<18}{launch_text:<18}{s.limit}")
    if report.geomean_speedup is not None:
        lines.append(
            f"geomean speedup {report.geomean_speedup:.3f} ±{report.geomean_speedup_err or 0:.3f}"
            f" over {sum(1 for s in report.shapes if s.speedup)} shapes"
            f" ({_calls(report)})"
        )
    for side, res in report.resources.items():
        occ = "?" if res.occupancy is None else f"{100 * res.occupancy:.0f}%"
        lines.append(
            f"{side}: {res.registers} registers, smem {res.static_smem_bytes}+"
            f"{res.dynamic_smem_bytes} B, local {res.local_bytes} B, spills {res.spill_bytes} B, "
            f"{res.threads_per_block} threads/block, occupancy {occ} ({res.occupancy_limit})"
            + (f": {res.occupancy_detail}" if res.occupancy_detail else "")
        )
    lines.extend(f"note: {note}" for note in report.notes)
    if report.mode == "per-call":
        lines.append(
            f"note: per-call = {timing.PER_CALL_WARMUP} warm-ups, then {timing.PER_CALL_CALLS} "
            "calls each between an event pair: the host's launch overhead is inside every time"
        )
    return "\n".join(lines)


def _calls(report: BenchReport) -> str:
    counts = {c: sum(1 for s in report.shapes if s.call == c) for c in ("faster", "slower", "tie")}
    return ", ".join(f"{n} {c}" for c, n in counts.items())
