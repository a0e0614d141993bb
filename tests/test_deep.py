"""Parsing of compute-sanitizer and Nsight Compute output, and missing tools (no GPU needed)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from astra_graph.harness import deep
from astra_graph.harness.worker import (
    CANCEL_POLL_S,
    CANCEL_REAP_S,
    JobCancelled,
    allow_jobs,
    cancel_jobs,
)
from astra_graph.kernel.contract import load_contract

SILU = Path(__file__).resolve().parents[1] / "kernels" / "silu_and_mul"

MEMCHECK_CLEAN = """\
========= COMPUTE-SANITIZER
========= ERROR SUMMARY: 0 errors
"""
MEMCHECK_BAD = """\
========= COMPUTE-SANITIZER
========= Invalid __global__ read of size 16 bytes
=========     at silu_and_mul_vec<__half>(__half *, const __half *, int)+0x1a0
=========     by thread (3,0,0) in block (0,0,0)
=========     Address 0x7f0000000400 is out of bounds
========= ERROR SUMMARY: 2 errors
"""
RACECHECK_BAD = """\
========= COMPUTE-SANITIZER
========= Error: Race reported between Write access at k(float*)+0x90
=========     and Read access at k(float*)+0xa0 [128 hazards]
========= RACECHECK SUMMARY: 1 hazard displayed (1 error, 0 warnings)
"""


def test_clean_memcheck_is_ok() -> None:
    result = deep.parse_sanitizer("memcheck", 0, MEMCHECK_CLEAN)
    assert result.ok and result.errors == 0
    assert result.summary == "memcheck: no errors"


def test_memcheck_errors_are_counted_and_quoted() -> None:
    result = deep.parse_sanitizer("memcheck", 99, MEMCHECK_BAD)
    assert not result.ok and result.errors == 2
    assert result.first_errors[0].startswith("Invalid __global__ read of size 16")
    assert "2 error(s)" in result.summary


def test_racecheck_summary_is_read() -> None:
    result = deep.parse_sanitizer("racecheck", 99, RACECHECK_BAD)
    assert not result.ok and result.errors == 1
    assert result.first_errors[0].startswith("Error: Race reported")


def test_a_failing_launcher_is_not_a_clean_result() -> None:
    result = deep.parse_sanitizer("memcheck", 3, MEMCHECK_CLEAN + "launch failed for 1x8: boom\n")
    assert not result.ok
    assert "launch failed for 1x8" in result.summary
    timed_out = deep.parse_sanitizer("memcheck", None, "")
    assert not timed_out.ok and "timed out" in timed_out.summary
    silent = deep.parse_sanitizer("memcheck", 1, "Traceback: no module\n")
    assert not silent.ok and "no summary" in silent.summary


NCU_CSV = """\
==PROF== Connected to process 123
==PROF== Profiling "silu_and_mul_vec": 0%....50%....100% - 9 passes
"ID","Process ID","Kernel Name","gpu__time_duration.sum",\
"gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed","sm__warps_active.avg.pct_of_peak_sustained_active",\
"smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio",\
"smsp__average_warps_issue_stalled_selected_per_issue_active.ratio",\
"smsp__average_warps_issue_stalled_wait_per_issue_active.ratio",\
"smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio"
"","","","nsecond","%","%","","","",""
"0","123","silu_and_mul_vec","2,048","61.5","88.2","12.5","1","0.7","3.25"
"1","123","silu_and_mul_vec","512000","91","95","20","1","0.5","0"
"""


def test_ncu_csv_gives_metrics_per_launch() -> None:
    kernels = deep.parse_ncu_csv(NCU_CSV, ["16x4096", "8192x12288"])
    assert [k.label for k in kernels] == ["16x4096", "8192x12288"]
    first = kernels[0]
    assert first.duration_us == pytest.approx(2.048)
    assert first.dram_throughput_pct == pytest.approx(61.5)
    assert first.achieved_occupancy_pct == pytest.approx(88.2)
    assert [s.reason for s in first.top_stalls] == ["long_scoreboard", "barrier", "wait"]
    assert kernels[1].duration_us == pytest.approx(512.0)
    assert deep.parse_ncu_csv("==ERROR== no kernels were profiled", ["x"]) == []


def test_missing_tools_say_so_in_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(deep, "find_tool", lambda name: None)
    spec = load_contract(SILU)
    results = deep.sanitize(spec, SILU / "production.cu", "float16")
    assert [r.tool for r in results] == ["memcheck", "racecheck"]
    assert all(not r.available and "not found" in r.summary for r in results)
    prof = deep.profile(spec, SILU / "production.cu", "float16", [{"tokens": 1, "d": 8}], "k")
    assert not prof.available and prof.summary == "ncu: Nsight Compute not found, skipped"


def test_small_shapes_are_small_and_from_the_contract() -> None:
    spec = load_contract(SILU)
    shapes = deep.small_shapes(spec, "float16")
    assert 1 <= len(shapes) <= 2
    for dims in shapes:
        assert spec.contract.shape_problem(dims) is None
        assert spec.contract.bytes_for(dims, "float16") <= deep.SMALL_SHAPE_BYTES


def test_launcher_command_runs_this_module(tmp_path: Path) -> None:
    command = deep.launcher_command(tmp_path, tmp_path / "k.cu", "float16", [{"tokens": 1}])
    assert command[1:3] == ["-m", "astra_graph.harness.deep"]
    assert command[command.index("--shapes") + 1] == '[{"tokens": 1}]'


def test_a_tool_is_killed_with_its_children_when_the_run_is_interrupted(tmp_path: Path) -> None:
    """compute-sanitizer runs a launcher of its own: an interrupt must end both within a poll,
    not after the tool's timeout (issue 26: a sanitizer step held a stopped run for 10 s+)."""
    child_pid = tmp_path / "child.pid"
    script = f"sleep 60 & echo $! > {child_pid}; wait"
    raised: list[BaseException] = []

    def run() -> None:
        try:
            deep.run_tool(["sh", "-c", script], timeout=120)
        except BaseException as exc:  # the test reads what the thread got
            raised.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    try:
        deadline = time.monotonic() + 30
        while not child_pid.is_file() or not child_pid.read_text().strip():
            assert time.monotonic() < deadline, "the tool never started its child"
            time.sleep(0.02)
        cancel_jobs()
        sent = time.monotonic()
        thread.join(timeout=30)
        stopped_after = time.monotonic() - sent
    finally:
        allow_jobs()
    assert len(raised) == 1 and isinstance(raised[0], JobCancelled)
    assert stopped_after < CANCEL_POLL_S + CANCEL_REAP_S + 0.5  # poll, reap, scheduler slack
    assert not _running(int(child_pid.read_text()))  # the launcher went with the tool


def test_a_tool_past_its_timeout_is_killed_and_reports_none() -> None:
    code, output = deep.run_tool(["sh", "-c", "echo started; sleep 60"], timeout=0.3)
    assert code is None and "started" in output


def test_a_tool_that_ends_gives_its_exit_code_and_output() -> None:
    code, output = deep.run_tool(["sh", "-c", "echo out; echo err >&2; exit 3"], timeout=30)
    assert code == 3 and "out" in output and "err" in output


def _running(pid: int) -> bool:
    """Whether ``pid`` is alive (a zombie, killed and waiting for init to reap it, is not)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"
