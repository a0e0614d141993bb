"""The profile summary the planner reads, from a timing report.

Per-shape time and speedup, percent of the roof (the device's achievable bandwidth for the
operation's read:write mix), the floor each shape is near and how far it is from each (the
bandwidth roof, the same-bytes copy floor: a minimal kernel moving the same bytes, and the
launch floor: an empty kernel; ``roofline.limit_of``), the kernel's resources and a likely
bottleneck. The bottleneck follows the floor a shape is near: far above the copy floor is a
memory-access problem whatever the shape's size; only near the launch floor is launch overhead
the limit.
"""

from __future__ import annotations

from statistics import median

from astra_graph.harness.results import BenchReport, ShapeTiming
from astra_graph.harness.roofline import at_floor

NEAR_ROOFLINE_PCT = 75.0
SMALL_KERNEL_US = 8.0


def likely_bottlenecks(bench: BenchReport, which: str = "candidate") -> list[str]:
    """Plain-language guesses at what limits the kernel, from the timings and resources."""
    found = []
    resources = bench.resources.get(which)
    if resources and resources.spill_bytes:
        found.append(f"register spills ({resources.spill_bytes} B): local-memory traffic")
    if resources and resources.occupancy is not None and resources.occupancy < 0.5:
        limit = f", limited by {resources.occupancy_limit}" if resources.occupancy_limit else ""
        found.append(f"low occupancy ({resources.occupancy:.0%}{limit})")
    floored = [s for s in bench.shapes if s.bound in ("copy", "launch")]
    at_copy = [s.label for s in floored if _at_floor(s)]
    launch = [s.label for s in floored if s.bound == "launch" and not _at_floor(s)]
    access = [s.label for s in floored if s.bound == "copy" and not _at_floor(s)]
    if at_copy:
        found.append(
            "at the same-bytes copy floor on " + ", ".join(at_copy[:4]) + ": a minimal kernel "
            "moving the same bytes is no faster there; gains must come from the other shapes"
        )
    if launch:
        found.append(
            "launch overhead on " + ", ".join(launch[:4]) + ": a copy of these bytes costs "
            "little more than an empty launch; fewer or cheaper launches, a smaller grid"
        )
    small = access or [
        s.label
        for s in bench.shapes
        if s.bound is None and s.candidate.median_us < SMALL_KERNEL_US and s.roofline_pct < 40
    ]
    if small:
        found.append(
            "memory access on " + ", ".join(small[:4]) + ": far above the same-bytes copy "
            "floor, not the launch floor; wider loads, all loads issued before use, more bytes "
            "in flight per thread or more blocks"
        )
    bandwidth = [s for s in bench.shapes if s.bound not in ("copy", "launch")]
    if bandwidth:
        typical = median(s.roofline_pct for s in bandwidth)
        if typical >= NEAR_ROOFLINE_PCT:
            found.append(f"memory bandwidth: median {typical:.0f}% of the roofline already")
        elif not small and not at_copy:
            found.append(
                f"memory access efficiency: median {typical:.0f}% of the roofline "
                "(narrow or uncoalesced accesses, too few loads in flight)"
            )
    return found or ["no clear bottleneck"]


def _at_floor(shape: ShapeTiming) -> bool:
    floor = shape.copy_floor
    return floor is not None and at_floor(shape.candidate.median_us, floor.median_us)


def summarize(bench: BenchReport, title: str) -> str:
    """The compact profile the planner reads."""
    lines = [f"{title} ({bench.mode} timing on {bench.device})"]
    if bench.geomean_speedup is not None:
        err = f" +- {bench.geomean_speedup_err:.3f}" if bench.geomean_speedup_err else ""
        lines.append(f"geomean speedup over the starting kernel: {bench.geomean_speedup:.3f}x{err}")
    lines.append(
        f"{'shape':<14}{'dtype':<10}{'time us':>10}{'start us':>10}{'speedup':>9}"
        f"{'GB/s':>8}{'roofline':>10}  limit"
    )
    for s in bench.shapes:
        base = f"{s.baseline.median_us:10.2f}" if s.baseline else f"{'-':>10}"
        speedup = f"{s.speedup:8.3f}x" if s.speedup is not None else f"{'-':>9}"
        lines.append(
            f"{s.label:<14}{s.dtype:<10}{s.candidate.median_us:10.2f}{base}{speedup}"
            f"{s.achieved_gbps:8.0f}{s.roofline_pct:9.1f}%  {s.limit or '-'}"
        )
    # the harness measures resources on the first dtype it times
    instantiation = f", {bench.shapes[0].dtype}" if bench.shapes else ""
    for name, r in bench.resources.items():
        occupancy = f", occupancy {r.occupancy:.0%}" if r.occupancy is not None else ""
        limit = f" (limit: {r.occupancy_limit})" if r.occupancy_limit else ""
        lines.append(
            f"resources ({name}{instantiation}): {r.registers} registers, "
            f"{r.threads_per_block} threads/block, "
            f"{r.static_smem_bytes + r.dynamic_smem_bytes} B shared, {r.spill_bytes} B spilled"
            f"{occupancy}{limit}"
        )
    lines.append("likely bottleneck: " + "; ".join(likely_bottlenecks(bench)))
    return "\n".join(lines)
