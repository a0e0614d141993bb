"""Ctrl-C and SIGTERM sent to a real ``astra optimize`` process, then ``--resume`` (issue 26).

Each run is the real command line in its own process (``tests/scripted_astra.py``: the real
model client against the scripted server of ``fake_openai.py``, the real graph and
checkpoints, a scripted harness whose slow calls sleep in a real worker process). The signal
goes in while a phase is in flight: the planning request, the coding request, the
verification (also blocked in one C call on the run's calling thread, as an NVRTC compile
is), the baseline's timing, the candidate's timing, the tuning and compute-sanitizer
(a real ``sleep`` subprocess in its place). The process must stop within a second (exit code 130),
leave ``run.json`` (and the report) ``interrupted`` with the node it stopped at, and print no
result; ``--resume`` must send the interrupted request again, redo nothing that finished and
end ``finished`` with the same held-out-checked result as a run never interrupted.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from astra_graph.loop.state import OptimizationResult
from fake_openai import FakeOpenAI, Scripted, slow, structured, text
from kernel_sources import VECTORIZED, fenced, marked

TESTS = Path(__file__).parent
LAUNCHER = TESTS / "scripted_astra.py"
SLOW_S = 60.0
"""How long the interrupted phase would take: far beyond any wait here, so only the signal can
end it."""
STOP_WITHIN_S = 1.5
"""How long an interrupted process may take to exit: issue 26 asks for one second; 0.03-0.12 s
measured on 2 shared cores (run.json, the report without charts, the killed worker reaped, no
interpreter teardown), the rest is slack for the load of other jobs. A process that waited for
the slow phase would take SLOW_S; one that drew the report's charts, waited out a killed child
or tore down its interpreter, 0.5 s to seconds."""
START_WITHIN_S = 60.0
"""How long the run may take to reach the phase (about 3 s measured; imports dominate)."""
SPEEDUP = 1.3


def _plan() -> Scripted:
    change = {"change": "16-byte loads", "why": "5% of roofline", "expected_effect": "2x"}
    return structured({"summary": "vectorize the loads", "changes": [change]})


def _script(slow_agent: str | None) -> dict[str, list[Scripted]]:
    """One round's replies; the slow agent's first reply hangs and a second answers the
    request the resume sends again."""
    replies = {
        "testing": [structured({"shapes": []})],
        "planning": [_plan()],
        "coding": [text(fenced(marked(VECTORIZED, speedup=SPEEDUP)))],
    }
    if slow_agent is not None:
        first = replies[slow_agent][0]
        replies[slow_agent] = [slow(first, SLOW_S), first]
    return replies


@dataclass(frozen=True)
class Phase:
    name: str
    slow_agent: str | None = None
    slow_call: str | None = None
    node: str = ""
    """What the recorded stopping point must name."""
    sig: signal.Signals = signal.SIGINT
    in_c: bool = False
    """The slow call blocks the run's calling thread in one C call (as an NVRTC compile does)
    rather than waiting on a worker: the handler must still run at once."""


PHASES = [
    Phase("planning request", slow_agent="planning", node="planning"),
    Phase("coding request", slow_agent="coding", node="coding", sig=signal.SIGTERM),
    Phase("verification", slow_call="check", node="candidate"),
    Phase("timing", slow_call="bench", node="profile_baseline"),
    Phase("verification in a C call", slow_call="check", node="candidate", in_c=True),
    Phase("candidate timing", slow_call="measure", node="candidate"),
    Phase("tuning", slow_call="tune", node="tuning"),
    Phase("sanitizer", slow_call="sanitize", node="finalize"),
]


def _astra(server: FakeOpenAI, *args: str, env: dict[str, str]) -> subprocess.Popen[str]:
    command = [sys.executable, str(LAUNCHER), "optimize", *args, "--base-url", server.base_url]
    return subprocess.Popen(
        command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("OPENAI_API_KEY", "ASTRA_API_KEY")}
    source = str(Path(__file__).parents[1] / "src")
    env["PYTHONPATH"] = os.pathsep.join([source, env.get("PYTHONPATH", "")])
    env["ASTRA_CACHE_DIR"] = str(tmp_path / "cache")
    return {**env, **extra}


def _run_dir(runs: Path) -> Path:
    (found,) = [p for p in runs.iterdir() if p.is_dir()]
    return found


def _result(run_dir: Path) -> OptimizationResult:
    return OptimizationResult.model_validate_json((run_dir / "run.json").read_text())


def _wait_for(ready: Callable[[], bool], process: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + START_WITHIN_S
    while not ready() and process.poll() is None:
        assert time.monotonic() < deadline, "the run never reached the phase"
        time.sleep(0.05)
    assert process.poll() is None, f"the run ended before the phase: {process.communicate()}"


def _requests(server: FakeOpenAI) -> dict[str, int]:
    return {a: len(server.for_agent(a, answered=False)) for a in ("testing", "planning", "coding")}


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory: pytest.TempPathFactory) -> tuple[OptimizationResult, dict]:
    tmp_path = tmp_path_factory.mktemp("uninterrupted")
    with FakeOpenAI(_script(None)) as server:
        process = _astra(
            server, "silu_and_mul/naive", "--rounds", "1", "--runs-dir", str(tmp_path / "runs"),
            env=_env(tmp_path),
        )  # fmt: skip
        _, err = process.communicate(timeout=START_WITHIN_S * 2)
        assert process.returncode == 0, err
        return _result(_run_dir(tmp_path / "runs")), _requests(server)


@pytest.mark.parametrize("phase", PHASES, ids=[p.name for p in PHASES])
def test_an_interrupted_run_stops_at_once_and_resumes_where_it_stopped(
    phase: Phase, tmp_path: Path, uninterrupted: tuple[OptimizationResult, dict[str, int]]
) -> None:
    expected, expected_requests = uninterrupted
    runs, started = tmp_path / "runs", tmp_path / "slow-call-started"
    delays = {"ASTRA_FAKE_DELAYS": f"{phase.slow_call}={SLOW_S}"} if phase.slow_call else {}
    in_c = {"ASTRA_FAKE_IN_C": phase.slow_call} if phase.in_c and phase.slow_call else {}
    env = _env(tmp_path, ASTRA_FAKE_SLOW_STARTED=str(started), **delays, **in_c)
    with FakeOpenAI(_script(phase.slow_agent)) as server:
        process = _astra(
            server, "silu_and_mul/naive", "--rounds", "1", "--runs-dir", str(runs), env=env
        )
        if phase.slow_agent is not None:
            agent = phase.slow_agent
            _wait_for(lambda: _requests(server)[agent] == 1, process)
        else:
            _wait_for(started.is_file, process)
        time.sleep(0.2)  # well inside the phase, not at its first instruction
        process.send_signal(phase.sig)
        sent = time.monotonic()
        out, err = process.communicate(timeout=SLOW_S)
        took = time.monotonic() - sent
        print(f"{phase.name}: stopped {took:.2f} s after {phase.sig.name}")
        assert process.returncode == 130, err
        assert took < STOP_WITHIN_S
        assert "result:" not in out and "Traceback" not in err
        (line,) = [x for x in err.splitlines() if x.startswith("astra optimize:")]
        assert "interrupted" in line and "--resume" in line
        run_dir = _run_dir(runs)
        stopped = _result(run_dir)
        assert stopped.status == "interrupted" and stopped.stopped_at is not None
        assert phase.node in stopped.stopped_at.node
        assert stopped.stopped_at.signal == phase.sig.name
        report = (run_dir / "report.md").read_text()
        assert "interrupted" in report and "astra report" in report  # charts left for later
        assert not list(run_dir.glob("report.*.png"))
        assert not (run_dir / "best.cu").exists()

        resumed = _astra(server, "--resume", str(run_dir), env=_env(tmp_path))
        out, err = resumed.communicate(timeout=START_WITHIN_S * 2)
        assert resumed.returncode == 0, err
        requests = _requests(server)
    final = _result(run_dir)
    assert final.status == "finished" and final.stopped_at is None
    assert final.heldout is not None and final.heldout.accepted
    assert (run_dir / "best.cu").is_file()
    assert final.geomean_speedup == pytest.approx(expected.geomean_speedup)
    assert final.best_source == expected.best_source
    assert [r.verdict for r in final.rounds] == [r.verdict for r in expected.rounds]
    # the interrupted request was sent once more; nothing that had finished was asked again
    again = {a: int(a == phase.slow_agent) for a in expected_requests}
    assert requests == {a: n + again[a] for a, n in expected_requests.items()}


def test_ctrl_c_stops_several_runs_at_once_and_each_says_where(tmp_path: Path) -> None:
    """``astra optimize K1 K2`` runs each kernel in a thread, which signals never reach: the
    command cancels them all, and each run directory is saved ``interrupted``."""
    script = _script("coding")
    script["coding"] = [script["coding"][0], *script["coding"]]  # both runs' requests held back
    runs = tmp_path / "runs"
    with FakeOpenAI(script) as server:
        process = _astra(
            server, "silu_and_mul/naive", "silu_and_mul/production", "--rounds", "1",
            "--runs-dir", str(runs), env=_env(tmp_path),
        )  # fmt: skip
        _wait_for(lambda: _requests(server)["coding"] == 2, process)
        time.sleep(0.2)
        process.send_signal(signal.SIGINT)
        sent = time.monotonic()
        _, err = process.communicate(timeout=SLOW_S)
        took = time.monotonic() - sent
    print(f"two runs: stopped {took:.2f} s after SIGINT")
    assert process.returncode == 130, err
    assert took < STOP_WITHIN_S and "Traceback" not in err
    stopped = [_result(p) for p in runs.iterdir() if p.is_dir()]
    assert len(stopped) == 2
    for result in stopped:
        assert result.status == "interrupted" and result.stopped_at is not None
        assert "coding" in result.stopped_at.node


def test_a_best_of_k_resume_redoes_only_the_interrupted_candidate(tmp_path: Path) -> None:
    """K=2: one branch has finished (coded, verified, timed) when the other's coding request is
    interrupted; the resume sends that one request again and keeps the finished branch."""
    plan = json.loads(_plan().content or "{}")
    fast = text(fenced(marked(VECTORIZED, speedup=1.2)))
    held = text(fenced(marked(VECTORIZED, speedup=SPEEDUP)))
    script = {
        "testing": [structured({"shapes": []})],
        "planning": [structured({"plans": [plan, plan]})],
        "coding": [fast, slow(held, SLOW_S), held],
    }
    runs = tmp_path / "runs"
    with FakeOpenAI(script) as server:
        process = _astra(
            server, "silu_and_mul/naive", "--rounds", "1", "--candidates", "2",
            "--runs-dir", str(runs), env=_env(tmp_path),
        )  # fmt: skip
        _wait_for(lambda: _requests(server)["coding"] == 2, process)
        run_dir = runs / next(p.name for p in runs.iterdir() if p.is_dir())
        # the fast branch has ended once its timing is on disk
        _wait_for(lambda: any(run_dir.glob("rounds/1/candidates/*/bench.json")), process)
        process.send_signal(signal.SIGINT)
        _, err = process.communicate(timeout=SLOW_S)
        assert process.returncode == 130, err
        stopped = _result(run_dir)
        assert stopped.status == "interrupted" and stopped.stopped_at is not None
        resumed = _astra(server, "--resume", str(run_dir), env=_env(tmp_path))
        _, err = resumed.communicate(timeout=START_WITHIN_S * 2)
        assert resumed.returncode == 0, err
        assert _requests(server)["coding"] == 3  # the interrupted request, once more
    final = _result(run_dir)
    assert final.status == "finished" and final.heldout is not None and final.heldout.accepted
    (record,) = final.rounds
    speedups = sorted(c.geomean_speedup or 0 for c in record.candidates)
    assert speedups == pytest.approx([1.2, SPEEDUP])
    assert final.geomean_speedup == pytest.approx(SPEEDUP)
