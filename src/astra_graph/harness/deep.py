"""Deep checks where the host has NVIDIA's tools: compute-sanitizer and Nsight Compute.

Both run a small launcher in a child process (``python -m astra_graph.harness.deep``) that
compiles the implementation, builds one random case per shape and launches the kernel once per
shape. The launcher allocates every array with its own ``cudaMalloc`` (CuPy's pool disabled), so
that an access just past an array lands outside any allocation where memcheck can see it.

* :func:`sanitize` runs memcheck and racecheck on one or two small shapes.
* :func:`profile` gathers a short Nsight Compute metric set per shape (duration, DRAM throughput,
  achieved occupancy, the top warp stall reasons) with ``--clock-control none``, so clocks are
  those of normal runs.

A missing tool is not an error: the result says so in one line (``available=False``).
Every tool runs through :func:`run_tool`, which an interrupted run stops within a second.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import glob
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from pydantic import BaseModel

from astra_graph.harness.worker import CANCEL_POLL_S, CANCEL_REAP_S, JobCancelled, jobs_cancelled
from astra_graph.kernel.contract import OperationSpec

SANITIZER_TOOLS = ("memcheck", "racecheck")
TOOL_TIMEOUT_S = 300
MAX_ERROR_LINES = 8
TOP_STALLS = 3
API_ERRORS_OFF = ("--report-api-errors", "no")
"""The launcher reports its own failed launches; CuPy's probing API calls are not kernel bugs."""
SMALL_SHAPE_BYTES = 4 << 20
"""Shapes for the sanitizer move at most this many bytes (it slows kernels 10-100x)."""

_DRAM_METRIC = "dram__throughput.avg.pct_of_peak_sustained_elapsed"
_DRAM = re.compile(r"^(gpu__dram_|dram__)throughput\.avg\.pct_of_peak_sustained_elapsed$")
_OCCUPANCY = "sm__warps_active.avg.pct_of_peak_sustained_active"
_DURATION = "gpu__time_duration.sum"
_STALL = re.compile(r"^smsp__average_warps_issue_stalled_(?P<reason>\w+?)_per_issue_active\.ratio$")
_ERROR_SUMMARY = re.compile(r"ERROR SUMMARY: (?P<n>\d+) error")
_PROBLEM = re.compile(r"(Invalid|Program hit|Error|Race|Warning|Uninitialized|Barrier|.*hazard)")
_RACE_SUMMARY = re.compile(r"RACECHECK SUMMARY: \d+ hazards? displayed \((?P<n>\d+) error")


class SanitizerResult(BaseModel):
    tool: str
    available: bool = True
    ok: bool = False
    errors: int = 0
    summary: str
    """One line for people and prompts."""
    first_errors: list[str] = []


class SanitizerReport(BaseModel):
    """compute-sanitizer's verdicts on one implementation (one result per tool)."""

    results: list[SanitizerResult]

    @property
    def available(self) -> bool:
        return all(r.available for r in self.results)

    @property
    def ok(self) -> bool:
        """Every tool ran and found nothing (False also when a tool is missing)."""
        return bool(self.results) and all(r.ok for r in self.results)

    @property
    def summary(self) -> str:
        return "; ".join(r.summary for r in self.results)


class Stall(BaseModel):
    reason: str
    """Nsight Compute's stall reason, e.g. ``long_scoreboard`` (waiting on global memory)."""
    warps_per_issue: float
    """Average warps stalled for this reason per issued instruction."""


class KernelProfile(BaseModel):
    label: str
    duration_us: float | None = None
    dram_throughput_pct: float | None = None
    achieved_occupancy_pct: float | None = None
    top_stalls: list[Stall] = []


class ProfileResult(BaseModel):
    available: bool = True
    ok: bool = False
    summary: str
    kernels: list[KernelProfile] = []


def find_tool(name: str) -> str | None:
    """The tool's path: PATH, then ``$CUDA_HOME/bin``, the usual CUDA and Nsight folders."""
    found = shutil.which(name)
    if found:
        return found
    roots = [os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"]
    candidates = [Path(r) / "bin" / name for r in roots if r]
    candidates += [Path(p) for p in sorted(glob.glob(f"/usr/local/cuda*/bin/{name}"), reverse=True)]
    candidates += [
        Path(p) for p in sorted(glob.glob(f"/opt/nvidia/nsight-compute/*/{name}"), reverse=True)
    ]
    for path in candidates:
        if path.is_file() and os.access(path, os.X_OK):
            return str(path)
    return None


def small_shapes(spec: OperationSpec, dtype: str, count: int = 2) -> list[dict[str, int]]:
    """Up to ``count`` small shapes: the smallest edge shape and the smallest tuning shape."""
    contract = spec.contract
    picked: list[dict[str, int]] = []
    for suite in ("edge", "tuning", "heldout"):
        shapes = sorted(contract.suite(suite), key=lambda d: contract.bytes_for(d, dtype))
        for dims in shapes:
            if dims not in picked and contract.bytes_for(dims, dtype) <= SMALL_SHAPE_BYTES:
                picked.append(dims)
                break
        if len(picked) >= count:
            break
    return picked or [min(contract.suite("tuning"), key=lambda d: contract.bytes_for(d, dtype))]


def launcher_command(
    op_folder: Path,
    impl: Path,
    dtype: str,
    shapes: Sequence[Mapping[str, int]],
    tunables: Mapping[str, int] | None = None,
) -> list[str]:
    return [
        sys.executable,
        "-m",
        "astra_graph.harness.deep",
        "--op-folder",
        str(op_folder),
        "--impl",
        str(impl),
        "--dtype",
        dtype,
        "--shapes",
        json.dumps([dict(s) for s in shapes]),
        "--tunables",
        json.dumps(dict(tunables or {})),
    ]


def run_tool(command: list[str], timeout: float) -> tuple[int | None, str]:
    """Run a tool to its end: (exit code, or None on timeout; stdout and stderr together).

    The tool runs in its own process group, killed whole (the launcher it starts included) on
    a timeout or when the run is interrupted (:func:`~astra_graph.harness.worker.cancel_jobs`,
    polled every ``CANCEL_POLL_S``; then JobCancelled). ``subprocess.run`` could do neither: in a
    graph node's thread it would outlast a Ctrl-C by up to the timeout, and kill only the tool.
    Output goes to a temporary file, so a chatty tool never fills a pipe nobody reads."""
    with tempfile.TemporaryFile() as output:
        process = subprocess.Popen(
            command, stdout=output, stderr=subprocess.STDOUT, start_new_session=True
        )
        deadline = time.monotonic() + timeout
        try:
            while True:
                try:
                    code: int | None = process.wait(CANCEL_POLL_S)
                    break
                except subprocess.TimeoutExpired:
                    pass
                if jobs_cancelled():
                    raise JobCancelled(f"{command[0]}: cancelled, the run was interrupted")
                if time.monotonic() >= deadline:
                    code = None
                    break
        finally:
            _kill_group(process)
        output.seek(0)
        return code, output.read().decode(errors="replace")


def _kill_group(process: subprocess.Popen[bytes]) -> None:
    """SIGKILL the tool's process group (a no-op once all of it has exited); reap the tool."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(CANCEL_REAP_S)


def parse_sanitizer(tool: str, returncode: int | None, output: str) -> SanitizerResult:
    lines = [line.removeprefix("=========").strip() for line in output.splitlines()]
    summary = _RACE_SUMMARY if tool == "racecheck" else _ERROR_SUMMARY
    counts = [int(m["n"]) for m in map(summary.search, lines) if m]
    if tool == "racecheck" and not counts:
        counts = [int(m["n"]) for m in map(_ERROR_SUMMARY.search, lines) if m]
    problems = [line for line in lines if _PROBLEM.match(line) and "SUMMARY" not in line]
    if returncode is None:
        return SanitizerResult(
            tool=tool, summary=f"{tool}: timed out", first_errors=problems[:MAX_ERROR_LINES]
        )
    errors = max(counts) if counts else 0
    if not counts:
        tail = next((line for line in reversed(lines) if line), "no output")
        return SanitizerResult(
            tool=tool,
            summary=f"{tool}: no summary from compute-sanitizer (exit {returncode}): {tail}",
            first_errors=problems[:MAX_ERROR_LINES],
        )
    ok = errors == 0 and returncode == 0
    what = "no errors" if errors == 0 else f"{errors} error(s): {problems[0] if problems else ''}"
    if errors == 0 and returncode != 0:
        what = f"launcher failed (exit {returncode}): {_last_line(output)}"
    return SanitizerResult(
        tool=tool,
        ok=ok,
        errors=errors,
        summary=f"{tool}: {what}".rstrip(": "),
        first_errors=problems[:MAX_ERROR_LINES],
    )


def _last_line(output: str) -> str:
    lines = [line for line in output.splitlines() if line.strip() and "=====" not in line]
    return lines[-1].strip() if lines else "no output"


def sanitize(
    spec: OperationSpec,
    impl: Path,
    dtype: str,
    shapes: Sequence[Mapping[str, int]] | None = None,
    tunables: Mapping[str, int] | None = None,
    tools: Sequence[str] = SANITIZER_TOOLS,
    timeout: float = TOOL_TIMEOUT_S,
) -> list[SanitizerResult]:
    """compute-sanitizer's tools over a launch of each small shape."""
    exe = find_tool("compute-sanitizer")
    if exe is None:
        return [
            SanitizerResult(
                tool=t, available=False, summary=f"{t}: compute-sanitizer not found, skipped"
            )
            for t in tools
        ]
    shapes = list(shapes or small_shapes(spec, dtype))
    launcher = launcher_command(spec.folder, impl, dtype, shapes, tunables)
    results = []
    for tool in tools:
        command = [exe, "--tool", tool, "--error-exitcode", "99", *API_ERRORS_OFF, *launcher]
        code, output = run_tool(command, timeout)
        results.append(parse_sanitizer(tool, code, output))
    return results


def _number(text: str) -> float | None:
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return None


def parse_ncu_csv(output: str, labels: Sequence[str]) -> list[KernelProfile]:
    """Metrics per profiled launch from ``ncu --csv --page raw --print-units base`` output."""
    lines = output.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith('"ID"')), None)
    if start is None:
        return []
    rows = list(csv.reader(lines[start:]))
    header, body = rows[0], [r for r in rows[1:] if len(r) == len(rows[0])]
    data = [r for r in body if r[0].strip().isdigit()]
    units = next((r for r in body if not r[0].strip()), [""] * len(header))
    profiles = []
    for index, row in enumerate(data):
        values = dict(zip(header, row, strict=True))
        unit = dict(zip(header, units, strict=True))
        profile = KernelProfile(label=labels[index] if index < len(labels) else f"launch {index}")
        if _DURATION in values:
            duration = _number(values[_DURATION])
            scale = {"nsecond": 1e-3, "usecond": 1.0, "msecond": 1e3}.get(unit[_DURATION], 1e-3)
            profile.duration_us = None if duration is None else duration * scale
        dram = next((k for k in header if _DRAM.search(k)), None)
        if dram:
            profile.dram_throughput_pct = _number(values[dram])
        if _OCCUPANCY in values:
            profile.achieved_occupancy_pct = _number(values[_OCCUPANCY])
        stalls = []
        for key, text in values.items():
            match = _STALL.match(key)
            value = _number(text)
            if match and value is not None and match["reason"] not in ("selected", "not_selected"):
                stalls.append(Stall(reason=match["reason"], warps_per_issue=value))
        stalls.sort(key=lambda s: s.warps_per_issue, reverse=True)
        profile.top_stalls = stalls[:TOP_STALLS]
        profiles.append(profile)
    return profiles


def profile(
    spec: OperationSpec,
    impl: Path,
    dtype: str,
    shapes: Sequence[Mapping[str, int]],
    kernel_name: str,
    tunables: Mapping[str, int] | None = None,
    timeout: float = TOOL_TIMEOUT_S,
) -> ProfileResult:
    """Nsight Compute's speed-of-light, occupancy and warp-state metrics, one launch per shape."""
    exe = find_tool("ncu")
    if exe is None:
        return ProfileResult(available=False, summary="ncu: Nsight Compute not found, skipped")
    command = [
        exe,
        "--clock-control",
        "none",
        "--kernel-name",
        f"regex:^{re.escape(kernel_name)}",
        "--kernel-name-base",
        "function",
        "--launch-count",
        str(len(shapes)),
        "--section",
        "SpeedOfLight",
        "--section",
        "Occupancy",
        "--section",
        "WarpStateStats",
        "--metrics",
        f"{_DURATION},{_DRAM_METRIC},{_OCCUPANCY}",
        "--csv",
        "--page",
        "raw",
        "--print-units",
        "base",
        *launcher_command(spec.folder, impl, dtype, shapes, tunables),
    ]
    code, output = run_tool(command, timeout)
    labels = [spec.contract.label(s) for s in shapes]
    kernels = parse_ncu_csv(output, labels)
    if code is None:
        return ProfileResult(summary="ncu: timed out", kernels=kernels)
    if not kernels:
        return ProfileResult(summary=f"ncu: no metrics (exit {code}): {_last_line(output)}")
    parts = []
    for k in kernels:
        stalls = ", ".join(s.reason for s in k.top_stalls) or "?"
        parts.append(
            f"{k.label}: DRAM {k.dram_throughput_pct or 0:.0f}%, "
            f"occupancy {k.achieved_occupancy_pct or 0:.0f}%, stalls {stalls}"
        )
    return ProfileResult(ok=code == 0, summary="ncu: " + "; ".join(parts), kernels=kernels)


# --- the launcher the tools run --------------------------------------------------------------


def launch_main(argv: Sequence[str] | None = None) -> int:
    """Launch an implementation once per shape on fresh random inputs; 3 when a launch fails."""
    parser = argparse.ArgumentParser(prog="python -m astra_graph.harness.deep")
    parser.add_argument("--op-folder", required=True, type=Path)
    parser.add_argument("--impl", required=True, type=Path)
    parser.add_argument("--dtype", required=True)
    parser.add_argument("--shapes", required=True, help="JSON list of dims")
    parser.add_argument("--tunables", default="{}", help="JSON object")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    import cupy

    from astra_graph.harness.cases import make_case
    from astra_graph.harness.launch import LaunchError, load_kernel, synchronize
    from astra_graph.kernel.contract import load_contract
    from astra_graph.kernel.header import load_implementation

    cupy.cuda.set_allocator(None)  # one cudaMalloc per array: overruns leave the allocation
    spec = load_contract(args.op_folder)
    impl = load_implementation(args.impl, spec.contract)
    kernel = load_kernel(spec, impl, args.dtype, json.loads(args.tunables))
    rng = cupy.random.default_rng(args.seed)
    for dims in json.loads(args.shapes):
        case = make_case(spec, dims, args.dtype, rng)
        synchronize()
        try:
            kernel.launch(case)
            synchronize()
        except LaunchError as exc:
            print(f"launch failed for {spec.contract.label(dims)}: {exc}", file=sys.stderr)
            return 3
    return 0


if __name__ == "__main__":
    sys.exit(launch_main())
