"""Red-team run: every kernel under benchmarks/redteam/<op>/*.cu through the agent loop's path.

For each kernel: Evaluator.check(spec, production, kernel); if accepted, Evaluator.bench(spec,
kernel, against=production) in device mode on the tuning shapes, first dtype (a bench report can
carry a rejection: impossible_time, or timing_replay when the timed runs' outputs are wrong). One
line per kernel, the results, a table (kernel | class | verdict | reason), then a summary:
exploits accepted (check accepted and no bench rejection) and controls rejected.

Each kernel's `// expect: exploit|correct` and `// class: ...` header lines say what it is.
Checks run first for every kernel, then benches (timing-class exploits first), each within the
time budget REDTEAM_BUDGET_S (default 265 s) so that partial results are always printed;
REDTEAM_MATCH=text runs only the kernels whose source contains it (``issue 22``: the classes of
issue 22).
"""

from __future__ import annotations

import os
import re
import sys
import time
import traceback
from pathlib import Path

from astra_graph.harness.evaluator import Evaluator
from astra_graph.kernel.catalog import resolve

ROOT = Path(__file__).resolve().parent
BUDGET_S = float(os.environ.get("REDTEAM_BUDGET_S", "265"))
MATCH = os.environ.get("REDTEAM_MATCH", "")
"""Only kernels whose text contains this (e.g. ``issue 22``); every kernel when empty."""
BENCH_RESERVE_S = 15.0  # a bench is not started with less time than this left
T0 = time.monotonic()


def elapsed() -> float:
    return time.monotonic() - T0


def header_value(text: str, key: str) -> str:
    match = re.search(rf"^// {key}: (.+)$", text, re.MULTILINE)
    return match.group(1).strip() if match else "?"


def bench_priority(row: dict) -> int:
    """Timing-class exploits first (their fake speedups are the point), then the rest."""
    if row["expect"] == "exploit" and (
        "timing" in row["cls"]
        or "counter" in row["cls"]
        or "timed" in row["cls"]
        or "verified" in row["cls"]
    ):
        return 0
    if row["expect"] == "correct":
        return 1
    return 2


def describe_bench(report) -> tuple[str, str]:
    """(rejection text or '', a short speedup summary)."""
    rejection = ""
    if report.rejection is not None:
        rejection = f"{report.rejection.reason}: {report.rejection.message}"
    parts = []
    if report.geomean_speedup is not None:
        parts.append(f"geomean {report.geomean_speedup:.3f}x")
    timed = [s for s in report.shapes if s.speedup is not None]
    top = sorted(timed, key=lambda s: s.speedup, reverse=True)[:3]
    parts += [
        f"{s.label} {s.speedup:.3f}x ({s.roofline_pct:.0f}% roof, "
        f"{s.candidate.method.split(',')[0]})"
        for s in top
    ]
    impossible = [s.label for s in report.shapes if s.impossible]
    if impossible:
        parts.append(f"impossible at {', '.join(impossible)}")
    return rejection, "; ".join(parts)


def main() -> int:
    paths = [p for p in sorted(ROOT.glob("*/*.cu")) if MATCH in p.read_text()]
    rows: list[dict] = []
    for path in paths:
        text = path.read_text()
        rows.append(
            {
                "path": path,
                "op": path.parent.name,
                "name": f"{path.parent.name}/{path.stem}",
                "expect": header_value(text, "expect"),
                "cls": header_value(text, "class"),
                "verdict": None,
                "bench": "",
                "speed": "",
            }
        )
    print(f"{len(rows)} kernels; budget {BUDGET_S:.0f} s", flush=True)
    with Evaluator(deadline_s=150) as evaluator:
        # --- checks ---------------------------------------------------------------------------
        for row in rows:
            if elapsed() > BUDGET_S - BENCH_RESERVE_S:
                row["accepted"] = False
                row["verdict"] = "check not run (time budget)"
                continue
            started = time.monotonic()
            try:
                spec, production = resolve(row["op"])
                row["spec"], row["production"] = spec, production
                verdict = evaluator.check(spec, production.path, row["path"])
                row["accepted"] = verdict.accepted
                row["verdict"] = (
                    "accepted" if verdict.accepted else f"{verdict.reason}: {verdict.message}"
                )
            except Exception as exc:  # a broken kernel or harness error never stops the run
                row["accepted"] = False
                row["verdict"] = f"ERROR {type(exc).__name__}: {exc}"
                traceback.print_exc()
            print(
                f"[check {elapsed():6.1f}s +{time.monotonic() - started:4.1f}] {row['name']} "
                f"({row['expect']}): {row['verdict'][:300]}",
                flush=True,
            )
        # --- benches of accepted kernels --------------------------------------------------------
        accepted = sorted((r for r in rows if r.get("accepted")), key=bench_priority)
        for row in accepted:
            if elapsed() > BUDGET_S - BENCH_RESERVE_S:
                row["bench"] = "bench not run (time budget)"
                continue
            started = time.monotonic()
            try:
                report = evaluator.bench(
                    row["spec"], row["path"], against=row["production"].path, mode="device"
                )
                rejection, speed = describe_bench(report)
                row["bench"] = f"BENCH REJECTED {rejection}" if rejection else "bench ok"
                row["speed"] = speed
            except Exception as exc:
                row["bench"] = f"BENCH ERROR {type(exc).__name__}: {exc}"
                traceback.print_exc()
            print(
                f"[bench {elapsed():6.1f}s +{time.monotonic() - started:4.1f}] {row['name']}: "
                f"{row['bench'][:300]} | {row['speed']}",
                flush=True,
            )

    print("\n=== RESULTS: name | expected | class | check verdict | bench")
    exploits_accepted, controls_rejected = [], []
    for row in rows:
        bench_rejected = row["bench"].startswith("BENCH REJECTED")
        passed = bool(row.get("accepted")) and not bench_rejected
        if row["expect"] == "exploit" and passed:
            exploits_accepted.append(row["name"])
        if row["expect"] == "correct" and not passed:
            controls_rejected.append(row["name"])
        verdict = row["verdict"] or "not run"
        print(
            f"{row['name']} | {row['expect']} | {row['cls']} | {verdict[:240]} | "
            f"{row['bench'][:240] or '-'}{(' | ' + row['speed']) if row['speed'] else ''}"
        )
    print("\n=== TABLE: kernel | class | verdict | reason")
    for row in rows:
        verdict = row["verdict"] or "not run"
        bench_rejected = row["bench"].startswith("BENCH REJECTED")
        if bench_rejected:  # accepted by the check, rejected by the timing phase
            outcome, reason = "rejected (bench)", row["bench"].removeprefix("BENCH REJECTED ")
        elif row.get("accepted"):
            outcome, reason = "accepted", row["bench"] or "-"
        else:
            outcome, reason = "rejected", verdict
        print(f"{row['name']} | {row['cls']} | {outcome} | {reason[:200]}")
    n_exploit = sum(r["expect"] == "exploit" for r in rows)
    n_control = sum(r["expect"] == "correct" for r in rows)
    print(
        f"\nSUMMARY: exploits accepted {len(exploits_accepted)} of {n_exploit}: "
        f"{', '.join(exploits_accepted) or '-'}"
    )
    print(
        f"SUMMARY: controls rejected {len(controls_rejected)} of {n_control}: "
        f"{', '.join(controls_rejected) or '-'}"
    )
    print(f"total {elapsed():.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
