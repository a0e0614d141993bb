"""PNG charts of an optimisation run: speedup by round, per-shape speedups, bandwidth roofline.

Every function returns the PNG bytes of one chart, drawn on a bare ``matplotlib.figure.Figure``
(the Agg canvas, no pyplot), so it works headless and leaves no global state behind.
"""

from __future__ import annotations

import io
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from astra_graph.harness.results import ShapeTiming

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

FASTER = "#2a9d50"
SLOWER = "#d1495b"
TIE = "#8d99ae"
BASELINE = "#6c757d"
CANDIDATE = "#1f6fb2"
DPI = 110


@dataclass(frozen=True)
class RoundPoint:
    """One round as the speedup chart sees it."""

    round: int
    accepted: bool
    speedup: float | None = None
    speedup_err: float | None = None
    reason: str | None = None
    """Why the round's candidate was rejected (short), when it was."""
    best: float | None = None
    """The best speedup so far after this round, as the run recorded it (the selection rule
    over its records, ``OptimizationResult.best_speedups``); None when no record says."""


def _speedup(timed: RoundPoint | ShapeTiming) -> float:
    """The speedup of a point or shape already filtered to those that have one."""
    assert timed.speedup is not None
    return timed.speedup


def _figure(figsize: tuple[float, float]) -> Figure:
    """A bare figure. matplotlib is imported here, at the first chart, not with this module: a
    report without charts (an interrupted run's, see ``write_report``) must not pay for the
    import (0.9 s measured on 2 shared cores)."""
    from matplotlib.figure import Figure

    return Figure(figsize=figsize)


def _png(fig: Figure) -> bytes:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=DPI, bbox_inches="tight")
    return buffer.getvalue()


def _no_data(ax: Axes, text: str) -> None:
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes, color=BASELINE)


def _shape_name(shape: ShapeTiming) -> str:
    return f"{shape.label} {shape.dtype}"


CALL_COLOURS = {"faster": FASTER, "slower": SLOWER, "tie": TIE}
CALL_LABELS = {"faster": "faster", "slower": "slower", "tie": "tie (noise)"}


def _call_colour(shape: ShapeTiming) -> str:
    """Coloured by the statistical call; a shape without one in the neutral candidate colour."""
    return CALL_COLOURS.get(shape.call or "", CANDIDATE)


def _megabytes(n_bytes: int) -> str:
    mb = n_bytes / 1e6
    return f"{mb:,.0f} MB" if mb >= 10 else f"{mb:.2g} MB"


def speedup_by_round(points: Sequence[RoundPoint], title: str = "Speedup by round") -> bytes:
    """Geomean speedup of each round's candidate over the baseline, and the best so far.

    Rejected rounds are drawn as crosses on the baseline line, labelled with their reason.
    """
    fig = _figure((7.5, 4.2))
    ax = fig.add_subplot()
    ax.axhline(1.0, color=BASELINE, linestyle="--", linewidth=1, label="baseline (1.0x)")
    timed = [p for p in points if p.accepted and p.speedup is not None]
    if timed:
        ax.errorbar(
            [p.round for p in timed],
            [_speedup(p) for p in timed],
            yerr=[p.speedup_err or 0.0 for p in timed],
            fmt="o",
            color=CANDIDATE,
            capsize=4,
            label="accepted candidate",
        )
    recorded = sorted((p for p in points if p.best is not None), key=lambda p: p.round)
    if recorded:
        ax.step(
            [p.round for p in recorded],
            [p.best or 1.0 for p in recorded],
            where="post",
            color=FASTER,
            label="best so far",
        )
    rejected = [p for p in points if not p.accepted]
    if rejected:
        ax.scatter(
            [p.round for p in rejected],
            [1.0] * len(rejected),
            marker="x",
            s=60,
            color=SLOWER,
            zorder=3,
            label="rejected candidate",
        )
        for i, p in enumerate(rejected):  # alternate heights, so neighbours' labels don't touch
            ax.annotate(
                p.reason or "rejected",
                (p.round, 1.0),
                textcoords="offset points",
                xytext=(0, -14 - 10 * (i % 2)),
                ha="center",
                fontsize=7,
                color=SLOWER,
            )
    if not points:
        _no_data(ax, "no rounds were run")
    else:
        rounds = sorted({p.round for p in points})
        ax.set_xticks(rounds)
        ax.set_xlim(rounds[0] - 0.5, rounds[-1] + 0.5)
        values = [1.0] + [(p.speedup or 1.0) + (p.speedup_err or 0.0) for p in timed]
        values += [p.best for p in recorded if p.best is not None]
        lows = [1.0] + [(p.speedup or 1.0) - (p.speedup_err or 0.0) for p in timed]
        margin = max(0.05, 0.15 * (max(values) - min(lows)))
        ax.set_ylim(min(lows) - margin - (0.08 if rejected else 0.0), max(values) + margin)
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)
    ax.set_xlabel("round")
    ax.set_ylabel("geomean speedup over baseline (x)")
    ax.set_title(title)
    ax.grid(True, axis="y", alpha=0.3)
    return _png(fig)


def shape_speedups(shapes: Sequence[ShapeTiming], title: str = "Speedup per shape") -> bytes:
    """Bars of baseline time / candidate time per shape, with one-standard-error bars."""
    from matplotlib.patches import Patch  # with the figure's import (see _figure)

    timed = [s for s in shapes if s.speedup is not None]
    fig = _figure((max(6.0, 0.75 * len(timed) + 2.5), 4.4))
    ax = fig.add_subplot()
    ax.axhline(1.0, color=BASELINE, linestyle="--", linewidth=1)
    if timed:
        positions = range(len(timed))
        ax.bar(
            positions,
            [_speedup(s) for s in timed],
            yerr=[s.speedup_err or 0.0 for s in timed],
            capsize=4,
            color=[_call_colour(s) for s in timed],
            edgecolor="black",
            linewidth=0.5,
        )
        ax.set_xticks(list(positions), [_shape_name(s) for s in timed], rotation=35, ha="right")
        for position, s in zip(positions, timed, strict=True):
            ax.annotate(
                f"{s.speedup:.2f}",
                (position, _speedup(s) + (s.speedup_err or 0.0)),
                textcoords="offset points",
                xytext=(0, 3),
                ha="center",
                fontsize=7,
            )
        top = max(_speedup(s) + (s.speedup_err or 0.0) for s in timed)
        ax.set_ylim(0, max(1.1, top * 1.12))
        calls = [c for c in CALL_COLOURS if any(s.call == c for s in timed)]
        handles = [
            Patch(facecolor=CALL_COLOURS[c], edgecolor="black", label=CALL_LABELS[c]) for c in calls
        ]
        if handles:
            ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)
    else:
        ax.set_xticks([])
        _no_data(ax, "no timed shapes")
    ax.set_xlabel("shape (dims, dtype)")
    ax.set_ylabel("speedup over baseline (x)")
    ax.set_title(title)
    ax.grid(True, axis="y", alpha=0.3)
    return _png(fig)


def _baseline_gbps(shape: ShapeTiming) -> float | None:
    if shape.baseline is None or shape.baseline.median_us <= 0:
        return None
    return shape.bytes_moved / shape.baseline.median_us / 1e3


def roofline(
    shapes: Sequence[ShapeTiming],
    copy_bandwidth_gbps: float | None,
    title: str = "Achieved bandwidth against the copy-bandwidth roof",
    label: str = "best candidate",
) -> bytes:
    """Achieved GB/s of baseline and candidate per shape, against the roof and the copy floor.

    The kernels are memory-bound, so the device's achievable bandwidth for the operation's
    read:write mix is the roof (the copy bandwidth in reports made before it was measured): a
    kernel cannot move its bytes faster. At small shapes the same-bytes copy floor (a minimal
    kernel moving the same bytes, drawn as the bandwidth it reaches) is the lower and real limit.
    Shapes are ordered by the bytes one call moves; ``label`` names the timed kernel (a
    baseline-only table has no separate baseline series).
    """
    ordered = sorted(shapes, key=lambda s: s.bytes_moved)
    fig = _figure((max(6.5, 0.9 * len(ordered) + 3.0), 4.6))
    ax = fig.add_subplot()
    peak = max(_achieved(ax, ordered, label), _limits(ax, ordered, copy_bandwidth_gbps))
    ax.set_ylim(0, peak * 1.12 if math.isfinite(peak) and peak > 0 else 1.0)
    if ordered or copy_bandwidth_gbps:
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)
    ax.set_xlabel("shape (dims, dtype; bytes moved per call)")
    ax.set_ylabel("achieved bandwidth (GB/s)")
    ax.set_title(title)
    ax.grid(True, axis="y", alpha=0.3)
    return _png(fig)


def _achieved(ax: Axes, ordered: Sequence[ShapeTiming], label: str) -> float:
    """The baseline's and the kernel's achieved GB/s per shape; the highest drawn."""
    peak = 0.0
    if ordered:
        positions = list(range(len(ordered)))
        with_baseline = [(i, g) for i, s in enumerate(ordered) if (g := _baseline_gbps(s))]
        if with_baseline:
            ax.scatter(
                [i for i, _ in with_baseline],
                [g for _, g in with_baseline],
                color=BASELINE,
                marker="s",
                zorder=3,
                label="baseline",
            )
            for i, g in with_baseline:
                ax.plot([i, i], [g, ordered[i].achieved_gbps], color=TIE, linewidth=1)
            peak = max(g for _, g in with_baseline)
        achieved = [s.achieved_gbps for s in ordered]
        ax.scatter(positions, achieved, color=CANDIDATE, zorder=3, label=label)
        peak = max([peak, *achieved])
        labels = [f"{_shape_name(s)}\n{_megabytes(s.bytes_moved)}" for s in ordered]
        ax.set_xticks(positions, labels, rotation=35, ha="right", fontsize=8)
        ax.set_xlim(-0.6, len(ordered) - 0.4)
    else:
        ax.set_xticks([])
        _no_data(ax, "no timed shapes")
    return peak


def _limits(ax: Axes, ordered: Sequence[ShapeTiming], copy_bandwidth_gbps: float | None) -> float:
    """The latency floor per shape and the roof (or the copy bandwidth); the highest drawn."""
    peak = 0.0
    floors = [
        (i, s.bytes_moved / s.copy_floor.median_us / 1e3)
        for i, s in enumerate(ordered)
        if s.copy_floor is not None and s.copy_floor.median_us > 0
    ]
    if floors:
        # the copy floor as a bandwidth: what a minimal kernel moving the same bytes reaches
        ax.plot(
            [i for i, _ in floors],
            [g for _, g in floors],
            color=TIE,
            linestyle=":",
            marker="_",
            markersize=14,
            label="same-bytes copy floor (minimal kernel)",
        )
        peak = max(peak, *(g for _, g in floors))
    roofs = [s.roof_gbps for s in ordered if s.roof_gbps]
    if roofs:
        ax.axhline(
            max(roofs),
            color=SLOWER,
            linestyle="--",
            label=f"achievable {max(roofs):,.0f} GB/s for the read:write mix (roof)",
        )
        peak = max(peak, *roofs)
    elif copy_bandwidth_gbps:
        ax.axhline(
            copy_bandwidth_gbps,
            color=SLOWER,
            linestyle="--",
            label=f"copy bandwidth {copy_bandwidth_gbps:,.0f} GB/s (roof)",
        )
        peak = max(peak, copy_bandwidth_gbps)
    return peak


def compare_speedups(
    first_name: str,
    first: Sequence[ShapeTiming],
    second_name: str,
    second: Sequence[ShapeTiming],
    title: str = "Speedup per shape, two runs",
) -> bytes:
    """Grouped bars of two runs' per-shape speedups, over the shapes either run timed."""
    by_first = {_shape_name(s): s for s in first if s.speedup is not None}
    by_second = {_shape_name(s): s for s in second if s.speedup is not None}
    names = list(dict.fromkeys([*by_first, *by_second]))
    fig = _figure((max(6.0, 0.9 * len(names) + 2.5), 4.4))
    ax = fig.add_subplot()
    ax.axhline(1.0, color=BASELINE, linestyle="--", linewidth=1)
    width = 0.4
    for offset, label, table, colour in (
        (-width / 2, first_name, by_first, CANDIDATE),
        (width / 2, second_name, by_second, FASTER),
    ):
        present = [(i, table[n]) for i, n in enumerate(names) if n in table]
        ax.bar(
            [i + offset for i, _ in present],
            [_speedup(s) for _, s in present],
            width=width,
            yerr=[s.speedup_err or 0.0 for _, s in present],
            capsize=3,
            color=colour,
            edgecolor="black",
            linewidth=0.5,
            label=label,
        )
    if names:
        ax.set_xticks(range(len(names)), names, rotation=35, ha="right")
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)
    else:
        _no_data(ax, "neither run timed any shape")
    ax.set_xlabel("shape (dims, dtype)")
    ax.set_ylabel("speedup over baseline (x)")
    ax.set_title(title)
    ax.grid(True, axis="y", alpha=0.3)
    return _png(fig)
