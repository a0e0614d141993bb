"""The round trip on one GPU host: optimise offline, export, verify against the framework-style
original built from source, gate on a model block; one JSON per step and a summary.

    python benchmarks/export_round_trip.py --out DIR [--ops silu_and_mul,...] [--tune-budget-s 15]

For each shipped operation: an offline run of its production kernel (``optimize(...,
rounds=0)``: the contract's suites, the per-bucket tuning sweep, finalize; no model endpoint),
``astra export --format torch`` of that run directory, ``--format patch`` of it against the
framework-style file (built with nvcc in the background, as ``--check`` does), ``--verify``
(every suite shape and dtype against ``tests/fixtures/framework_ops``, opcheck, CUDA-graph
replay, torch.compile, graph and eager timing, host overhead) and ``--gate`` (a Llama-3-8B
block around the op, decode and prefill). The three originals are built as torch extensions
in background processes while the first run tunes on the GPU (their builds are CPU work,
about a minute each).

Writes DIR/runs/<run>/..., DIR/export-<op>/{verify,gate}-<op>.json, <op>.patch and
DIR/round_trip.json (device, date, commit, per-op summaries); the last lines printed are the
summary.
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
from pathlib import Path

import torch

from astra_graph.export.gate import gate
from astra_graph.export.patch import check_patch, write_patch
from astra_graph.export.torch_package import export_torch, read_run
from astra_graph.export.verify import verify
from astra_graph.harness.compile import DEFAULT_ARCH, gpu_arch
from astra_graph.kernel.catalog import resolve
from astra_graph.run.runner import optimize
from astra_graph.store.provenance import git_commit

OPS = ("silu_and_mul", "fused_add_rmsnorm", "merge_attn_states_lse")
FIXTURES = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "framework_ops"
PREBUILD = """
import sys
from astra_graph.kernel.catalog import resolve
from astra_graph.export.framework import load_framework
from astra_graph.export.measure import load_original
spec, _ = resolve(sys.argv[1])
fw = load_framework(spec.folder, spec.contract)
load_original(spec, fw, __import__("pathlib").Path(sys.argv[2]) / fw.source.file)
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--ops", help="comma-separated operations (default: the three shipped)")
    parser.add_argument("--tune-budget-s", type=float, default=15.0, help="sweep budget per run")
    args = parser.parse_args()
    ops = args.ops.split(",") if args.ops else list(OPS)
    for op in ops:
        resolve(f"{op}/production")  # a bad --ops name fails here, before any GPU work
    args.out.mkdir(parents=True, exist_ok=True)
    for key in ("OPENAI_API_KEY", "ASTRA_API_KEY"):  # offline: no agent rounds
        os.environ.pop(key, None)
    builds = {
        op: subprocess.Popen(
            [sys.executable, "-c", PREBUILD, f"{op}/production", str(FIXTURES)],
            stdout=subprocess.DEVNULL,
            stderr=open(args.out / f"build-{op}.log", "w"),  # noqa: SIM115  # closed at exit
        )
        for op in ops
    }
    summary: dict[str, dict[str, object]] = {}
    nvcc = ThreadPoolExecutor(max_workers=len(ops))  # patched-file builds: CPU, beside the GPU
    checks: dict[str, Future[str | None]] = {}
    lost: str | None = None  # a sticky CUDA fault ends the process's context for every op after
    for op in ops:
        started = time.monotonic()
        entry: dict[str, object] = {}
        if lost is not None:
            summary[op] = {"error": f"not run: the CUDA context was lost at {lost}"}
            print(f"{op}: {json.dumps(summary[op])}", flush=True)
            continue
        try:
            result = optimize(
                f"{op}/production",
                rounds=0,
                tune_budget_s=args.tune_budget_s,
                runs_dir=args.out / "runs",
            )
            entry["run"] = result.run_dir
            entry["run_seconds"] = round(time.monotonic() - started, 1)
            run = read_run(Path(result.run_dir))
            export_dir = args.out / f"export-{op}"
            arch = gpu_arch() or DEFAULT_ARCH
            package = export_torch(run, export_dir, arch=arch)
            _, patched = write_patch(run, FIXTURES, export_dir, arch)
            checks[op] = nvcc.submit(check_patch, run, FIXTURES, patched, arch)
            builds[op].wait()
            assert run.framework.source is not None
            original = FIXTURES / run.framework.source.file
            report = verify(run, package, original)
            (export_dir / f"verify-{op}.json").write_text(json.dumps(report, indent=2) + "\n")
            verdict = gate(run, package, original)
            (export_dir / f"gate-{op}.json").write_text(json.dumps(verdict, indent=2) + "\n")
            entry |= {
                "verify_passed": report["passed"],
                "verify": report["summary"],
                "failures": report["failures"][:10],
                "host_overhead": report["host_overhead"],
                "gate": verdict["summary"],
                "decision": verdict["decision"],
            }
        except Exception as exc:  # one op's failure is reported and the others still run
            traceback.print_exc()  # the whole story to stderr; the summary keeps one line
            first = (str(exc).splitlines() or [""])[0]
            entry["error"] = f"{type(exc).__name__}: {first}"
            if type(exc).__name__ == "AcceleratorError":  # torch >= 2.8: a sticky CUDA error
                lost = f"{op} ({first})"
        entry["seconds"] = round(time.monotonic() - started, 1)
        summary[op] = entry
        print(f"{op}: {json.dumps(entry)}", flush=True)
    for op, check in checks.items():
        try:
            problem = check.result()
        except Exception as exc:  # a missing tool: reported beside the op
            problem = f"{type(exc).__name__}: {exc}"
        summary[op]["patch_builds"] = problem is None
        summary[op]["patch_problem"] = problem
    spec_device = torch.cuda.get_device_name() if torch.cuda.is_available() else "no GPU"
    record = {
        "device": spec_device,
        "date": dt.date.today().isoformat(),
        "commit": git_commit(),
        "torch": torch.__version__,
        "ops": summary,
    }
    (args.out / "round_trip.json").write_text(json.dumps(record, indent=2) + "\n")
    print(f"--- export round trip on {spec_device} ---")
    for op, entry in summary.items():
        if "error" in entry:
            print(f"{op}: ERROR {entry['error']}")
        else:
            built = (
                "builds" if entry.get("patch_builds") else f"FAILS: {entry.get('patch_problem')}"
            )
            print(f"{entry['verify']}\n  {entry['gate']}\n  patched framework file {built}")


if __name__ == "__main__":
    main()
