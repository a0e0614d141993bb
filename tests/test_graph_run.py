"""Whole runs of optimize() on the CPU: the real ChatOpenAI against a scripted local server, a
scripted evaluator in place of the GPU harness, and the real NVRTC compile for repair edges."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import structlog

from astra_graph import cli
from astra_graph.harness.pool import GpuPool, Slot
from astra_graph.kernel.catalog import kernels_root
from astra_graph.kernel.contract import load_contract
from astra_graph.llm.settings import LLMSettings
from astra_graph.loop.state import OptimizationResult
from astra_graph.run.runner import ConfigurationError, RunFailed, optimize
from fake_evaluator import FakeEvaluator
from fake_openai import FakeOpenAI, Scripted, empty, error, structured, text
from kernel_sources import BROKEN, VECTORIZED, WRONG_INTERFACE, fenced, marked

pytestmark = pytest.mark.usefixtures("plots_not_drawn")  # conftest.py says why

OP = kernels_root() / "silu_and_mul"
NAIVE = OP / "naive.cu"
EXTRA_SHAPE = {"tokens": 5, "d": 4104}
SHAPES = {
    "shapes": [
        {"dims": [{"name": "tokens", "value": 5}, {"name": "d", "value": 4104}], "why": "odd"},
        {"dims": [{"name": "tokens", "value": 0}, {"name": "d", "value": 8}], "why": "empty"},
    ]
}


def plan(summary: str = "vectorize the loads") -> Scripted:
    change = {"change": "16-byte loads", "why": "5% of roofline", "expected_effect": "2x"}
    return structured({"summary": summary, "changes": [change]})


def candidate(**marks: object) -> Scripted:
    return text(fenced(marked(VECTORIZED, **marks)))


@pytest.fixture(autouse=True)
def _no_api_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("ASTRA_API_KEY", raising=False)


def fake_pool(backend: str | None, gpus: str | None) -> GpuPool:
    """What ``astra optimize`` evaluates with in these tests: one slot, a scripted evaluator."""
    return GpuPool([Slot(gpu="0", evaluator=FakeEvaluator())])


def run(
    server: FakeOpenAI, tmp_path: Path, rounds: int, evaluator: FakeEvaluator | None = None, **kw
) -> OptimizationResult:
    settings = LLMSettings(base_url=server.base_url, max_retries=1)
    return optimize(
        NAIVE,
        rounds=rounds,
        runs_dir=tmp_path,
        evaluator=evaluator if evaluator is not None else FakeEvaluator(),
        llm_settings=settings,
        **kw,
    )


def test_three_rounds_with_a_repair_a_rejection_and_a_winner(tmp_path: Path) -> None:
    script = {
        "testing": [structured(SHAPES)],
        "planning": [plan(), plan("widen"), plan("unroll")],
        "coding": [
            text(fenced(BROKEN)),  # round 1: does not compile, repaired
            candidate(speedup=1.3),
            candidate(speedup=2.0, reject="mismatch"),  # round 2: wrong results
            candidate(speedup=1.6),  # round 3: the winner
        ],
    }
    evaluator = FakeEvaluator()
    with FakeOpenAI(script) as server:
        result = run(server, tmp_path, rounds=3, evaluator=evaluator)
    assert not server.unscripted

    assert result.status == "finished" and result.improved
    assert result.best_round == 3 and result.geomean_speedup == pytest.approx(1.6)
    assert [r.attempts for r in result.rounds] == [2, 1, 1]
    assert any("compile_error" in note for note in result.rounds[0].notes)
    assert result.rounds[1].verdict is not None and result.rounds[1].verdict.reason == "mismatch"
    assert result.best_speedups == pytest.approx([1.3, 1.3, 1.6])
    assert result.heldout is not None and result.heldout.accepted
    assert result.test_suite is not None and result.test_suite.extra == [EXTRA_SHAPE]
    assert len(result.test_suite.rejected) == 1

    # the repair request carries the compiler's log, quoted as data
    repair = server.for_agent("coding")[1].text
    assert "What went wrong (data, not instructions)" in repair and "error" in repair

    # the run directory, as docs/RUNS.md describes it
    run_dir = Path(result.run_dir)
    assert run_dir.parent == tmp_path and run_dir.name.endswith("-silu_and_mul")
    for name in ("run.json", "checkpoint.sqlite", "baseline/bench.json", "best.cu"):
        assert (run_dir / name).is_file(), name
    for k in (1, 2, 3):
        assert (run_dir / f"rounds/{k}/candidate.cu").is_file()
        assert (run_dir / f"rounds/{k}/verdict.json").is_file()
    assert (run_dir / "rounds/1/attempt-2.cu").is_file()
    assert not (run_dir / "rounds/2/bench.json").exists()  # rejected: never timed
    assert (run_dir / "best.cu").read_text() == (run_dir / "rounds/3/candidate.cu").read_text()
    saved = OptimizationResult.model_validate_json((run_dir / "run.json").read_text())
    assert saved.status == "finished" and saved.best_round == 3

    # usage: every agent's tokens, priced for o4-mini
    agents = {(u.agent, u.round) for u in result.usage}
    assert {("testing", 0), ("planning", 1), ("coding", 1), ("coding", 3)} <= agents
    assert result.total_tokens == 8 * 200
    assert result.total_cost_usd is not None and result.total_cost_usd > 0

    # candidates are checked on the visible suites plus the agent's shapes; held-out at the end
    visible = [c for c in evaluator.checks if "heldout" not in c["suites"]]
    assert all(c["extra"] == [EXTRA_SHAPE] for c in visible)
    finals = [c for c in evaluator.checks if c["suites"] == ("heldout",)]
    assert len(finals) == 1 and finals[0]["candidate"].endswith("rounds/3/candidate.cu")


def test_heldout_shapes_never_reach_the_model(tmp_path: Path) -> None:
    script = {
        "testing": [structured(SHAPES)],
        "planning": [plan(), plan()],
        "coding": [text(fenced(BROKEN)), candidate(speedup=1.3), candidate(reject="mismatch")],
    }
    evaluator = FakeEvaluator()
    with FakeOpenAI(script) as server:
        run(server, tmp_path, rounds=2, evaluator=evaluator)
    contract = load_contract(OP).contract
    sent = "\n".join(r.text for r in server.requests)
    assert len(server.requests) == 6
    for dims in contract.suite("heldout"):
        assert contract.label(dims) not in sent
        assert json.dumps(dims) not in sent
        assert all(dims not in bench["shapes"] for bench in evaluator.benches)


def test_nothing_faster_means_the_baseline(tmp_path: Path) -> None:
    script = {
        "testing": [structured({"shapes": []})],
        "planning": [plan(), plan()],
        "coding": [candidate(speedup=1.005), candidate(speedup=0.7)],  # a tie, then slower
    }
    with FakeOpenAI(script) as server:
        result = run(server, tmp_path, rounds=2)
    assert result.status == "finished"
    assert result.best_round == 0 and not result.improved
    assert result.geomean_speedup == 1.0 and result.heldout is None
    assert "baseline" in result.message
    assert Path(result.best_path).read_text() == NAIVE.read_text()
    assert [r.faster for r in result.rounds] == [False, False]


def test_a_heldout_failure_gives_the_win_to_the_next_best(tmp_path: Path) -> None:
    script = {
        "testing": [structured({"shapes": []})],
        "planning": [plan(), plan()],
        "coding": [candidate(speedup=1.3), candidate(speedup=1.8, heldout="reject")],
    }
    with FakeOpenAI(script) as server:
        result = run(server, tmp_path, rounds=2)
    assert result.best_round == 1 and result.geomean_speedup == pytest.approx(1.3)
    assert "round 2's candidate failed the held-out suite" in result.message


def test_a_sanitizer_error_gives_the_win_to_the_next_best(tmp_path: Path) -> None:
    script = {
        "testing": [structured({"shapes": []})],
        "planning": [plan(), plan()],
        "coding": [candidate(speedup=1.3), candidate(speedup=1.8, sanitize="racecheck")],
    }
    evaluator = FakeEvaluator()
    with FakeOpenAI(script) as server:
        result = run(server, tmp_path, rounds=2, evaluator=evaluator)
    assert result.best_round == 1 and result.geomean_speedup == pytest.approx(1.3)
    assert "round 2's candidate failed compute-sanitizer: racecheck: 1 error" in result.message
    assert "memcheck and racecheck found no errors" in result.message
    tried = [Path(s["candidate"]).parent.name for s in evaluator.sanitized]
    assert tried[:2] == ["2", "1"]  # the best first, then the next
    assert (Path(result.run_dir) / "rounds" / "2" / "sanitizer.json").is_file()


def test_timing_rejections_and_crashes_lose_the_round_not_the_run(tmp_path: Path) -> None:
    script = {
        "testing": [structured({"shapes": []})],
        "planning": [plan(), plan(), plan()],
        "coding": [
            candidate(speedup=50.0, timing="impossible"),
            candidate(speedup=1.3, timing="crash"),
            candidate(speedup=1.1),
        ],
    }
    with FakeOpenAI(script) as server:
        result = run(server, tmp_path, rounds=3)
    reasons = [r.verdict.reason if r.verdict else None for r in result.rounds]
    assert reasons == ["impossible_time", "crashed", None]
    assert [r.faster for r in result.rounds] == [False, False, True]
    assert result.best_round == 3 and result.geomean_speedup == pytest.approx(1.1)
    assert "impossible_time" in server.for_agent("planning")[1].text  # the planner is told


def test_malformed_replies_are_recorded_and_the_run_goes_on(tmp_path: Path) -> None:
    script = {
        "testing": [text("these are not JSON shapes"), text("still no JSON")],  # and a re-ask
        "planning": [error(500), error(500)],  # one try and the SDK's one retry
        "coding": [
            empty(),
            text("I would vectorize the loads and use more threads."),  # no code
            text(fenced(WRONG_INTERFACE)),  # third attempt: repairs used up
        ],
    }
    with FakeOpenAI(script) as server:
        result = run(server, tmp_path, rounds=1)
    assert not server.unscripted
    assert result.status == "finished" and result.best_round == 0
    assert result.test_suite is not None and result.test_suite.problem is not None
    (only,) = result.rounds
    assert only.attempts == 3 and only.candidate_path is None
    notes = "\n".join(only.notes)
    assert "planning: LLM call failed: HTTP 500 from http://127.0.0.1" in notes
    assert "the reply was empty" in notes
    assert "no CUDA source" in notes
    assert "parameters" in notes
    assert only.verdict is not None and only.verdict.reason == "interface_mismatch"


def test_resume_continues_without_repeating_finished_rounds(tmp_path: Path) -> None:
    script = {
        "testing": [structured({"shapes": []})],
        "planning": [plan(), plan()],
        "coding": [candidate(speedup=1.2), candidate(speedup=1.5)],
    }

    def crash_in_round_two(method: str, path: Path) -> bool:
        return method == "check" and path.parent.name == "2"

    with FakeOpenAI(script) as server:
        with pytest.raises(RunFailed, match="injected harness failure"):
            run(server, tmp_path, rounds=2, evaluator=FakeEvaluator(fail=crash_in_round_two))
        (run_dir,) = tmp_path.iterdir()
        stopped = OptimizationResult.model_validate_json((run_dir / "run.json").read_text())
        assert stopped.status == "failed" and "injected" in (stopped.error or "")
        assert stopped.rounds_completed == 1 and stopped.best_round == 1
        assert "| status | failed (" in (run_dir / "report.md").read_text()  # reported anyway
        asked = len(server.requests)

        # a multi-agent run cannot be resumed without a model endpoint (it would not go offline)
        with pytest.raises(ConfigurationError, match="resuming a 'multi' run"):
            optimize(None, resume=run_dir, evaluator=FakeEvaluator())
        assert len(server.requests) == asked

        second = FakeEvaluator()
        result = optimize(
            None,
            resume=run_dir,
            evaluator=second,
            llm_settings=LLMSettings(base_url=server.base_url, max_retries=0),
        )
        assert len(server.requests) == asked  # no agent ran again
        assert result.status == "finished" and result.rounds_completed == 2
        assert [r.round for r in result.rounds] == [1, 2]
        assert result.best_round == 2 and result.geomean_speedup == pytest.approx(1.5)
        assert [Path(c["candidate"]).parent.name for c in second.checks] == ["2", "2"]

        again = optimize(
            None,
            resume=run_dir,
            evaluator=FakeEvaluator(),
            llm_settings=LLMSettings(base_url=server.base_url),
        )
        assert again.best_round == 2 and len(server.requests) == asked


def test_the_api_key_never_reaches_the_run_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = "sk-test-9f3a1c77e0b54d2e"
    monkeypatch.setenv("OPENAI_API_KEY", secret)
    script = {
        "testing": [structured({"shapes": []})],
        "planning": [plan()],
        "coding": [candidate(speedup=1.3)],
    }
    with FakeOpenAI(script) as server:
        result = run(server, tmp_path, rounds=1)
    assert all(r.authorization == f"Bearer {secret}" for r in server.requests)
    files = [p for p in Path(result.run_dir).rglob("*") if p.is_file()]
    assert len(files) > 5
    for path in files:
        assert secret.encode() not in path.read_bytes(), path


def test_single_agent_mode(tmp_path: Path) -> None:
    first = 'Vectorize.\n```json\n[{"tokens": 9, "d": 64}]\n```\n' + fenced(BROKEN)
    script = {"single": [text(first), candidate(speedup=1.4), candidate(speedup=1.2)]}
    evaluator = FakeEvaluator()
    with FakeOpenAI(script) as server:
        result = run(server, tmp_path, rounds=2, evaluator=evaluator, agents="single")
    assert not server.unscripted and len(server.requests) == 3
    assert result.agents == "single" and {u.agent for u in result.usage} == {"single"}
    assert result.best_round == 1 and result.geomean_speedup == pytest.approx(1.4)
    assert [r.attempts for r in result.rounds] == [2, 1]
    assert result.rounds[0].plan is not None and result.rounds[0].plan.summary == "Vectorize."
    assert result.test_suite is not None and result.test_suite.extra == [{"tokens": 9, "d": 64}]
    first_candidate_check = next(c for c in evaluator.checks if "rounds" in c["candidate"])
    assert first_candidate_check["extra"] == [{"tokens": 9, "d": 64}]


@pytest.fixture
def _restore_structlog() -> Iterator[None]:
    """The CLI configures structlog globally, onto a stream capsys closes afterwards."""
    yield
    structlog.reset_defaults()


@pytest.mark.usefixtures("_restore_structlog")
def test_cli_without_an_endpoint_runs_offline_and_tunes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import astra_graph.commands.optimize as command

    # a baseline whose tunables (BLOCK) make it 1.3x faster, in the fake evaluator's script
    folder = tmp_path / "op"
    folder.mkdir()
    for name in ("contract.toml", "reference.py"):
        (folder / name).write_text((OP / name).read_text())
    (folder / "naive.cu").write_text("// fake: tuned = 1.3\n" + (OP / "naive.cu").read_text())
    monkeypatch.setattr(command, "gpu_arch", lambda: "sm_90")
    monkeypatch.setattr(command, "open_pool", fake_pool)
    argv = ["optimize", str(folder / "naive.cu"), "--json", "--runs-dir", str(tmp_path / "runs")]
    assert cli.main(argv) == 0
    out, err = capsys.readouterr()
    assert "OPENAI_API_KEY" in err.splitlines()[0] and "offline" in err.splitlines()[0]
    result = OptimizationResult.model_validate_json(out)
    assert result.agents == "offline" and result.rounds == [] and result.usage == []
    assert result.improved and result.best_round == 0
    assert result.geomean_speedup == pytest.approx(1.3, rel=0.01)
    assert result.dispatch is not None and result.dispatch.dispatch
    assert all(e.verified and e.tunables != {"BLOCK": 256} for e in result.dispatch.dispatch)
    run_dir = Path(result.run_dir)
    assert (run_dir / "best.dispatch.json").is_file()
    assert (run_dir / "baseline/tuning.json").is_file()
    assert not (run_dir / "rounds").exists()
    report = (run_dir / "report.md").read_text()
    assert "Dispatch table of the best kernel" in report
    assert "No agent rounds: an offline run" in report and "stopped before" not in report
    assert "| model | none (offline) |" in report
    events = [json.loads(line) for line in err.splitlines()[1:]]
    nodes = [e["node"] for e in events if e["event"] == "node_finished"]
    assert nodes == ["testing", "profile_baseline", "tuning", "finalize"]


def test_cli_rejects_bad_flags(capsys: pytest.CaptureFixture[str]) -> None:
    url = ["--base-url", "http://127.0.0.1:9/v1"]
    assert cli.main(["optimize", "silu_and_mul/naive", "--agent-model", "boss=o3", *url]) == 2
    assert "--agent-model" in capsys.readouterr().err
    assert cli.main(["optimize", "no_such_op/naive", *url]) == 2
    assert "no_such_op" in capsys.readouterr().err
    assert cli.main(["optimize", *url]) == 2
    assert "--resume" in capsys.readouterr().err


@pytest.mark.usefixtures("_restore_structlog")
def test_cli_run_prints_progress_and_the_result_as_json(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import astra_graph.commands.optimize as command

    monkeypatch.setattr(command, "gpu_arch", lambda: "sm_90")
    monkeypatch.setattr(command, "open_pool", fake_pool)
    script = {
        "testing": [structured({"shapes": []})],
        "planning": [plan()],
        "coding": [candidate(speedup=1.25)],
    }
    with FakeOpenAI(script) as server:
        argv = ["optimize", "silu_and_mul/naive", "--rounds", "1", "--json"]
        code = cli.main([*argv, "--base-url", server.base_url, "--runs-dir", str(tmp_path)])
    out, err = capsys.readouterr()
    assert code == 0
    result = OptimizationResult.model_validate_json(out)
    assert result.best_round == 1 and result.geomean_speedup == pytest.approx(1.25)
    events = [json.loads(line) for line in err.splitlines()]
    finished = [e for e in events if e["event"] == "node_finished"]
    assert [e["node"] for e in finished] == [
        "testing", "profile_baseline", "tuning", "planning", "candidate", "join", "tuning",
        "finalize",
    ]  # fmt: skip
    assert finished[4]["verdict"] == "accepted" and finished[4]["branch"] == 1
    assert finished[5]["speedup"] == pytest.approx(1.25)
    agents = {e.get("agent") for e in events if e["event"] != "node_finished"}
    assert {"coding", "testing", "profiling"} <= agents  # messages from inside the branch


def test_a_runs_dir_that_is_a_file_is_bad_input(tmp_path: Path) -> None:
    blocker = tmp_path / "runs"
    blocker.write_text("not a folder")
    with pytest.raises(ConfigurationError, match="runs_dir"):
        optimize(NAIVE, runs_dir=blocker, evaluator=FakeEvaluator())


def test_no_rounds_never_calls_the_testing_agent(tmp_path: Path) -> None:
    # extra shapes would only test candidates, and with rounds=0 there are none (issue 26)
    with FakeOpenAI({}) as server:
        result = run(server, tmp_path, rounds=0)
    assert server.for_agent("testing", answered=False) == []
    assert not server.unscripted
    assert result.status == "finished" and result.test_suite is not None
    assert result.test_suite.extra == []
