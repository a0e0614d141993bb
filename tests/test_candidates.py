"""Best-of-K rounds on the CPU: K plans, K branches evaluated at once, every candidate recorded,
the best by the selection rule carried forward.

The K coding branches ask the scripted server at once, so which branch gets which scripted
reply is not fixed: the assertions hold whatever the order.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from astra_graph.harness.pool import GpuPool, Slot
from astra_graph.harness.results import BenchReport, Verdict
from astra_graph.kernel.catalog import kernels_root
from astra_graph.llm.settings import LLMSettings
from astra_graph.loop.agents.planning import plans_for_round
from astra_graph.loop.best import best_so_far, contenders
from astra_graph.loop.plans import Plan, PlanSet
from astra_graph.loop.records import Attempt, CandidateRecord, RoundRecord
from astra_graph.loop.state import OptimizationResult
from astra_graph.run.runner import ConfigurationError, optimize
from fake_evaluator import FakeEvaluator
from fake_openai import FakeOpenAI, Scripted, structured, text
from kernel_sources import BROKEN, VECTORIZED, fenced, marked

pytestmark = pytest.mark.usefixtures("plots_not_drawn")  # conftest.py says why

NAIVE = kernels_root() / "silu_and_mul" / "naive.cu"
WAIT_S = 10.0


@pytest.fixture(autouse=True)
def _no_api_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("ASTRA_API_KEY", raising=False)


def plans(*summaries: str) -> Scripted:
    change = {"change": "c", "why": "w", "expected_effect": "e"}
    return structured({"plans": [{"summary": s, "changes": [change]} for s in summaries]})


def candidate(**marks: object) -> Scripted:
    return text(fenced(marked(VECTORIZED, **marks)))


def run(server: FakeOpenAI, tmp_path: Path, evaluator: Any, **kw: Any) -> OptimizationResult:
    settings = LLMSettings(base_url=server.base_url, max_retries=0)
    return optimize(NAIVE, runs_dir=tmp_path, evaluator=evaluator, llm_settings=settings, **kw)


def test_three_candidates_are_recorded_and_the_fastest_accepted_is_carried(
    tmp_path: Path,
) -> None:
    script = {
        "testing": [structured({"shapes": []})],
        "planning": [plans("vectorize", "more rows per block", "unroll")],
        "coding": [candidate(speedup=1.3), candidate(reject="mismatch"), candidate(speedup=1.6)],
    }
    with FakeOpenAI(script) as server:
        result = run(server, tmp_path, FakeEvaluator(), rounds=1, candidates=3)
    assert not server.unscripted
    (round_one,) = result.rounds
    assert [c.branch for c in round_one.candidates] == [1, 2, 3]
    assert [c.plan.summary for c in round_one.candidates if c.plan] == [
        "vectorize",
        "more rows per block",
        "unroll",
    ]
    outcomes = sorted(
        (c.verdict.reason or "" if c.verdict else "-", c.geomean_speedup or 0.0)
        for c in round_one.candidates
    )
    assert outcomes == [("", pytest.approx(1.3)), ("", pytest.approx(1.6)), ("mismatch", 0.0)]
    winner = next(c for c in round_one.candidates if c.branch == round_one.chosen)
    assert winner.geomean_speedup == pytest.approx(1.6) and round_one.plan == winner.plan
    assert result.best_round == 1 and result.geomean_speedup == pytest.approx(1.6)
    assert result.candidates_per_round == 3

    # each candidate has its own folder; the round's folder holds the one carried forward
    run_dir = Path(result.run_dir)
    for c in round_one.candidates:
        folder = run_dir / "rounds/1/candidates" / str(c.branch)
        assert c.candidate_path == str(folder / "candidate.cu")
        assert (folder / "verdict.json").is_file()
        assert (folder / "bench.json").is_file() == (c.geomean_speedup is not None)
    carried_file = run_dir / "rounds/1/candidate.cu"
    assert round_one.candidate_path == str(carried_file)
    assert carried_file.read_text() == Path(winner.candidate_path or "").read_text()
    assert (run_dir / "best.cu").read_text() == carried_file.read_text()

    # the report lists every candidate
    report = (run_dir / "report.md").read_text()
    assert "Candidates of each round" in report
    assert f"| 1 | {winner.branch} (carried) |" in report and "mismatch" in report

    # the K plans were asked for in one planning call, the K candidates in K coding calls
    assert len(server.for_agent("planning")) == 1 and len(server.for_agent("coding")) == 3
    assert "Give exactly 3 plans" in server.for_agent("planning")[0].text


def test_each_branch_repairs_on_its_own(tmp_path: Path) -> None:
    script = {
        "testing": [structured({"shapes": []})],
        "planning": [plans("a", "b")],
        "coding": [text(fenced(BROKEN)), candidate(speedup=1.2), candidate(speedup=1.2)],
    }
    with FakeOpenAI(script) as server:
        result = run(server, tmp_path, FakeEvaluator(), rounds=1, candidates=2)
    attempts = sorted(c.attempts for c in result.rounds[0].candidates)
    assert attempts == [1, 2]
    assert all(c.verdict is not None and c.verdict.accepted for c in result.rounds[0].candidates)


class MeetingEvaluator(FakeEvaluator):
    """A fake whose visible-suite checks wait until ``party`` of them run at the same time."""

    def __init__(self, barrier: threading.Barrier) -> None:
        super().__init__()
        self.barrier = barrier

    def check(self, op: Any, baseline: Path, candidate: Path, **kwargs: Any) -> Verdict:
        if "heldout" not in kwargs.get("suites", ()) and "/candidates/" in str(candidate):
            self.barrier.wait(WAIT_S)  # raises BrokenBarrierError if the branches ran one by one
        return super().check(op, baseline, candidate, **kwargs)


def test_the_branches_are_evaluated_at_once_on_the_pool(tmp_path: Path) -> None:
    barrier = threading.Barrier(2)
    pool = GpuPool([Slot(gpu=str(i), evaluator=MeetingEvaluator(barrier)) for i in range(2)])
    script = {
        "testing": [structured({"shapes": []})],
        "planning": [plans("a", "b"), plans("c", "d")],
        "coding": [candidate(speedup=1.2), candidate(speedup=1.4)] * 2,
    }
    with FakeOpenAI(script) as server:
        result = run(server, tmp_path, pool, rounds=2, candidates=2)
    assert not barrier.broken
    assert [len(r.candidates) for r in result.rounds] == [2, 2]
    assert all(s.calls > 0 for s in pool.slots)


def test_a_planner_that_gives_too_few_plans_is_noted_and_the_round_goes_on() -> None:
    got = PlanSet(plans=[Plan(summary="only one", changes=[])])
    filled, note = plans_for_round(got, None, 3)
    assert filled[0].summary == "only one" and len(filled) == 3
    assert note == "planning: 1 plans given, 3 asked for"
    filled, note = plans_for_round(None, "unusable structured reply: x", 2)
    assert len(filled) == 2 and note == "planning: unusable structured reply: x"


def timing_report(speedup: float, err: float = 0.001) -> BenchReport:
    return BenchReport(
        op="silu_and_mul",
        mode="device",
        device="x",
        candidate="c",
        copy_bandwidth_gbps=3000.0,
        shapes=[],
        geomean_speedup=speedup,
        geomean_speedup_err=err,
    )


def rec(
    branch: int, speedup: float | None, accepted: bool = True, err: float = 0.001
) -> CandidateRecord:
    verdict = Verdict(accepted=True) if accepted else Verdict.reject("mismatch", "m")
    checked = Attempt(number=1, file=f"r/1/candidates/{branch}/c.cu", verdict=verdict)
    timing = timing_report(speedup, err) if speedup is not None else None
    path = f"r/1/candidates/{branch}/c.cu"
    return CandidateRecord(branch=branch, path=path, tries=[checked], timing=timing)


def test_the_noisy_pair_carries_the_one_faster_beyond_noise_not_the_larger() -> None:
    """Issue 26: A = 1.05x +- 0.005 beats the baseline beyond the noise, B = 1.06x +- 0.04 is a
    tie with it. A is carried and is a contender; B is neither, whatever the branch order; the
    best so far, the report's table and run.json read the same rule."""
    for order in ((1, 2), (2, 1)):
        a, b = rec(order[0], 1.05, err=0.005), rec(order[1], 1.06, err=0.04)
        record = RoundRecord(round=1, candidates=sorted([a, b], key=lambda c: c.branch))
        assert record.carried is not None and record.carried.branch == a.branch
        assert record.contender_branches == [a.branch]
        assert record.geomean_speedup == 1.05 and record.faster
        found = contenders([record])
        assert [(c.round, c.geomean_speedup) for c in found] == [(1, 1.05)]
        assert found[0].path == "r/1/c.cu"  # the carried copy in the round's folder
        best = best_so_far("k.cu", None, [record])
        assert best.geomean_speedup == 1.05
        dumped = record.model_dump()
        assert dumped["chosen"] == a.branch and dumped["contender_branches"] == [a.branch]


def test_every_contender_of_a_round_is_in_the_running_for_the_best() -> None:
    """A contender that is not carried still competes for the best so far: the carried one
    (here tied with a later, faster-looking one) may fail the final checks."""
    record = RoundRecord(round=1, candidates=[rec(1, 1.30), rec(2, 1.31), rec(3, 1.10)])
    assert record.carried is not None and record.carried.branch == 1  # 1.31 ties 1.30
    assert record.contender_branches == [1, 2, 3]
    paths = [c.path for c in contenders([record])]
    assert paths == ["r/1/c.cu", "r/1/candidates/2/c.cu", "r/1/candidates/3/c.cu"]


def test_with_no_contender_the_rule_still_picks_which_tie_to_sweep() -> None:
    record = RoundRecord(round=1, candidates=[rec(1, 0.80), rec(2, 1.01), rec(3, 1.015)])
    assert record.contender_branches == [] and not record.faster
    assert record.carried is not None and record.carried.branch == 2
    assert contenders([record]) == []


def test_the_carried_candidate_is_the_fastest_accepted_else_the_first() -> None:

    def carried(candidates: list[CandidateRecord]) -> CandidateRecord | None:
        return RoundRecord(round=1, candidates=candidates).carried

    chosen = carried([rec(1, 1.1), rec(2, 1.5), rec(3, 2.0, accepted=False)])
    assert chosen is not None and chosen.branch == 2
    rejected = carried([rec(1, None, accepted=False), rec(2, None, accepted=False)])
    assert rejected is not None and rejected.branch == 1
    assert carried([]) is None


def test_best_of_k_needs_the_multi_agent_graph(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="candidates"):
        optimize(NAIVE, candidates=0, runs_dir=tmp_path, evaluator=FakeEvaluator())
    with FakeOpenAI({}) as server, pytest.raises(ConfigurationError, match="multi-agent"):
        run(server, tmp_path, FakeEvaluator(), agents="single", candidates=2)
    with pytest.raises(ConfigurationError, match="external agents answer one request"):
        settings = LLMSettings(model="external")
        optimize(
            NAIVE, candidates=2, runs_dir=tmp_path, evaluator=FakeEvaluator(), llm_settings=settings
        )


class TuningMeetingEvaluator(FakeEvaluator):
    """A fake whose first timing of a tunable setting waits until the other slot's runs too."""

    def __init__(self, barrier: threading.Barrier) -> None:
        super().__init__()
        self.barrier = barrier
        self.met = False

    def bench(self, op: Any, candidate: Path, **kwargs: Any) -> BenchReport:
        if kwargs.get("tunables") and not self.met:
            self.met = True
            self.barrier.wait(WAIT_S)  # raises BrokenBarrierError if the sweep ran one by one
        return super().bench(op, candidate, **kwargs)


def outcome(result: OptimizationResult) -> dict[str, Any]:
    """What a run decided, whichever branch got which reply: per round the candidates'
    verdicts and speedups and the carried one's; the dispatch tables; the best."""
    rounds = []
    for r in result.rounds:
        found = sorted(
            (c.verdict.reason or "accepted" if c.verdict else "-", c.geomean_speedup or 0.0)
            for c in r.candidates
        )
        rounds.append((found, r.geomean_speedup, r.faster))
    sweeps = [result.baseline_tuning, *(r.tuning for r in result.rounds)]
    tables = [
        (t.round, [(e.bucket, e.tunables, e.speedup_vs_default) for e in t.report.dispatch])
        for t in sweeps
        if t is not None
    ]
    return {"rounds": rounds, "tables": tables, "best": (result.best_round, result.geomean_speedup)}


def test_a_round_on_two_gpus_decides_what_it_decides_on_one(tmp_path: Path) -> None:
    """Two slots: the branches and the tuner's timings spread over both (they meet at a
    barrier), and every verdict, the carried candidate and the dispatch tables are the one
    slot's."""
    production = (NAIVE.parent / "production.cu").read_text()
    tunable = text(fenced(marked(production, speedup=1.5, tuned=1.3)))
    script = {
        "testing": [structured({"shapes": []})],
        "planning": [plans("a", "b"), plans("c", "d")],
        "coding": [tunable, candidate(reject="mismatch"), tunable, candidate(speedup=1.1)],
    }
    barrier = threading.Barrier(2)
    outcomes = {}
    for size in (1, 2):
        slots = [TuningMeetingEvaluator(barrier) if size == 2 else FakeEvaluator()]
        slots += [TuningMeetingEvaluator(barrier) for _ in range(size - 1)]
        pool = GpuPool([Slot(gpu=str(i), evaluator=e) for i, e in enumerate(slots)])
        with FakeOpenAI({k: list(v) for k, v in script.items()}) as server:
            result = run(server, tmp_path / str(size), pool, rounds=2, candidates=2)
        assert not server.unscripted and result.status == "finished"
        outcomes[size] = outcome(result)
    assert not barrier.broken
    assert outcomes[2] == outcomes[1]
    # the carried production copy was swept and its dispatch table replaced the best
    assert [t for t, _ in outcomes[1]["tables"]] == [0, 1, 2]
    assert outcomes[1]["best"][1] == pytest.approx(1.5 * 1.3)
