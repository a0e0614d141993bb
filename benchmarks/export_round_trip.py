"""The round trip on one GPU host: optimise offline, export, verify against the framework-style
original built from source, gate on a model block; one JSON per step and a summary.

    python benchmarks/export_round_trip.py --out DIR [--ops silu_and_mul,...] [--tune-budget-s 15]
    python benchmarks/export_round_trip.py --out DIR --imported FILE.cu:LAUNCHER[,...]

For each operation, shipped (``--ops``, default the three) or imported (``--imported``: the
framework-style file taken in by ``astra import`` first, the launcher's one launch site; the
framework root is the folder above its ``csrc``/``include``): an offline run of its production
kernel (``optimize(..., rounds=0)``: the contract's suites, the per-bucket tuning sweep,
finalize; no model endpoint), ``astra export --format torch`` of that run directory,
``--format patch`` of it against the framework-style file (built with nvcc as ``--check``
does, all at once after the GPU steps), ``--verify`` (every suite shape and dtype against the
original built from that file, opcheck, CUDA-graph replay, torch.compile, graph and eager
timing, the device time set beside the run's own bench, host overhead) and ``--gate`` (a
Llama-3-8B block around the op, decode and prefill; an imported op's ``[gate]`` is written
here from :data:`GATES`, as its user writes it by hand). The originals are built as torch
extensions in background processes while the first run uses the GPU (their builds are CPU
work, about a minute each), all finished before the first verification.

The same code path serves both kinds: only where the operation folder and the framework root
come from differs (:class:`Target`). A shipped and an imported operation with the same
framework op name cannot share a process (torch registers ``astra::<name>`` once): such a
mix is refused before any GPU work.

Writes DIR/runs/<run>/..., DIR/export-<name>/{verify,gate}-<op>.json, <op>.patch and
DIR/round_trip.json (device, date, commit, per-op summaries); the last lines printed are the
summary. ``--imported`` alone (no ``--ops``) runs only the imported operations.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import subprocess
import sys
import time
import traceback
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
OPS = ("silu_and_mul", "fused_add_rmsnorm", "merge_attn_states_lse")
FIXTURES = REPO / "tests" / "fixtures" / "framework_ops"
IMPORTED_FIXTURES = (
    "tests/fixtures/framework/csrc/activation.cu:silu_and_mul",
    "tests/fixtures/framework/csrc/layernorm.cu:fused_add_rms_norm",
)
"""Two framework-style files the project writes itself (``--imported fixtures``)."""
GATES = {
    "silu_and_mul": (
        'block = "mlp"\ndims = { tokens = "tokens", input_1 = "2 * intermediate" }\n'
        'writes = "input"\nreads = "out"\n'
    ),
    "fused_add_rms_norm": (
        'block = "norm"\ndims = { tokens = "tokens", hidden_size = "hidden" }\nreads = "input"\n'
    ),
}
"""``[gate]`` of an imported launcher, by name: the block around the op and how the drafted
contract's dims and tensors sit in it (what a user adds to the drafted framework.toml)."""
BENCH_AGREEMENT = 0.02
"""The issue's criterion: the export's device time within this of the run's bench time."""
PREBUILD = """
import sys
from pathlib import Path
from astra_graph.kernel.catalog import resolve
from astra_graph.export.framework import load_framework
from astra_graph.export.measure import load_original
spec, _ = resolve(sys.argv[1])
fw = load_framework(spec.folder, spec.contract)
load_original(spec, fw, Path(sys.argv[2]) / fw.source.file)
"""


@dataclass(frozen=True)
class Target:
    """One operation of the round trip: its name in the summary, what ``optimize`` takes, the
    framework root its ``[source] file`` lies under, and the op's torch name."""

    name: str
    kernel: str
    root: Path
    framework_op: str


def shipped(op: str) -> Target:
    from astra_graph.export.framework import load_framework
    from astra_graph.kernel.catalog import resolve

    spec, _ = resolve(f"{op}/production")  # a bad --ops name fails here, before any GPU work
    fw = load_framework(spec.folder, spec.contract)
    return Target(op, f"{op}/production", FIXTURES, fw.name)


def imported(item: str, out: Path) -> Target:
    """``FILE.cu:LAUNCHER`` imported into ``out/imported/`` (one launch site), with ``[gate]``
    from :data:`GATES` where it has one; raises SystemExit with one line naming the item."""
    from astra_graph.export.framework import load_framework
    from astra_graph.framework.flatten import include_folders
    from astra_graph.framework.importer import import_file
    from astra_graph.framework.naming import default_root
    from astra_graph.kernel.catalog import resolve
    from astra_graph.kernel.contract import FRAMEWORK_FILE, ContractError

    file, _, launcher = item.rpartition(":")
    source = Path(file) if Path(file).is_absolute() else REPO / file
    if not file or not launcher or not source.is_file():
        raise SystemExit(f"--imported {item}: expected FILE.cu:LAUNCHER with an existing file")
    root = default_root(source)
    report = import_file(
        source, include_folders(source, [], root), out / "imported", only={launcher}, root=root
    )
    done = [r for r in report.launchers if r.imported]
    if len(done) != 1 or done[0].folder is None:
        why = "; ".join(r.reason for r in report.launchers) or "no such launcher"
        raise SystemExit(f"--imported {item}: {len(done)} launch sites imported ({why})")
    folder = Path(done[0].folder)
    if not (folder / FRAMEWORK_FILE).is_file():
        raise SystemExit(f"--imported {item}: {'; '.join(done[0].notes)}")
    if launcher in GATES:
        with (folder / FRAMEWORK_FILE).open("a") as toml:
            toml.write("\n# added by benchmarks/export_round_trip.py (GATES)\n[gate]\n")
            toml.write(GATES[launcher])
    spec, _ = resolve(folder / "production.cu")
    try:
        fw = load_framework(spec.folder, spec.contract)
    except ContractError as exc:
        raise SystemExit(f"--imported {item}: {exc}") from None
    return Target(f"imported-{spec.name}", str(folder / "production.cu"), root, fw.name)


def agreement(cases: list[dict[str, Any]]) -> dict[str, Any]:
    """The device-time comparisons over the timed cases: the export's in-graph time and the
    kernel launched straight each against the run's bench, and the in-graph time against the
    straight launch taken beside it on the same buffers (``same_buffers``); per comparison how
    many within :data:`BENCH_AGREEMENT`, how many the bench timed as one flushed launch, the
    range, the cases outside."""
    from astra_graph.harness.timing import SINGLE_LAUNCH_METHODS

    out: dict[str, Any] = {}
    keys = (
        ("graph", "export_over_bench"),
        ("direct", "direct_over_bench"),
        ("same_buffers", "graph_over_direct"),
    )
    for method, key in keys:
        timed = [c for c in cases if c.get(key) is not None]
        ratios = [c[key] for c in timed]
        out[method] = {
            "within": sum(abs(r - 1) <= BENCH_AGREEMENT for r in ratios),
            "timed": len(ratios),
            "single_launch_timed": sum(c["bench_method"] in SINGLE_LAUNCH_METHODS for c in timed),
            "range": [min(ratios), max(ratios)] if ratios else None,
            "outside": [
                f"{c['shape']} {c['dtype']} {c[key]:.3f} ({c['bench_method']})"
                for c in timed
                if abs(c[key] - 1) > BENCH_AGREEMENT
            ],
        }
    out["host_time_possible"] = sum(c.get("host_ahead") is False for c in cases)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--ops", help="comma-separated shipped operations (default: the three)")
    parser.add_argument(
        "--imported",
        help="comma-separated FILE.cu:LAUNCHER framework-style files to import first "
        "('fixtures': the project's two)",
    )
    parser.add_argument("--tune-budget-s", type=float, default=15.0, help="sweep budget per run")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    names = args.ops.split(",") if args.ops else ([] if args.imported else list(OPS))
    targets = [shipped(op) for op in names if op]
    items = IMPORTED_FIXTURES if args.imported == "fixtures" else (args.imported or "").split(",")
    targets += [imported(item, args.out) for item in items if item]
    clashes = sorted(
        {
            t.framework_op
            for t in targets
            if [u.framework_op for u in targets].count(t.framework_op) > 1
        }
    )
    if clashes:
        raise SystemExit(
            f"--ops/--imported: {clashes[0]!r} twice; torch registers astra::{clashes[0]} once "
            "per process: run them in separate invocations"
        )
    for key in ("OPENAI_API_KEY", "ASTRA_API_KEY"):  # offline: no agent rounds
        os.environ.pop(key, None)
    summary = round_trip(targets, args.out, args.tune_budget_s)
    report(summary, args.out)


def round_trip(targets: list[Target], out: Path, tune_budget_s: float) -> dict[str, Any]:
    """Every target through run, export, patch, verify and gate; one entry per target."""
    import torch  # noqa: F401  # the GPU side: fail here, before the prebuilds, without torch

    from astra_graph.export.gate import gate
    from astra_graph.export.patch import check_patch, write_patch
    from astra_graph.export.torch_package import export_torch, read_run
    from astra_graph.export.verify import verify
    from astra_graph.harness.compile import DEFAULT_ARCH, gpu_arch
    from astra_graph.run.runner import optimize

    builds = {
        t.name: subprocess.Popen(
            [sys.executable, "-c", PREBUILD, t.kernel, str(t.root)],
            stdout=subprocess.DEVNULL,
            stderr=open(out / f"build-{t.name}.log", "w"),  # noqa: SIM115  # closed at exit
        )
        for t in targets
    }
    summary: dict[str, Any] = {}
    patches: dict[str, tuple[Any, Path, Path, str]] = {}
    """The patched files, built with nvcc once every GPU step is done: a build beside the
    verification inflated its host timings (eager overhead about twice another run's at
    427de8e) and may have put host time into one flushed sample batch."""
    lost: str | None = None  # a sticky CUDA fault ends the process's context for every op after
    for target in targets:
        started = time.monotonic()
        entry: dict[str, Any] = {"kernel": target.kernel}
        if lost is not None:
            summary[target.name] = {"error": f"not run: the CUDA context was lost at {lost}"}
            print(f"{target.name}: {json.dumps(summary[target.name])}", flush=True)
            continue
        try:
            result = optimize(
                target.kernel, rounds=0, tune_budget_s=tune_budget_s, runs_dir=out / "runs"
            )
            entry["run"] = result.run_dir
            entry["run_seconds"] = round(time.monotonic() - started, 1)
            run = read_run(Path(result.run_dir))
            export_dir = out / f"export-{target.name}"
            arch = gpu_arch() or DEFAULT_ARCH
            package = export_torch(run, export_dir, arch=arch)
            _, patched = write_patch(run, target.root, export_dir, arch)
            patches[target.name] = (run, target.root, patched, arch)
            for build in builds.values():  # no build beside the verification's host timings
                build.wait()
            assert run.framework.source is not None
            original = target.root / run.framework.source.file
            verified = verify(run, package, original)
            path = export_dir / f"verify-{run.spec.name}.json"
            path.write_text(json.dumps(verified, indent=2) + "\n")
            entry |= {
                "verify_passed": verified["passed"],
                "verify": verified["summary"],
                "failures": verified["failures"][:10],
                "bench_agreement": agreement(verified["cases"]),
                "host_overhead": verified["host_overhead"],
            }
            if run.framework.gate is None:
                entry["gate"] = f"{run.spec.name}: no [gate] in framework.toml: not gated"
            else:
                verdict = gate(run, package, original)
                path = export_dir / f"gate-{run.spec.name}.json"
                path.write_text(json.dumps(verdict, indent=2) + "\n")
                entry |= {"gate": verdict["summary"], "decision": verdict["decision"]}
        except Exception as exc:  # one op's failure is reported and the others still run
            traceback.print_exc()  # the whole story to stderr; the summary keeps one line
            first = (str(exc).splitlines() or [""])[0]
            entry["error"] = f"{type(exc).__name__}: {first}"
            if type(exc).__name__ == "AcceleratorError":  # torch >= 2.8: a sticky CUDA error
                lost = f"{target.name} ({first})"
        entry["seconds"] = round(time.monotonic() - started, 1)
        summary[target.name] = entry
        print(f"{target.name}: {json.dumps(entry)}", flush=True)
    nvcc = ThreadPoolExecutor(max_workers=max(len(patches), 1))  # patched-file builds: CPU
    checks: dict[str, Future[str | None]] = {
        name: nvcc.submit(check_patch, *patch) for name, patch in patches.items()
    }
    for name, check in checks.items():
        try:
            problem = check.result()
        except Exception as exc:  # a missing tool: reported beside the op
            problem = f"{type(exc).__name__}: {exc}"
        summary[name]["patch_builds"] = problem is None
        summary[name]["patch_problem"] = problem
    return summary


def report(summary: dict[str, Any], out: Path) -> None:
    """round_trip.json and the summary lines."""
    import torch

    from astra_graph.store.provenance import git_commit

    device = torch.cuda.get_device_name() if torch.cuda.is_available() else "no GPU"
    record = {
        "device": device,
        "date": dt.date.today().isoformat(),
        "commit": git_commit(),
        "torch": torch.__version__,
        "ops": summary,
    }
    (out / "round_trip.json").write_text(json.dumps(record, indent=2) + "\n")
    print(f"--- export round trip on {device} ---")
    for name, entry in summary.items():
        if "error" in entry:
            print(f"{name}: ERROR {entry['error']}")
            continue
        built = "builds" if entry.get("patch_builds") else f"FAILS: {entry.get('patch_problem')}"
        times = entry["bench_agreement"]
        graph, direct, beside = times["graph"], times["direct"], times["same_buffers"]
        print(
            f"{name}: {entry['verify']}\n  {entry['gate']}\n  patched framework file {built}\n"
            f"  CUDA-graph time within {BENCH_AGREEMENT:.0%} of bench: {graph['within']}/"
            f"{graph['timed']} (outside: {', '.join(graph['outside']) or 'none'}); kernel "
            f"launched straight: {direct['within']}/{direct['timed']}\n"
            f"  CUDA-graph time within {BENCH_AGREEMENT:.0%} of the kernel launched straight "
            f"beside it on the same buffers: {beside['within']}/{beside['timed']} (outside: "
            f"{', '.join(beside['outside']) or 'none'})"
        )


if __name__ == "__main__":
    main()
