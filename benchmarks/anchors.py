"""Production kernels against the real framework kernels they must beat (issue 25 item 1).

For each operation, each framework kernel this script can build (an *anchor*) is timed beside
the operation's production kernel on every shape of the contract's suites (tuning, heldout,
edge) that the anchor supports, in both dtypes. A table per operation goes to
``benchmarks/results/`` as JSON and markdown, with the release versions, device, date and
commit; the summary printed last lists, per operation, dtype and anchor, the geometric-mean
speedup of production over the anchor and every shape where production is slower beyond the
noise. Every shape an anchor does not time is in the table with its reason.

The anchors are the releases' own files, never copied into the repository: the pinned release
is fetched into the ignored ``.frameworks/`` folder (``benchmarks/releases.py``, or a folder given
with ``--flashinfer`` / ``--vllm`` / ``--sglang``). Two ways in:

* FlashInfer 0.7.2.post1, through thin adapters of ours (``benchmarks/anchors/flashinfer/``),
  placed beside the release's include folder, where each ``#include``s the release header
  unmodified and exposes a ``__global__`` entry with *our* contract's parameters, launched with
  FlashInfer's own launch configuration (each adapter's header says which and why):
  MergeStateKernel (merge_attn_states_lse) and act_and_mul_kernel (silu_and_mul, gelu_and_mul,
  gelu_tanh_and_mul; the activation written from the definition in FlashInfer's JIT launcher,
  which no header holds). Same contract, so both sides go in one ``Evaluator.bench`` request
  (device mode, L2 cold, the two sides interleaved sample by sample, median; noise from the
  samples' spread).
* vLLM 0.33.0's ``csrc`` and SGLang 0.5.23's JIT kernels, through ``astra import``
  (:mod:`anchors_vllm`, ``--frameworks vllm,sglang``): the launcher's site that the framework
  takes for our suites, imported as its build compiles it (SGLang's at C++20 with its
  ``SGL_CUDA_ARCH``), under its own drafted contract; our shapes
  map to its dims by an explicit per-operation table that is checked against the imported
  contract. Different contracts cannot share a request: each side is timed alone with the same
  device-mode protocol in the same worker, alternating A B / B A over ``--rounds`` rounds; the
  noise is the spread of the per-round ratios (``anchors_vllm``'s docstring has the rule).
* Not built here, with the reason, in :data:`NOT_BUILT` and :data:`FRAMEWORK_GAPS` (and in every
  table); a launcher that does not import says the import's own reason.

``--dry-run`` does everything but timing, on a CPU host: fetches the releases (from
``.frameworks/``), stages the adapters, imports the framework launchers with NVRTC and prints, per
operation, shape and dtype, the anchor shape it is timed at or why it is not.

    python benchmarks/anchors.py [--ops rms_norm,...] [--frameworks flashinfer,vllm,sglang]
        [--rounds 3] [--dry-run] [--flashinfer INCLUDE_DIR] [--vllm RELEASE_DIR]
        [--sglang RELEASE_DIR]
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

import anchors_vllm as vllm

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
BENCH_DEADLINE_S = 240.0
"""Seconds one bench request may take (a vLLM side compiles its whole flattened file)."""


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
    Anchor(
        "gelu_and_mul",
        f"FlashInfer {FLASHINFER[1]}",
        "act_and_mul_kernel with gelu (activation.cuh)",
        ADAPTERS / "flashinfer" / "gelu_and_mul.cu",
    ),
    Anchor(
        "gelu_tanh_and_mul",
        f"FlashInfer {FLASHINFER[1]}",
        "act_and_mul_kernel with gelu_tanh (activation.cuh)",
        ADAPTERS / "flashinfer" / "gelu_tanh_and_mul.cu",
    ),
)

NOT_BUILT: dict[str, list[str]] = {}
"""Anchors of an operation no way in builds, each with why (FlashInfer's norms came in through
`astra import` once its flattening kept the TensorRT-LLM headers out: ``anchors_vllm``)."""
FRAMEWORK_GAPS: list[str] = []
"""Frameworks no anchor of any operation comes from (each with why)."""
IMPORTED = ("vllm", "sglang")
"""The frameworks whose kernels come in through ``astra import`` alone (:mod:`anchors_vllm`);
FlashInfer's come in both ways: adapters of ours, and its norm launchers imported."""
FRAMEWORKS = ("flashinfer", *IMPORTED)


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
    """The adapter, copied beside the release's headers (its includes resolve from there), with
    the headers the adapters beside it share (``*.cuh``, under the same prefix)."""
    for shared in sorted(anchor.adapter.parent.glob("*.cuh")):
        shutil.copyfile(shared, include / f"{STAGED_PREFIX}{shared.name}")
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


def _speedup_text(r: dict[str, Any]) -> str:
    return f"{r['speedup']:.3f} ± {r['speedup_err'] or 0:.3f}" if r.get("speedup") else "-"


def _us(value: float | None) -> str:
    return f"{value:.2f}" if value else "-"


def _flashinfer_section(anchor: dict[str, Any]) -> list[str]:
    lines = [
        f"Unsupported by the anchor (not timed): {', '.join(anchor['unsupported']) or 'none'}.",
        "",
        "| shape | dtype | production µs | anchor µs | speedup | call | copy floor µs |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in anchor["rows"]:
        lines.append(
            f"| {r['shape']} | {r['dtype']} | {r['production_us']:.2f} | {_us(r['anchor_us'])} | "
            f"{_speedup_text(r)} | {r['call'] or '-'} | {_us(r['copy_floor_us'])} |"
        )
    return lines


def _imported_section(anchor: dict[str, Any]) -> list[str]:
    lines = [
        f"Imported by `astra import` ({', '.join(anchor['sites']) or 'no site came in'}); "
        f"path: {anchor['path']}. Layout: {anchor['layout']}.",
        "",
        f"Timed alone per side, same device-mode protocol, {anchor['rounds']} rounds alternating "
        "A B / B A; speedup = median of the per-round ratios, ± the larger of half their range "
        "and the within-request error.",
        "",
        "| shape | framework shape | dtype | production µs | framework µs | speedup | call | "
        "rounds |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in anchor["rows"]:
        ratios = " ".join(f"{x:.3f}" for x in r.get("round_ratios", []))
        lines.append(
            f"| {r['shape']} | {r['anchor_shape']} | {r['dtype']} | {_us(r['production_us'])} | "
            f"{_us(r['anchor_us'])} | {_speedup_text(r)} | {r['call'] or '-'} | {ratios} |"
        )
    if anchor["not_timed"]:
        lines += ["", "Not timed:", ""]
        for why, labels in vllm.by_reason(anchor["not_timed"]).items():
            lines.append(f"- {', '.join(labels)}: {why}")
    return lines


def markdown(table: dict[str, Any]) -> str:
    """One operation's table: production against each anchor, shape by shape."""
    versions = ", ".join(f"{k} {v}" for k, v in table["releases"].items())
    lines = [
        f"# {table['op']}: production against the framework kernels",
        "",
        f"{table['device']}, {table['date']}, commit `{(table['commit'] or 'unknown')[:7]}`, "
        f"{versions}; device mode (L2 cold, median); speedup = anchor time / production time "
        "(above 1: production faster; `tie` within the noise).",
        "",
    ]
    for anchor in table["anchors"]:
        lines += [f"## {anchor['framework']}: {anchor['kernel']}", ""]
        section = _imported_section if anchor.get("via") == "astra import" else _flashinfer_section
        lines += section(anchor)
        if anchor.get("error"):
            lines.append(f"\nNot timed: {anchor['error']}")
        if anchor.get("notes"):
            lines += ["", "Harness notes:", "", *[f"- {n}" for n in anchor["notes"]]]
        lines.append("")
    gaps = [*table["not_built"], *FRAMEWORK_GAPS]
    lines += ["## Not built here", "", *[f"- {g}" for g in gaps], ""]
    return "\n".join(lines)


def summary(table: dict[str, Any]) -> list[str]:
    """Per anchor and dtype: the geomean speedup of production and the shapes where it is
    slower beyond the noise (vLLM anchors of another layout are said so, not mixed in)."""
    out = []
    for anchor in table["anchors"]:
        if anchor.get("error"):
            out.append(f"{table['op']} vs {anchor['framework']}: NOT TIMED: {anchor['error']}")
            continue
        layout = "" if anchor.get("same_work", True) else f" [{anchor['layout'].split(':')[0]}]"
        for dtype in DTYPES:
            rows = [r for r in anchor["rows"] if r["dtype"] == dtype and r["speedup"]]
            speedups = [r["speedup"] for r in rows]
            mean = statistics.geometric_mean(speedups) if speedups else None
            slower = [r["shape"] for r in rows if r["call"] == "slower"]
            untimed = sum(label.endswith(f" {dtype}") for label in anchor.get("not_timed", {}))
            skipped = f"; {untimed} shapes not timed (reasons in the table)" if untimed else ""
            out.append(
                f"{table['op']} {dtype} vs {anchor['framework']} {anchor['kernel']}{layout}: "
                f"geomean {mean or float('nan'):.3f}x over {len(rows)} shapes; production "
                f"slower at {', '.join(slower) or 'no shape'}{skipped}"
            )
    return out


def _shapes(spec: Any) -> list[dict[str, int]]:
    return [d for suite in SUITES for d in spec.contract.suite(suite)]


def flashinfer_entries(
    evaluator: Any, spec: Any, include: Path, dry: list[str] | None = None
) -> list[dict[str, Any]]:
    """The FlashInfer anchors of ``spec``'s operation, timed (``evaluator``), or, with ``dry``
    given, the shapes each would time appended to it as lines."""
    from astra_graph.kernel.dtypes import DTYPES as KNOWN
    from astra_graph.kernel.header import load_implementation

    entries = []
    shapes = _shapes(spec)
    for anchor in (a for a in ANCHORS if a.op == spec.name):
        staged = stage(anchor, include)
        header = load_implementation(staged, spec.contract).header
        entry: dict[str, Any] = {
            "framework": anchor.framework,
            "kernel": anchor.kernel,
            "via": "adapter",
            "adapter": str(anchor.adapter.relative_to(ROOT)),
            "rows": [],
        }
        for dtype in DTYPES:
            timed = [d for d in shapes if header.unmet_requirement(d, KNOWN[dtype], {}) is None]
            entry["unsupported"] = [spec.contract.label(d) for d in shapes if d not in timed]
            if dry is not None:
                dry.append(
                    f"{spec.name} {dtype} vs {anchor.framework} {anchor.kernel} (adapter): "
                    f"{len(timed)} of {len(shapes)} shapes; unsupported by the anchor: "
                    f"{', '.join(entry['unsupported']) or 'none'}"
                )
                continue
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
        entries.append(entry)
    return entries


def imported_entry(
    evaluator: Any,
    spec: Any,
    source: str,
    root: Path,
    imports: Path,
    rounds: int,
    dry: list[str] | None = None,
) -> dict[str, Any] | None:
    """The ``source`` framework's (vLLM's, SGLang's) anchor of ``spec``'s operation: imported,
    mapped and (``evaluator``) timed, or with ``dry`` given, the mapping appended to it as
    lines; None where the framework has no kernel for it."""
    anchor = vllm.anchor_by_op(source).get(spec.name)
    if anchor is None:
        return None
    imported = vllm.import_anchor(anchor, root, imports)
    mapped = vllm.map_shapes(anchor, spec, imported, _shapes(spec))
    entry: dict[str, Any] = {
        "framework": anchor.framework,
        "kernel": anchor.kernel,
        "via": "astra import",
        "sites": [s.op for s in imported.sites],
        "import_refused": imported.refused,
        "path": anchor.why_path,
        "layout": anchor.layout,
        "same_work": anchor.same_work,
        "dims_map": dict(anchor.dims),
        "axes_map": {tensor: list(axes) for tensor, axes in anchor.axes.items()},
        "args_map": dict(anchor.args),
        "rounds": rounds,
        "not_timed": {f"{m.label} {m.dtype}": m.reason for m in mapped if m.site is None},
        "rows": [],
        "notes": [],
    }
    if dry is not None:
        dry += vllm.dry_run_lines(anchor, mapped, imported)
        return entry
    try:
        entry["rows"], entry["notes"] = vllm.time_anchor(
            evaluator, spec, spec.folder / "production.cu", mapped, rounds
        )
    except Exception as exc:  # an anchor that fails is a result to report, not a crash
        entry["error"] = f"{type(exc).__name__}: {exc}"[:400]
    return entry


@dataclass
class Sources:
    """Where the anchors come from; a framework left out is None (``imported``: the release
    folder of each framework of :data:`IMPORTED` asked for)."""

    flashinfer: Path | None
    vllm: Path | None
    imports: Path
    rounds: int = vllm.DEFAULT_ROUNDS
    sglang: Path | None = None
    flashinfer_release: Path | None = None
    """The unpacked wheel :attr:`flashinfer` is the include folder of (its norm launchers are
    imported from it)."""

    def imported(self) -> dict[str, Path]:
        roots = {"vllm": self.vllm, "sglang": self.sglang, "flashinfer": self.flashinfer_release}
        return {name: root for name, root in roots.items() if root is not None}


def run_op(
    evaluator: Any,
    op: str,
    include: Path | Sources | None,
    device: str,
    dry: list[str] | None = None,
) -> dict[str, Any]:
    """One operation's table (``include``: FlashInfer's include folder alone, or every source)."""
    from astra_graph.kernel.contract import load_contract
    from astra_graph.store.provenance import git_commit

    sources = include if isinstance(include, Sources) else Sources(include, None, Path("."))
    spec = load_contract(ROOT / "kernels" / op)
    releases = {}
    if sources.flashinfer is not None:
        releases[FLASHINFER[0]] = FLASHINFER[1]
    for name in sources.imported():
        releases[vllm.RELEASES[name].package] = vllm.RELEASES[name].version
    table: dict[str, Any] = {
        "op": op,
        "device": device,
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "commit": git_commit(),
        "production": str(spec.folder / "production.cu"),
        "releases": releases,
        "mode": "device",
        "anchors": [],
        "not_built": NOT_BUILT.get(op, []) if sources.flashinfer is not None else [],
        "framework_gaps": FRAMEWORK_GAPS,
    }
    if sources.flashinfer is not None:
        table["anchors"] += flashinfer_entries(evaluator, spec, sources.flashinfer, dry)
    for name, root in sources.imported().items():
        entry = imported_entry(evaluator, spec, name, root, sources.imports, sources.rounds, dry)
        if entry is not None:
            table["anchors"].append(entry)
    return table


def known_ops() -> list[str]:
    return sorted({a.op for a in ANCHORS} | set(NOT_BUILT) | {a.op for a in vllm.IMPORTED_ANCHORS})


def _sources(args: argparse.Namespace, frameworks: list[str]) -> Sources:
    """The release folders of the frameworks asked for (AnchorError/VllmAnchorError: one line)."""
    include = flashinfer_include(args.flashinfer) if "flashinfer" in frameworks else None
    root = vllm.release_root(args.vllm) if "vllm" in frameworks else None
    sglang = vllm.release_root(args.sglang, "sglang") if "sglang" in frameworks else None
    wheel = None
    if include is not None:  # the wheel's root: include is <root>/flashinfer/data/include
        wheel = vllm.release_root(
            include.parents[len(Path(FLASHINFER_INCLUDE).parts) - 1], "flashinfer"
        )
    return Sources(include, root, args.imports, args.rounds, sglang, wheel)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    known = known_ops()
    parser.add_argument("--ops", help=f"comma-separated operations (default: {','.join(known)})")
    parser.add_argument(
        "--frameworks",
        default=",".join(FRAMEWORKS),
        help=f"comma-separated: {','.join(FRAMEWORKS)}",
    )
    parser.add_argument("--flashinfer", type=Path, help="FlashInfer's include folder")
    parser.add_argument("--vllm", type=Path, help="vLLM's unpacked release (with csrc/)")
    parser.add_argument(
        "--sglang", type=Path, help="SGLang's unpacked release (with sglang/kernels/jit/)"
    )
    parser.add_argument(
        "--rounds",
        type=int,
        default=vllm.DEFAULT_ROUNDS,
        help="imported anchors: alternating rounds",
    )
    parser.add_argument(
        "--imports",
        type=Path,
        default=Path("/tmp/astra-anchor-imports"),
        help="where astra import writes the imported operations",
    )
    parser.add_argument("--dry-run", action="store_true", help="everything but timing (no GPU)")
    parser.add_argument("--out-dir", type=Path, default=RESULTS, help="where the tables go")
    args = parser.parse_args(argv)
    ops = args.ops.split(",") if args.ops else known
    for op in ops:
        if op not in known:
            parser.error(f"--ops: {op!r} is not one of {known}")
    frameworks = args.frameworks.split(",")
    for name in frameworks:
        if name not in FRAMEWORKS:
            parser.error(f"--frameworks: {name!r} is not one of {list(FRAMEWORKS)}")
    if args.rounds < 2:
        parser.error(f"--rounds: {args.rounds} gives no spread; at least 2")
    try:
        sources = _sources(args, frameworks)
    except (AnchorError, vllm.VllmAnchorError) as exc:
        print(f"anchors: {exc}", file=sys.stderr)
        return 2
    if args.dry_run:
        return dry_run(ops, sources)

    from astra_graph.harness.compile import gpu_arch
    from astra_graph.harness.evaluator import Evaluator

    if gpu_arch() is None:
        print("anchors: no CUDA GPU visible: the anchors are timed on a GPU", file=sys.stderr)
        return 2
    lines: list[str] = []
    with Evaluator(deadline_s=BENCH_DEADLINE_S) as evaluator:
        import cupy

        name = cupy.cuda.runtime.getDeviceProperties(0)["name"]
        device = name.decode() if isinstance(name, bytes) else str(name)
        slug = re.sub(r"[^a-z0-9]+", "-", device.lower()).strip("-")
        day = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d")
        args.out_dir.mkdir(parents=True, exist_ok=True)
        for op in ops:
            table = run_op(evaluator, op, sources, device)
            stem = args.out_dir / f"anchors-{op}-{slug}-{day}"
            stem.with_suffix(".json").write_text(json.dumps(table, indent=1))
            stem.with_suffix(".md").write_text(markdown(table))
            lines += summary(table) or [f"{op}: no anchor built ({'; '.join(table['not_built'])})"]
            print(f"wrote {stem}.json and .md", flush=True)
    print("\n".join(lines))
    return 0


def dry_run(ops: list[str], sources: Sources) -> int:
    """Everything but timing: stage, import, map; print what each anchor would time."""
    for op in ops:
        lines: list[str] = []
        table = run_op(None, op, sources, "dry run", dry=lines)
        print("\n".join(lines) or f"{op}: no anchor")
        for anchor in table["anchors"]:
            untimed = len(anchor.get("not_timed", {}))
            if anchor.get("via") == "astra import":
                timed = 2 * len(_shapes_of(op)) - untimed
                print(
                    f"  => {op} vs {anchor['framework']}: {timed} (shape, dtype) pairs timed, "
                    f"{untimed} not (each with its reason above)"
                )
    return 0


def _shapes_of(op: str) -> list[dict[str, int]]:
    from astra_graph.kernel.contract import load_contract

    return _shapes(load_contract(ROOT / "kernels" / op))


if __name__ == "__main__":
    sys.exit(main())
