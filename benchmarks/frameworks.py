"""A benchmark of the real world: import every launcher of pinned framework releases' kernel files.

``python benchmarks/frameworks.py`` (no GPU needed) fetches the pinned releases
(:mod:`releases`, into ``.frameworks/``), runs ``astra import`` on their activation,
normalization, rotary, attention-state-merge and quantization files, then ``astra validate`` on
every operation that came in. ``--gpu`` also checks each validated operation against itself on
the GPU (the original kernel as candidate and as baseline, its reference the original as oracle);
``--optimize`` then runs ``astra optimize`` with no model endpoint on each operation that was
accepted, and says whether it completed. ``--only TEXT`` keeps the files whose path contains
TEXT, ``--limit N`` validates and checks only the first N imported operations, ``--jobs N``
imports N files and validates N operations at once, ``--gpu-jobs N`` checks and optimizes N
operations at once (processes of their own; the GPU columns are verdicts and completion, not
times, so sharing the GPU changes none; each evaluator holds up to about 8.5 GB of the GPU's
memory at the largest shapes, so 12 at once ran out of the H100's 80 GB at 48866f5).
The tuner-only speedup column is ``n/a`` for every imported operation: an import declares no
tunables (the launcher's sizes are fixed by the framework), so there is nothing to tune yet.

Prints one row per launch site (launcher, imported or why not, validated, checked), a summary
line last, and writes the rows with the releases' versions, this repository's commit and the
device to ``benchmarks/results/frameworks-<device>.json``. Not run in CI (downloads, minutes).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import subprocess
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from releases import PINNED, fetch

from astra_graph.cli import main as astra
from astra_graph.framework.flatten import include_folders
from astra_graph.framework.importer import import_file
from astra_graph.framework.launchers import device_constants
from astra_graph.llm.settings import API_KEY_VARIABLES
from astra_graph.store.provenance import git_commit

FILES: dict[str, tuple[str, ...]] = {
    "vllm": (
        "csrc/activation_kernels.cu",
        "csrc/layernorm_kernels.cu",
        "csrc/layernorm_quant_kernels.cu",
        "csrc/pos_encoding_kernels.cu",
        "csrc/attention/merge_attn_states.cu",
        "csrc/quantization/w8a8/fp8/common.cu",
    ),
    "flashinfer-python": (
        "flashinfer/data/include/flashinfer/activation.cuh",
        "flashinfer/data/include/flashinfer/norm.cuh",
        "flashinfer/data/include/flashinfer/pos_enc.cuh",
        "flashinfer/data/include/flashinfer/attention/cascade.cuh",
        "flashinfer/data/include/flashinfer/quantization.cuh",
    ),
    "sglang": (
        "sglang/kernels/jit/csrc/elementwise/activation.cuh",
        "sglang/kernels/jit/csrc/elementwise/rmsnorm.cuh",
        "sglang/kernels/jit/csrc/elementwise/fused_add_rmsnorm.cuh",
        "sglang/kernels/jit/csrc/elementwise/rope.cuh",
        "sglang/kernels/jit/csrc/elementwise/pos_enc.cuh",
    ),
}
"""The files a user would hand over, per release (field notes, section 8)."""
INCLUDE_ROOTS: dict[str, tuple[str, ...]] = {
    "vllm": ("csrc",),
    "flashinfer-python": ("flashinfer/data/include", "flashinfer/data/csrc"),
    "sglang": ("sglang/kernels/jit/include", "sglang/kernels/jit/csrc"),
}
"""The framework's own include folders, relative to the unpacked release."""
DEFINES: dict[str, tuple[str, ...]] = {
    "vllm": ("ENABLE_FP8",),
    "flashinfer-python": (
        "FLASHINFER_ENABLE_F16",
        "FLASHINFER_ENABLE_BF16",
        "FLASHINFER_ENABLE_FP8_E4M3",
        "FLASHINFER_ENABLE_FP8_E5M2",
    ),
}
"""The macros each framework's build defines for its CUDA files: vLLM's cmake/utils.cmake
(get_torch_gpu_compiler_flags) appends ``-DENABLE_FP8`` for CUDA 11.8 and later; FlashInfer's
flashinfer/jit/core.py (gen_jit_spec) passes ``-DFLASHINFER_ENABLE_F16``, ``_BF16``,
``_FP8_E4M3`` and ``_FP8_E5M2`` to nvcc for every JIT module (its ``common_nvcc_flags``,
``_FP8_E8M0`` and ``_FP4_E2M1``, only with the sm90a-and-later flags of the modules that ask)."""
FILE_DEFINES: dict[tuple[str, str], tuple[str, ...]] = {
    ("flashinfer-python", "flashinfer/data/include/flashinfer/norm.cuh"): (
        "ENABLE_BF16",
        "ENABLE_FP8",
    ),
}
"""The macros a framework's build adds for the module one file is compiled in, beside
:data:`DEFINES`: FlashInfer's flashinfer/jit/norm.py (gen_norm_module) passes ``-DENABLE_BF16``
and ``-DENABLE_FP8`` as the norm module's extra_cuda_cflags (csrc/norm.cu, which includes
norm.cuh); its other modules pass neither."""
ARCH_DEFINES: dict[str, str] = {
    "sglang": "SGL_CUDA_ARCH",
}
"""The macro each framework's build sets to the target GPU's ``__CUDA_ARCH__`` (900 for
sm_90): SGLang's load_jit() injects ``-DSGL_CUDA_ARCH`` for host and device passes alike
(``sgl_kernel/utils.cuh`` says so and static_asserts it equals ``__CUDA_ARCH__``)."""
STANDARDS: dict[str, str] = {
    "sglang": "c++20",
}
"""The C++ standard a framework's build compiles at where not NVRTC's default (c++17): SGLang's
load_jit() passes ``-std=c++20`` (its headers use concepts and ``std::ranges``)."""
CHECK_DEADLINE_S = 240
"""Seconds the evaluator allows one check (an imported kernel compiles several instantiations)."""
OPTIMIZE_DEADLINE_S = 600
"""Seconds one ``astra optimize`` (no model endpoint) may take: the contract's suites, the
baseline's profile and the report, 9-18 s an operation on the H100 at 001e49a, run several at
once here."""
MODEL_ENDPOINT_VARIABLES = (*API_KEY_VARIABLES, "OPENAI_BASE_URL")
"""Removed from ``astra optimize``'s environment: the column is the run with no model endpoint."""
RESULTS = Path(__file__).resolve().parent / "results"


def build_defines(name: str, arch: str, relative: str = "") -> tuple[str, ...]:
    """The release's build defines for ``arch``: :data:`DEFINES`, those of the module the file
    ``relative`` is compiled in (:data:`FILE_DEFINES`) and its :data:`ARCH_DEFINES`."""
    facts = device_constants(arch, (0, 0))
    cuda_arch = facts["cc_major"] * 100 + facts["cc_minor"] * 10
    by_arch = (f"{ARCH_DEFINES[name]}={cuda_arch}",) if name in ARCH_DEFINES else ()
    return (*DEFINES.get(name, ()), *FILE_DEFINES.get((name, relative), ()), *by_arch)


def _validated(folder: Path) -> tuple[bool, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        code = astra(["validate", str(folder)])
    failed = [ln for ln in out.getvalue().splitlines() if ln.startswith("FAIL")]
    return code == 0, (failed[0] if failed else "")


def _optimized(folder: Path, runs: Path) -> tuple[str, str]:
    """``astra optimize FOLDER`` with no model endpoint, in a process of its own (a hang or a
    crash costs one row, not the table): its outcome (``offline`` when it completed) and, where
    it did not complete, the last line it wrote to stderr."""
    command = [sys.executable, "-m", "astra_graph", "optimize", str(folder), "--json"]
    command += ["--runs-dir", str(runs)]
    env = {k: v for k, v in os.environ.items() if k not in MODEL_ENDPOINT_VARIABLES}
    try:
        done = subprocess.run(
            command, capture_output=True, text=True, timeout=OPTIMIZE_DEADLINE_S, env=env
        )
    except subprocess.TimeoutExpired:
        return "failed", f"did not end within {OPTIMIZE_DEADLINE_S} s"
    try:
        result = json.loads(done.stdout)
    except json.JSONDecodeError:
        lines = done.stderr.strip().splitlines()
        return "failed", f"exit {done.returncode}: {lines[-1] if lines else 'no output'}"
    if result.get("status") != "finished":
        return "failed", f"{result.get('status')}: {result.get('error') or result.get('message')}"
    return str(result.get("agents")), ""


def _check_chunk(folders: list[str]) -> list[tuple[bool, str]]:
    """Each operation checked against itself (the original as candidate and as baseline), in
    one evaluator: accepted, or the verdict's message."""
    from astra_graph.harness.evaluator import Evaluator
    from astra_graph.kernel.contract import load_contract

    verdicts: list[tuple[bool, str]] = []
    with Evaluator(deadline_s=CHECK_DEADLINE_S) as evaluator:
        for name in folders:
            folder = Path(name)
            production = folder / "production.cu"
            try:
                verdict = evaluator.check(load_contract(folder), production, production)
                accepted, message = bool(verdict.accepted), verdict.message
            except Exception as exc:  # one operation's error is its row's, not the table's
                accepted, message = False, f"{type(exc).__name__}: {exc}"
            verdicts.append((accepted, "" if accepted else message))
            print(f"  checked {folder.name}: {'accepted' if accepted else message}")
    return verdicts


def _chunks(items: list[str], jobs: int) -> list[list[str]]:
    """``items`` dealt round-robin into at most ``jobs`` non-empty lists."""
    return [items[i::jobs] for i in range(min(jobs, len(items)))]


def _check_on_gpu(rows: list[dict[str, Any]], jobs: int) -> None:
    """The validated rows checked, ``jobs`` evaluators at once (each a process of its own with
    its own CUDA context: correctness checks only, so sharing the GPU changes no verdict)."""
    todo = [row for row in rows if row.get("validated")]
    parts = _chunks([str(row["folder"]) for row in todo], jobs)
    with ProcessPoolExecutor(max_workers=max(1, len(parts))) as pool:
        results = list(pool.map(_check_chunk, parts))
    for i, part in enumerate(results):
        for j, (accepted, message) in enumerate(part):
            row = todo[i + j * len(parts)]
            row["checked"], row["check_message"] = accepted, message


def _optimize_all(rows: list[dict[str, Any]], runs: Path, jobs: int) -> None:
    """``astra optimize`` (no model endpoint) on each checked operation, ``jobs`` at once. The
    column says whether it completed, not how fast: an import declares no tunables, and runs
    sharing one GPU would time each other."""
    todo = [row for row in rows if row.get("checked")]
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        outcomes = pool.map(_optimized, [Path(row["folder"]) for row in todo], [runs] * len(todo))
        for row, (outcome, why) in zip(todo, outcomes, strict=True):
            row["optimize"], row["optimize_failure"] = outcome, why
            print(f"  optimized {Path(row['folder']).name}: {outcome} {why}".rstrip())


def _commit() -> str:
    """This tree's commit, short; ``ASTRA_GIT_COMMIT`` where it is set (a copy of the tree whose
    ``.git`` is stale, as on the GPU machines: a run there was stamped with an older commit)."""
    return (git_commit() or "unknown")[:7]


def _device() -> str:
    try:
        import cupy

        return str(cupy.cuda.runtime.getDeviceProperties(0)["name"].decode())
    except Exception:  # no CuPy or no GPU: the import and validate columns still stand
        return "cpu"


def _not_fetched(name: str, relative: str, reason: str) -> dict[str, Any]:
    """A row for a file whose release could not be fetched (counted as not imported)."""
    return _site_row(name, relative, "-", False, f"release not fetched: {reason}")


def _import_rows(
    name: str, root: Path, folders: list[Path], relative: str, out: Path, arch: str
) -> list[dict[str, Any]]:
    """One file's launch sites imported (not yet validated): a row each."""
    path = root / relative
    if not path.is_file():
        return [_site_row(name, relative, "-", False, "file not in this release")]
    report = import_file(
        path,
        folders,
        out / name / Path(relative).stem,
        arch=arch,
        defines=build_defines(name, arch, relative),
        std=STANDARDS.get(name),
    )
    print(f"{name} {relative}: {report.compiler}, {report.compile_seconds:.1f} s", flush=True)
    if not report.launchers:
        reason = "no host function in the file launches a kernel (the framework's "
        reason += "generated code does)"
        return [_site_row(name, relative, "-", False, reason)]
    rows = []
    for result in report.launchers:
        row = _site_row(name, relative, f"{result.launcher}:{result.line}", result.imported)
        row |= {
            "applicable": result.applicable,
            "reason": result.reason,
            "folder": result.folder,
            "notes": result.notes,
            "validated": None,
            "checked": None,
            "tuner_speedup": None,
        }
        rows.append(row)
    return rows


def _site_row(
    name: str, relative: str, launcher: str, imported: bool, reason: str | None = None
) -> dict[str, Any]:
    return {
        "framework": name,
        "file": relative,
        "launcher": launcher,
        "imported": imported,
        "reason": reason,
    }


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpu", action="store_true", help="also check each op against itself")
    parser.add_argument(
        "--optimize",
        action="store_true",
        help="also run astra optimize (no model endpoint) on each checked op",
    )
    parser.add_argument("--out", default="/tmp/astra-frameworks", help="where ops are written")
    parser.add_argument("--arch", default="sm_90")
    parser.add_argument("--only", help="only the files whose path contains this text")
    parser.add_argument(
        "--limit", type=int, help="validate (and check) only the first N imported operations"
    )
    parser.add_argument(
        "--jobs", type=int, default=1, help="files imported and ops validated at once"
    )
    parser.add_argument(
        "--gpu-jobs",
        type=int,
        default=1,
        help="ops checked and optimized at once (each evaluator holds GPU memory of its own)",
    )
    args = parser.parse_args(argv)
    for flag, value in (("--jobs", args.jobs), ("--gpu-jobs", args.gpu_jobs)):
        if value < 1:
            parser.error(f"{flag} {value}: expected a positive number of processes")
    out = Path(args.out)
    work: list[tuple[str, Path, list[Path], str]] = []
    by_file: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for name, all_files in FILES.items():
        files = [f for f in all_files if not args.only or args.only in f"{name}/{f}"]
        if not files:
            continue  # --only names none of this release's files: nothing to fetch
        try:
            root = fetch(name)
        except RuntimeError as exc:  # offline, or the pinned release is gone: say so per file
            for relative in files:
                by_file[(name, relative)] = [_not_fetched(name, relative, str(exc))]
            print(f"{name}: not fetched: {exc}")
            continue
        folders = include_folders(root, [root / f for f in INCLUDE_ROOTS[name]], None)
        work += [(name, root, folders, relative) for relative in files]
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        futures = {
            (name, relative): pool.submit(
                _import_rows, name, root, folders, relative, out, args.arch
            )
            for name, root, folders, relative in work
        }
        by_file |= {key: future.result() for key, future in futures.items()}
    # the table in FILES' order, whichever file's import ended first
    rows = [
        row for name, files in FILES.items() for f in files for row in by_file.get((name, f), [])
    ]
    came_in = [row for row in rows if row["imported"] and row.get("folder")]
    chosen = came_in if args.limit is None else came_in[: args.limit]
    for row in came_in[len(chosen) :]:
        row["validate_failure"] = "not run (--limit)"
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        for row, (valid, why) in zip(
            chosen, pool.map(_validated, [Path(r["folder"]) for r in chosen]), strict=True
        ):
            row["validated"], row["validate_failure"] = valid, why
    if args.gpu:
        _check_on_gpu(rows, args.gpu_jobs)
    if args.optimize:
        _optimize_all(rows, out / "runs", args.gpu_jobs)
    print(f"{'launcher':<48} {'imported':<60} {'valid':<6} {'checked':<8} {'optimize':<9} tuner")
    for row in rows:
        came_in = "yes" if row["imported"] else f"no: {row['reason']}"[:60]
        if row.get("applicable") is False:
            came_in = f"n/a: {row['reason']}"[:60]
        state = "-" if row.get("checked") is None else ("yes" if row["checked"] else "NO")
        label = f"{row['framework']}/{Path(row['file']).name}:{row['launcher']}"[:48]
        valid = {True: "yes", False: "NO", None: "-"}[row.get("validated")]
        optimized = row.get("optimize") or "-"
        print(f"{label:<48} {came_in:<60} {valid:<6} {state:<8} {optimized:<9} n/a")
    device = _device()
    RESULTS.mkdir(exist_ok=True)
    result_file = RESULTS / f"frameworks-{device.replace(' ', '_')}.json"
    result_file.write_text(
        json.dumps(
            {
                "releases": {r.name: r.version for r in PINNED.values()},
                "commit": _commit(),
                "device": device,
                "arch": args.arch,
                "rows": rows,
            },
            indent=1,
        )
    )
    total = len(rows)
    elsewhere = sum(r.get("applicable") is False for r in rows)
    applicable = total - elsewhere
    imported = sum(bool(r["imported"]) for r in rows)
    validated = sum(bool(r.get("validated")) for r in rows)
    checked = sum(bool(r.get("checked")) for r in rows)
    completed = sum(r.get("optimize") == "offline" for r in rows)
    share = f"{100 * validated / applicable:.0f}%" if applicable else "-"
    print(
        f"{total} launch sites, {elsewhere} not applicable on {args.arch} (other GPUs or "
        f"builds, or dead code): {imported} imported, {validated} validated "
        f"({share} of {applicable}), "
        f"{checked if args.gpu else 'not'} checked on the GPU, "
        f"{completed if args.optimize else 'no'} astra optimize runs completed; {result_file}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
