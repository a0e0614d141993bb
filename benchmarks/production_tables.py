"""Markdown tables of ``astra bench --json`` results: per shape the times, the speedup, the
same-bytes copy floor, the launch floor and the limit (``benchmarks/results/README.md`` is
written from them).

    python benchmarks/production_tables.py benchmarks/results/bench-*.json
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def table(path: Path) -> str:
    record = json.loads(path.read_text())
    report = record["report"]
    head = (
        f"### {path.name}\n\n{report['op']}, {report['mode']} mode, {report['device']}, "
        f"{record['date']}, commit `{(record.get('commit') or 'unknown')[:7]}`; "
        f"candidate `{report['candidate']}`, baseline `{report['baseline']}`; geomean "
        f"{report['geomean_speedup']:.3f} ± {report['geomean_speedup_err'] or 0:.3f}\n\n"
        "| shape | dtype | candidate µs | baseline µs | speedup | call | copy floor µs "
        "| launch floor µs | roof GB/s | limit |\n|---|---|---|---|---|---|---|---|---|---|\n"
    )
    rows = []
    for s in report["shapes"]:
        # results before issue 25 stored the copy floor as the "latency floor"
        floor, base = s.get("copy_floor") or s.get("latency_floor"), s.get("baseline")
        launch = s.get("launch_floor")
        cells = [s["label"], s["dtype"], f"{s['candidate']['median_us']:.2f}"]
        if base:
            cells += [f"{base['median_us']:.2f}", f"{s['speedup']:.3f}", s["call"]]
        else:
            cells += ["-", "-", "-"]
        cells += [f"{floor['median_us']:.2f}" if floor else "-"]
        cells += [f"{launch['median_us']:.2f}" if launch else "-"]
        cells += [f"{s['roof_gbps']:.0f}" if s.get("roof_gbps") else "-", s.get("limit") or "-"]
        rows.append("| " + " | ".join(cells) + " |")
    return head + "\n".join(rows) + "\n"


def main() -> None:
    print("\n".join(table(Path(p)) for p in sys.argv[1:]))


if __name__ == "__main__":
    main()
