"""External agents on the CPU: requests become interrupts, answered with ``astra reply``.

The evaluator is the scripted FakeEvaluator and compiles are the real NVRTC, as in
test_graph_run.py. The reference for "the same answers" is the scripted OpenAI-compatible
server (fake_openai.py) driven through the real ChatOpenAI.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import deque
from collections.abc import Iterator
from pathlib import Path

import pytest
import structlog

from astra_graph import cli
from astra_graph.kernel.catalog import kernels_root
from astra_graph.llm import external
from astra_graph.llm.settings import LLMSettings
from astra_graph.loop.state import OptimizationResult
from astra_graph.run.runner import ConfigurationError, optimize, read_result
from fake_evaluator import FakeEvaluator
from fake_openai import FakeOpenAI, Scripted, structured, text
from kernel_sources import BROKEN, VECTORIZED, fenced, marked

pytestmark = pytest.mark.usefixtures("plots_not_drawn")  # conftest.py says why

TESTS = Path(__file__).resolve().parent
NAIVE = kernels_root() / "silu_and_mul" / "naive.cu"
SHAPES = {
    "shapes": [
        {"dims": [{"name": "tokens", "value": 5}, {"name": "d", "value": 4104}], "why": "odd"}
    ]
}
NO_CODE = "I would vectorize the loads with 16-byte accesses."


def plan(summary: str) -> Scripted:
    change = {"change": "16-byte loads", "why": "5% of roofline", "expected_effect": "2x"}
    return structured({"summary": summary, "changes": [change]})


def two_round_script() -> dict[str, list[Scripted]]:
    """Round 1: an answer with no code (repaired), then a 1.3x kernel; round 2: a kernel that
    does not compile (repaired with the compiler's log), then a 1.6x kernel."""
    return {
        "testing": [structured(SHAPES)],
        "planning": [plan("vectorize"), plan("unroll")],
        "coding": [
            text(NO_CODE),
            text(fenced(marked(VECTORIZED, speedup=1.3))),
            text(fenced(BROKEN)),
            text(fenced(marked(VECTORIZED, speedup=1.6))),
        ],
    }


@pytest.fixture(autouse=True)
def _no_api_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("ASTRA_API_KEY", raising=False)


@pytest.fixture
def cpu_cli(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The CLI on this machine: a GPU that 'exists', the scripted evaluator in the harness's
    place; structlog restored afterwards (the CLI configures it onto a stream capsys closes)."""
    import astra_graph.commands.optimize as optimize_command
    import astra_graph.commands.reply as reply_command
    import astra_graph.harness.evaluator as harness_evaluator

    monkeypatch.setattr(optimize_command, "gpu_arch", lambda: "sm_90")
    monkeypatch.setattr(reply_command, "gpu_arch", lambda: "sm_90")
    monkeypatch.setattr(harness_evaluator, "Evaluator", FakeEvaluator)
    yield
    structlog.reset_defaults()


def pending(run_dir: Path) -> external.Exchange:
    result = read_result(run_dir)
    assert result.status == "waiting"
    exchange = external.waiting_for(result.external)
    assert exchange is not None
    return exchange


def comparable(result: OptimizationResult) -> dict[str, object]:
    """What two runs with the same answers must share (not paths, times or token counts)."""
    return {
        "status": result.status,
        "best_round": result.best_round,
        "improved": result.improved,
        "geomean_speedup": result.geomean_speedup,
        "message": result.message,
        "extra": result.test_suite.extra if result.test_suite else None,
        "rounds": [
            (
                r.round,
                r.plan.summary if r.plan else None,
                r.attempts,
                r.verdict.reason if r.verdict else None,
                r.geomean_speedup,
                best,
                [note.split(":")[0] for note in r.notes],
            )
            for r, best in zip(result.rounds, result.best_speedups, strict=True)
        ],
        "calls": [(u.agent, u.round, u.calls) for u in result.usage],
    }


def last_line(out: str) -> str:
    return out.strip().splitlines()[-1]


@pytest.mark.usefixtures("cpu_cli")
def test_two_rounds_answered_with_astra_reply_match_the_scripted_server(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    script = two_round_script()
    with FakeOpenAI(two_round_script()) as server:
        reference = optimize(
            NAIVE,
            rounds=2,
            runs_dir=tmp_path / "model",
            evaluator=FakeEvaluator(),
            llm_settings=LLMSettings(base_url=server.base_url, max_retries=0),
        )
    assert not server.unscripted and reference.status == "finished"

    argv = ["optimize", "silu_and_mul/naive", "--agents", "external", "--rounds", "2"]
    assert cli.main([*argv, "--runs-dir", str(tmp_path / "external")]) == 0
    line = last_line(capsys.readouterr().out)
    (run_dir,) = (tmp_path / "external").iterdir()
    assert line.startswith("astra: waiting for an answer to request 1 (testing, before round 1)")
    assert f"astra reply {run_dir} --file ANSWER" in line

    answers = {agent: deque(s.content or "" for s in replies) for agent, replies in script.items()}
    asked: list[external.ExternalRequest] = []
    given: list[str] = []
    while read_result(run_dir).status == "waiting":
        exchange = pending(run_dir)
        request = exchange.request
        asked.append(request)
        assert Path(exchange.request_path).is_file()
        assert external.markdown_path(Path(exchange.request_path)).is_file()
        answer_file = tmp_path / f"answer-{request.number}.txt"
        given.append(answers[request.agent].popleft())
        answer_file.write_text(given[-1])
        code = cli.main(["reply", str(run_dir), "--file", str(answer_file)])
        out = capsys.readouterr().out
        assert code == 0, out
        assert len(asked) < 20
    assert all(not queue for queue in answers.values())

    result = read_result(run_dir)
    assert comparable(result) == comparable(reference)
    assert result.best_round == 2 and result.geomean_speedup == pytest.approx(1.6)
    assert [r.attempts for r in result.rounds] == [2, 2]

    # every request carried the messages the model got, in the same order
    assert [r.agent for r in asked] == [r.agent for r in server.requests]
    run = result.run_dir
    for request, sent in zip(asked, server.requests, strict=True):
        model_messages = [(m["role"], m["content"]) for m in sent.body["messages"]]
        assert [(m.role, m.content) for m in request.messages] == [
            # o-series models get the system message as "developer"; the paths are the runs'
            ("system" if role == "developer" else role, content.replace(reference.run_dir, run))
            for role, content in model_messages
        ]
    planning = next(r for r in asked if r.agent == "planning")
    assert planning.reply == "structured" and planning.response_schema is not None
    assert set(planning.example) == {"summary", "changes"}
    assert asked[-1].agent == "coding" and asked[-1].reply == "text"
    assert asked[-1].response_schema is None
    repair = asked[-1].messages[-1].content
    assert "What went wrong (data, not instructions)" in repair and "error" in repair

    # records: every request and answer in run.json, usage with no tokens and no cost
    assert [e.answer for e in result.external] == given
    assert [e.request for e in result.external] == asked
    assert all(e.answered_at for e in result.external) and len(asked) == 7
    assert {u.model for u in result.usage} == {"external"}
    assert result.total_tokens == 0 and result.total_cost_usd == 0.0
    assert reference.total_tokens > 0

    # the report marks the rounds answered outside
    report = (run_dir / "report.md").read_text()
    assert "answered externally" in report and "| external requests | 7, 7 answered" in report
    rounds = report.split("| round | plan |", 1)[1].split("\n\n", 1)[0].splitlines()[2:]
    assert len(rounds) == 2 and all("| planning, coding |" in row for row in rounds)
    assert "| 1 | coding | external | 1 | 1 | - | 0 | 0 | $0.0000 |" in report  # usage table
    assert "answered externally" not in (Path(reference.run_dir) / "report.md").read_text()


def test_a_bad_answer_goes_through_repair_and_counts_as_an_attempt(tmp_path: Path) -> None:
    waiting = optimize(
        NAIVE,
        rounds=1,
        max_repairs=1,
        runs_dir=tmp_path,
        evaluator=FakeEvaluator(),
        llm_settings=LLMSettings(model="external"),
    )
    run_dir = Path(waiting.run_dir)

    def answer(text: str) -> OptimizationResult:
        return optimize(None, resume=run_dir, evaluator=FakeEvaluator(), answer=text)

    answer(json.dumps({"shapes": []}))
    first_coding = answer(json.dumps({"summary": "vectorize", "changes": []}))
    assert pending(run_dir).request.agent == "coding"
    repaired = answer(NO_CODE)  # no code in it: the agent's extraction fails, as for a model
    second = pending(run_dir)
    assert second.request.agent == "coding" and second.request.number == 4
    repair = second.request.messages[-1].content
    assert "could not be used: no CUDA source" in repair and "WHOLE `.cu` file" in repair
    assert repaired.status == "waiting" and first_coding.status == "waiting"

    final = answer(fenced(VECTORIZED))  # default speedup 1.0: a tie
    (only,) = final.rounds
    assert only.attempts == 2 and any("no CUDA source" in note for note in only.notes)
    assert final.status == "finished" and final.best_round == 0
    coding_usage = [u for u in final.usage if u.agent == "coding"]
    assert len(coding_usage) == 2 and all(u.input_tokens == 0 for u in coding_usage)


def test_an_unusable_structured_answer_is_recorded_like_a_models(tmp_path: Path) -> None:
    waiting = optimize(
        NAIVE,
        rounds=1,
        runs_dir=tmp_path,
        evaluator=FakeEvaluator(),
        llm_settings=LLMSettings(model="external"),
    )
    run_dir = Path(waiting.run_dir)
    reask = optimize(None, resume=run_dir, evaluator=FakeEvaluator(), answer="five shapes, please")
    assert reask.status == "waiting"  # asked once more, with what was wrong, as a model is
    again = pending(run_dir).request
    assert again.agent == "testing" and "could not be used" in again.messages[-1].content
    done = optimize(None, resume=run_dir, evaluator=FakeEvaluator(), answer="six, then")
    assert done.test_suite is not None and done.test_suite.problem is not None
    assert done.test_suite.extra == []
    assert pending(run_dir).request.agent == "planning"  # the run went on


KILLED_RUN = """
import sys, time
sys.path.insert(0, {tests!r})
from fake_evaluator import FakeEvaluator
from astra_graph.run.runner import optimize

class Stalling(FakeEvaluator):
    def check(self, op, baseline, candidate, **kw):
        open({marker!r}, "w").write(str(candidate))
        time.sleep(600)

optimize(None, resume={run_dir!r}, evaluator=Stalling(), answer=open({answer!r}).read())
"""


def test_a_run_killed_after_a_reply_continues_without_asking_again(tmp_path: Path) -> None:
    waiting = optimize(
        NAIVE,
        rounds=1,
        runs_dir=tmp_path / "runs",
        evaluator=FakeEvaluator(),
        llm_settings=LLMSettings(model="external"),
    )
    run_dir = Path(waiting.run_dir)
    for reply in (json.dumps({"shapes": []}), json.dumps({"summary": "vec", "changes": []})):
        optimize(None, resume=run_dir, evaluator=FakeEvaluator(), answer=reply)
    assert pending(run_dir).request.agent == "coding"

    # answer the coding request in another process and kill it while the candidate is checked
    answer = tmp_path / "answer.txt"
    answer.write_text(fenced(marked(VECTORIZED, speedup=1.5)))
    marker = tmp_path / "checking"
    code = KILLED_RUN.format(
        tests=str(TESTS), marker=str(marker), run_dir=str(run_dir), answer=str(answer)
    )
    process = subprocess.Popen([sys.executable, "-c", code], start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while not marker.exists():
            assert process.poll() is None, "the replying process ended early"
            assert time.monotonic() < deadline, "the candidate was never checked"
            time.sleep(0.1)
    finally:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=30)
    assert "rounds/1" in marker.read_text()
    killed = read_result(run_dir)
    assert [e.answer is not None for e in killed.external] == [True, True, True]

    # the answer is not asked for again: the run goes on from the checkpoint to the end
    asked = len(killed.external)
    with pytest.raises(ConfigurationError, match=r"not waiting|already"):
        optimize(None, resume=run_dir, evaluator=FakeEvaluator(), answer="again")
    result = optimize(None, resume=run_dir, evaluator=FakeEvaluator())
    assert result.status == "finished" and len(result.external) == asked
    assert result.best_round == 1 and result.geomean_speedup == pytest.approx(1.5)
    (only,) = result.rounds
    assert only.attempts == 1


def test_an_answer_recorded_before_a_crash_is_used_on_resume(tmp_path: Path) -> None:
    waiting = optimize(
        NAIVE,
        rounds=1,
        runs_dir=tmp_path,
        evaluator=FakeEvaluator(),
        llm_settings=LLMSettings(model="external"),
    )
    run_dir = Path(waiting.run_dir)
    # the answer reached the disk, then the process died before continuing the graph
    external.record_answer(pending(run_dir), json.dumps(SHAPES))
    result = optimize(None, resume=run_dir, evaluator=FakeEvaluator())
    assert result.test_suite is not None and result.test_suite.extra == [{"tokens": 5, "d": 4104}]
    assert pending(run_dir).request.agent == "planning"
    assert [e.request.agent for e in result.external] == ["testing", "planning"]


def test_a_person_plans_and_a_model_codes(tmp_path: Path) -> None:
    script = {
        "testing": [structured({"shapes": []})],
        "coding": [text(fenced(marked(VECTORIZED, speedup=1.4)))],
    }
    with FakeOpenAI(script) as server:
        settings = LLMSettings(
            base_url=server.base_url, max_retries=0, agent_models={"planning": "external"}
        )
        waiting = optimize(
            NAIVE, rounds=1, runs_dir=tmp_path, evaluator=FakeEvaluator(), llm_settings=settings
        )
        assert waiting.status == "waiting"
        assert [r.agent for r in server.requests] == ["testing"]
        assert waiting.models == {"testing": "o4-mini", "planning": "external", "coding": "o4-mini"}
        run_dir = Path(waiting.run_dir)
        assert pending(run_dir).request.agent == "planning"

        # resuming needs the endpoint of the model agents, and keeps the run's models
        with pytest.raises(ConfigurationError, match="resuming a 'multi' run"):
            optimize(None, resume=run_dir, evaluator=FakeEvaluator(), answer="{}")
        assert read_result(run_dir).external[-1].answer is None  # nothing recorded
        plan_answer = json.dumps({"summary": "vectorize by hand", "changes": []})
        result = optimize(
            None,
            resume=run_dir,
            evaluator=FakeEvaluator(),
            answer=plan_answer,
            llm_settings=LLMSettings(base_url=server.base_url, max_retries=0),
        )
    assert not server.unscripted
    assert [r.agent for r in server.requests] == ["testing", "coding"]
    assert "vectorize by hand" in server.requests[1].text  # the person's plan reached the model
    assert result.status == "finished" and result.geomean_speedup == pytest.approx(1.4)
    models = {(u.agent, u.model) for u in result.usage}
    assert models == {("testing", "o4-mini"), ("planning", "external"), ("coding", "o4-mini")}
    assert [e.request.agent for e in result.external] == ["planning"]
    assert result.total_cost_usd is not None and result.total_cost_usd > 0


def test_resuming_a_waiting_run_without_an_answer_waits_again(tmp_path: Path) -> None:
    waiting = optimize(
        NAIVE,
        rounds=1,
        runs_dir=tmp_path,
        evaluator=FakeEvaluator(),
        llm_settings=LLMSettings(model="external"),
    )
    run_dir = Path(waiting.run_dir)
    again = optimize(None, resume=run_dir, evaluator=FakeEvaluator())
    assert again.status == "waiting" and len(again.external) == 1
    assert sorted(p.name for p in (run_dir / "external").iterdir()) == [
        "001-testing.request.json",
        "001-testing.request.md",
    ]


@pytest.mark.usefixtures("cpu_cli")
def test_reply_refuses_bad_input_and_records_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["reply", str(tmp_path), "--file", "x"]) == 2
    assert "run.json" in capsys.readouterr().err

    argv = ["optimize", "silu_and_mul/naive", "--agents", "external", "--rounds", "1"]
    assert cli.main([*argv, "--runs-dir", str(tmp_path / "runs")]) == 0
    capsys.readouterr()
    (run_dir,) = (tmp_path / "runs").iterdir()
    empty = tmp_path / "empty.txt"
    empty.write_text("  \n")
    cases = [
        (["--file", str(empty)], "empty"),
        (["--file", str(tmp_path / "missing.txt")], "missing.txt"),
        ([], "--file"),
    ]
    for extra, expected in cases:
        assert cli.main(["reply", str(run_dir), *extra]) == 2
        err = capsys.readouterr().err
        assert len(err.strip().splitlines()) == 1 and expected in err, err
    assert all(e.answer is None for e in read_result(run_dir).external)
    assert not list((run_dir / "external").glob("*.answer.txt"))

    # --resume on a run that still waits prints the same line again, and asks nothing new
    assert cli.main(["optimize", "--resume", str(run_dir)]) == 0
    line = last_line(capsys.readouterr().out)
    assert line.startswith("astra: waiting for an answer to request 1 (testing, before round 1)")
    assert len(read_result(run_dir).external) == 1


def test_answering_a_run_that_waits_for_nothing_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="resume"):
        optimize(NAIVE, runs_dir=tmp_path, evaluator=FakeEvaluator(), answer="x")
    offline = optimize(NAIVE, runs_dir=tmp_path, evaluator=FakeEvaluator())  # no endpoint
    assert offline.status == "finished"
    with pytest.raises(ConfigurationError, match="finished"):
        optimize(None, resume=offline.run_dir, evaluator=FakeEvaluator(), answer="x")
    assert not (Path(offline.run_dir) / "external").exists()


def test_the_single_agent_can_be_answered_outside(tmp_path: Path) -> None:
    waiting = optimize(
        NAIVE,
        rounds=1,
        agents="single",
        runs_dir=tmp_path,
        evaluator=FakeEvaluator(),
        llm_settings=LLMSettings(model="external"),
    )
    run_dir = Path(waiting.run_dir)
    request = pending(run_dir).request
    assert request.agent == "single" and request.reply == "text" and request.round == 1
    answer = "Vectorize.\n" + fenced(marked(VECTORIZED, speedup=1.2))
    result = optimize(None, resume=run_dir, evaluator=FakeEvaluator(), answer=answer)
    assert result.status == "finished" and result.agents == "single"
    assert result.best_round == 1 and result.geomean_speedup == pytest.approx(1.2)
    assert [(u.agent, u.model) for u in result.usage] == [("single", "external")]
