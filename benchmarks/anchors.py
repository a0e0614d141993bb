"""Production kernels against the real framework kernels they must beat (issue 25 item 1).

For each operation, each framework kernel this script can build (an *anchor*) is timed beside
the operation's production kernel with the project's bench (``Evaluator.bench``: device mode, L2
cold, both sides interleaved, median), on every shape of the contract's suites that the anchor
supports, in both dtypes. A table per operation goes to ``benchmarks/results/`` as JSON and
markdown, with the release versions, device, date and commit; the summary printed last lists,
per operation and dtype, the geometric-mean speedup of production over the anchor and every
shape where production is slower beyond the noise.

The anchors are the releases' own files, never copied into the repository: the pinned release
is fetched into the ignored ``.frameworks/`` folder (``benchmarks/releases.py``, or a folder given
with ``--flashinfer``), and a thin adapter of ours from ``benchmarks/anchors/<framework>/`` is
placed beside the release's include folder, where it ``#include``s the release header unmodified
and exposes a ``__global__`` entry with the contract's parameters, launched with the framework's
own launch configuration (each adapter's header says which and why). Until ``astra import``
(issue 23) builds framework files directly, the anchors are the ones these adapters reach:

* FlashInfer 0.7.2.post1: MergeStateKernel (merge_attn_states_lse) and act_and_mul_kernel
  (silu_and_mul).
* Not built here, with the reason, in :data:`NOT_BUILT` (and in every table).

    python benchmarks/anchors.py [--ops merge_attn_states_lse,...] [--flashinfer INCLUDE_DIR]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import re
import shutil
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
ADAPTERS = ROOT / "benchmarks" / "anchors"
RESULTS = ROOT / "benchmarks" / "results"
DTYPES = ("float16", "bfloat16")
SUITES = ("tuning", "heldout", "edge")
FLASHINFER = ("flashinfer-python", "0.7.2.post1")
FLASHINFER_INCLUDE = "flashinfer/data/include"
"""Where the wheel keeps its headers (``include/flashinfer/...`` of the source tree)."""
STAGED_PREFIX = "astra_anchor_"
"""Adapters are copied into the release's include folder under this prefix (in .frameworks/)."""


@dataclass(frozen=True)
class Anchor:
    op: str
    framework: str
    kernel: str
    adapter: Path


ANCHORS = (
    Anchor(
        "merge_attn_states_lse",
        f"FlashInfer {FLASHINFER[1]}",
        "MergeStateKernel (attention/cascade.cuh)",
        ADAPTERS / "flashinfer" / "merge_attn_states_lse.cu",
    ),
    Anchor(
        "silu_and_mul",
        f"FlashInfer {FLASHINFER[1]}",
        "act_and_mul_kernel with silu (activation.cuh)",
        ADAPTERS / "flashinfer" / "silu_and_mul.cu",
    ),
)

NOT_BUILT: dict[str, list[str]] = {
    "fused_add_rmsnorm": [
        f"FlashInfer {FLASHINFER[1]} FusedAddRMSNormKernel: norm.cuh includes TensorRT-LLM headers "
        "(trtllm/common/cudaUtils.h: cublasLt.h, <algorithm>) that NVRTC cannot compile, and "
        "they use #pragma once, so no include guard skips them; waits for `astra import`",
    ],
}
FRAMEWORK_GAPS = [
    "vLLM 0.33.0 (csrc/): device code and torch launchers share each file (c10 types, "
    "AT_DISPATCH): built through `astra import` (issue 23), not by these adapters",
    "SGLang JIT kernels: compiled through TVM-FFI at first use; not built here",
]


class AnchorError(Exception):
    """Bad input (an unknown operation, a release folder without its headers): one line."""


def flashinfer_include(given: Path | None) -> Path:
    """The release's include folder: ``given``, or the pinned wheel fetched by releases.py."""
    if given is None:
        sys.path.insert(0, str(Path(__file__).parent))
        try:
            import releases  # benchmarks/releases.py (issue 23): fetches into .frameworks/
        except ImportError:
            raise AnchorError(
                "--flashinfer: not given, and benchmarks/releases.py (which fetches "
                f"{FLASHINFER[0]}=={FLASHINFER[1]} into .frameworks/) is not here"
            ) from None
        given = releases.fetch(*FLASHINFER) / FLASHINFER_INCLUDE
    marker = given / "flashinfer" / "attention" / "cascade.cuh"
    if not marker.is_file():
        raise AnchorError(
            f"--flashinfer {given}: expected FlashInfer's include folder "
            "(with flashinfer/attention/cascade.cuh)"
        )
    return given


def stage(anchor: Anchor, include: Path) -> Path:
    """The adapter, copied beside the release's headers (its includes resolve from there)."""
    target = include / f"{STAGED_PREFIX}{anchor.adapter.name}"
    shutil.copyfile(anchor.adapter, target)
    return target


def _row(s: Any) -> dict[str, Any]:
    return {
        "shape": s.label,
        "dtype": s.dtype,
        "production_us": s.candidate.median_us,
        "production_rse": s.candidate.rel_std_err,
        "anchor_us": s.baseline.median_us if s.baseline else None,
        "anchor_rse": s.baseline.rel_std_err if s.baseline else None,
        "speedup": s.speedup,
        "speedup_err": s.speedup_err,
        "call": s.call,
        "copy_floor_us": s.copy_floor.median_us if s.copy_floor else None,
        "launch_floor_us": s.launch_floor.median_us if s.launch_floor else None,
        "limit": s.limit,
        "method": s.candidate.method,
    }


def markdown(table: dict[str, Any]) -> str:
    """One operation's table: production against each anchor, shape by shape."""
    lines = [
        f"# {table['op']}: production against the framework kernels",
        "",
        f"{table['device']}, {table['date']}, commit `{(table['commit'] or 'unknown')[:7]}`, "
        "device mode (L2 cold, interleaved, median); speedup = anchor time / production time "
        "(above 1: production faster; `tie` within the noise).",
        "",
    ]
    for anchor in table["anchors"]:
        lines += [
            f"## {anchor['framework']}: {anchor['kernel']}",
            "",
            f"Unsupported by the anchor (not timed): {', '.join(anchor['unsupported']) or 'none'}.",
            "",
            "| shape | dtype | production µs | anchor µs | speedup | call | copy floor µs |",
            "|---|---|---|---|---|---|---|",
        ]
        for r in anchor["rows"]:
            floor = f"{r['copy_floor_us']:.2f}" if r["copy_floor_us"] else "-"
            speedup = f"{r['speedup']:.3f} ± {r['speedup_err'] or 0:.3f}" if r["speedup"] else "-"
            anchor_us = f"{r['anchor_us']:.2f}" if r["anchor_us"] else "-"
            lines.append(
                f"| {r['shape']} | {r['dtype']} | {r['production_us']:.2f} | {anchor_us} | "
                f"{speedup} | {r['call'] or '-'} | {floor} |"
            )
        if anchor.get("error"):
            lines.append(f"\nNot timed: {anchor['error']}")
        lines.append("")
    gaps = [*table["not_built"], *FRAMEWORK_GAPS]
    lines += ["## Not built here", "", *[f"- {g}" for g in gaps], ""]
    return "\n".join(lines)


def summary(table: dict[str, Any]) -> list[str]:
    out = []
    for anchor in table["anchors"]:
        if anchor.get("error"):
            out.append(f"{table['op']} vs {anchor['framework']}: NOT TIMED: {anchor['error']}")
            continue
        for dtype in DTYPES:
            rows = [r for r in anchor["rows"] if r["dtype"] == dtype and r["speedup"]]
            speedups = [r["speedup"] for r in rows]
            mean = statistics.geometric_mean(speedups) if speedups else None
            slower = [r["shape"] for r in rows if r["call"] == "slower"]
            out.append(
                f"{table['op']} {dtype} vs {anchor['framework']} {anchor['kernel']}: "
                f"geomean {mean or float('nan'):.3f}x over {len(rows)} shapes; production "
                f"slower at {', '.join(slower) or 'no shape'}"
            )
    return out


def run_op(evaluator: Any, op: str, include: Path, device: str) -> dict[str, Any]:
    from astra_graph.kernel.contract import load_contract
    from astra_graph.kernel.dtypes import DTYPES as KNOWN
    from astra_graph.kernel.header import load_implementation
    from astra_graph.store.provenance import git_commit

    spec = load_contract(ROOT / "kernels" / op)
    shapes = [d for suite in SUITES for d in spec.contract.suite(suite)]
    table: dict[str, Any] = {
        "op": op,
        "device": device,
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "commit": git_commit(),
        "production": str(spec.folder / "production.cu"),
        "releases": {FLASHINFER[0]: FLASHINFER[1]},
        "mode": "device",
        "anchors": [],
        "not_built": NOT_BUILT.get(op, []),
        "framework_gaps": FRAMEWORK_GAPS,
    }
    for anchor in (a for a in ANCHORS if a.op == op):
        staged = stage(anchor, include)
        header = load_implementation(staged, spec.contract).header
        entry: dict[str, Any] = {
            "framework": anchor.framework,
            "kernel": anchor.kernel,
            "adapter": str(anchor.adapter.relative_to(ROOT)),
            "rows": [],
        }
        for dtype in DTYPES:
            timed = [d for d in shapes if header.unmet_requirement(d, KNOWN[dtype], {}) is None]
            entry["unsupported"] = [spec.contract.label(d) for d in shapes if d not in timed]
            try:
                report = evaluator.bench(
                    spec,
                    spec.folder / "production.cu",
                    against=staged,
                    shapes=timed,
                    dtypes=[dtype],
                )
            except Exception as exc:  # an anchor that fails is a result to report, not a crash
                entry["error"] = f"{dtype}: {type(exc).__name__}: {exc}"[:400]
                break
            if report.rejection is not None:
                entry.setdefault("rejections", []).append(report.rejection.message)
            entry["rows"] += [_row(s) for s in report.shapes]
        table["anchors"].append(entry)
    return table


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    known = sorted({a.op for a in ANCHORS} | set(NOT_BUILT))
    parser.add_argument("--ops", help=f"comma-separated operations (default: {','.join(known)})")
    parser.add_argument("--flashinfer", type=Path, help="FlashInfer's include folder")
    parser.add_argument("--out-dir", type=Path, default=RESULTS, help="where the tables go")
    args = parser.parse_args(argv)
    ops = args.ops.split(",") if args.ops else known
    for op in ops:
        if op not in known:
            parser.error(f"--ops: {op!r} is not one of {known}")
    try:
        include = flashinfer_include(args.flashinfer)
    except AnchorError as exc:
        print(f"anchors: {exc}", file=sys.stderr)
        return 2

    from astra_graph.harness.compile import gpu_arch
    from astra_graph.harness.evaluator import Evaluator

    if gpu_arch() is None:
        print("anchors: no CUDA GPU visible: the anchors are timed on a GPU", file=sys.stderr)
        return 2
    lines: list[str] = []
    with Evaluator(deadline_s=240.0) as evaluator:
        import cupy

        name = cupy.cuda.runtime.getDeviceProperties(0)["name"]
        device = name.decode() if isinstance(name, bytes) else str(name)
        slug = re.sub(r"[^a-z0-9]+", "-", device.lower()).strip("-")
        day = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d")
        args.out_dir.mkdir(parents=True, exist_ok=True)
        for op in ops:
            table = run_op(evaluator, op, include, device)
            stem = args.out_dir / f"anchors-{op}-{slug}-{day}"
            stem.with_suffix(".json").write_text(json.dumps(table, indent=1))
            stem.with_suffix(".md").write_text(markdown(table))
            lines += summary(table) or [f"{op}: no anchor built ({'; '.join(table['not_built'])})"]
            print(f"wrote {stem}.json and .md", flush=True)
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
