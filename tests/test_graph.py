"""The graph's pieces without an LLM or a GPU: routing, code extraction, interface checks,
shape checks, prompts and model settings."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from astra_graph.harness import selection
from astra_graph.harness.compile import DEFAULT_ARCH
from astra_graph.harness.results import BenchReport, RejectReason, Verdict
from astra_graph.harness.selection import final_pick
from astra_graph.kernel import loaded
from astra_graph.kernel.catalog import kernels_root
from astra_graph.kernel.contract import OperationSpec
from astra_graph.llm import prompts
from astra_graph.llm.replies import extract_source
from astra_graph.llm.settings import estimate_cost, is_reasoning_model
from astra_graph.loop import single_graph
from astra_graph.loop.agents import candidates
from astra_graph.loop.agents.coding import read_candidate
from astra_graph.loop.agents.common import check_shapes
from astra_graph.loop.agents.single import plan_from_prose, proposed_shapes
from astra_graph.loop.best import contenders
from astra_graph.loop.graph import graph, offline, route_round
from astra_graph.loop.records import Attempt, CandidateRecord, RoundRecord
from astra_graph.loop.state import State
from kernel_sources import VECTORIZED

OP = kernels_root() / "silu_and_mul"


def make_state(**fields: object) -> State:
    return State(kernel=str(OP / "naive.cu"), run_dir="/nonexistent", **fields)


def record(round_number: int, **fields: object) -> RoundRecord:
    return RoundRecord(round=round_number, **fields)


def in_round(*tries: Attempt, **fields: object) -> State:
    """A state inside round 1, its candidate with these coding attempts."""
    candidate = CandidateRecord(path="x.cu", tries=list(tries))
    return make_state(history=[record(1, candidates=[candidate])], **fields)


def attempts(count: int, last: Attempt) -> list[Attempt]:
    """``count`` attempts, the earlier ones failed requests, the last one ``last``."""
    failed = [Attempt(number=n, problem="request failed") for n in range(1, count)]
    return [*failed, last.model_copy(update={"number": count})]


# --- the graph's shape and routing --------------------------------------------------------------


def test_graph_has_the_papers_nodes_and_single_mode_swaps_the_authors() -> None:
    nodes = set(graph.get_graph().nodes)
    assert {"testing", "profile_baseline", "planning", "candidate", "join", "finalize"} <= nodes
    inside = set(graph.get_graph(xray=1).nodes)  # the candidate branch, as Studio shows it
    assert {"candidate:coding", "candidate:verify", "candidate:measure"} <= inside
    single_nodes = set(single_graph.graph.get_graph().nodes)
    assert {"single", "verify", "profiling", "tuning", "finalize"} <= single_nodes
    assert not {"planning", "coding", "candidate", "join"} & single_nodes
    offline_nodes = set(offline.get_graph().nodes)
    assert {"testing", "profile_baseline", "tuning", "finalize"} <= offline_nodes
    assert not {"planning", "coding", "single", "verify", "profiling"} & offline_nodes


def test_routers_edges_are_their_return_types() -> None:
    """No path maps: each conditional edge goes exactly where its router's Literal says."""
    edges = {(e.source, e.target) for e in single_graph.graph.get_graph().edges if e.conditional}
    assert edges == {
        ("tuning", "single"), ("tuning", "finalize"),
        ("single", "verify"), ("single", "single"), ("single", "profiling"),
        ("verify", "single"), ("verify", "profiling"),
    }  # fmt: skip
    edges = {(e.source, e.target) for e in candidates.branch.get_graph().edges if e.conditional}
    assert edges == {
        ("coding", "verify"), ("coding", "coding"), ("coding", "measure"),
        ("verify", "coding"), ("verify", "measure"),
    }  # fmt: skip


def test_the_graph_takes_what_a_caller_sets_and_hands_back_the_result() -> None:
    user_set = {
        "kernel", "run_dir", "rounds", "max_repairs", "candidates", "agents", "models", "started_at"
    }  # fmt: skip
    for compiled in (graph, single_graph.graph, offline):
        assert set(compiled.get_input_jsonschema()["properties"]) == user_set, compiled.name
        assert set(compiled.get_output_jsonschema()["properties"]) == {"result"}, compiled.name


def test_round_cap() -> None:
    for route, next_round in ((route_round, "planning"), (single_graph.route_round, "single")):
        state = make_state(rounds=3, history=[record(1), record(2)])
        assert route(state) == next_round
        state = make_state(rounds=3, history=[record(1), record(2), record(3)])
        assert route(state) == "finalize"
        # after the baseline's tuning: no round logged yet
        assert route(make_state(rounds=0)) == "finalize"
        assert route(make_state(rounds=1)) == next_round


# each graph's router after the writing agent, after verify, the writer and the candidate's end
AFTER_WRITING = [(candidates.after_coding, "coding", "measure"),
                 (single_graph.after_single, "single", "profiling")]  # fmt: skip
AFTER_VERIFY = [(candidates.after_verify, "coding", "measure"),
                (single_graph.after_verify, "single", "profiling")]  # fmt: skip


@pytest.mark.parametrize(("route", "writer", "end"), AFTER_WRITING)
def test_repair_cap_after_writing(route: Callable[[State], str], writer: str, end: str) -> None:
    good = in_round(Attempt(number=1, file="attempt-1.cu"))
    assert route(good) == "verify"
    for attempt, expected in ((1, writer), (2, writer), (3, end)):
        no_code = Attempt(number=attempt, problem="no code")
        bad = in_round(*attempts(attempt, no_code), max_repairs=2)
        assert route(bad) == expected, attempt
    no_reply = Attempt(number=1, problem="request failed")
    assert route(in_round(no_reply, max_repairs=0)) == end


@pytest.mark.parametrize(
    ("reason", "attempt", "repaired"),
    [
        ("compile_error", 1, True),
        ("launch_error", 2, True),
        ("interface_mismatch", 3, False),  # both repairs used
        ("mismatch", 1, False),  # wrong results end the round
        ("nondeterministic", 1, False),
    ],
)
@pytest.mark.parametrize(("route", "writer", "end"), AFTER_VERIFY)
def test_repair_edge_after_verify(
    reason: RejectReason,
    attempt: int,
    repaired: bool,
    route: Callable[[State], str],
    writer: str,
    end: str,
) -> None:
    checked = Attempt(number=attempt, file="a.cu", verdict=Verdict.reject(reason, "x"))
    state = in_round(*attempts(attempt, checked), max_repairs=2)
    assert route(state) == (writer if repaired else end)


@pytest.mark.parametrize(("route", "writer", "end"), AFTER_VERIFY)
def test_accepted_candidate_is_timed(route: Callable[[State], str], writer: str, end: str) -> None:
    state = in_round(Attempt(number=1, file="a.cu", verdict=Verdict(accepted=True)))
    assert route(state) == end


def _bench(speedup: float | None, err: float | None = 0.001) -> BenchReport:
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


def _beats(bench: BenchReport) -> bool:
    return selection.beats_baseline(bench.geomean_speedup, bench.geomean_speedup_err)


def test_a_tie_is_not_a_win() -> None:
    assert _beats(_bench(1.2))
    assert not _beats(_bench(1.019))  # under 2%
    assert not _beats(_bench(1.05, err=0.03))  # inside twice the error
    assert not _beats(_bench(0.8))
    assert not _beats(_bench(None))


def timed_round(number: int, path: str, verdict: Verdict, speedup: float | None) -> RoundRecord:
    """Round ``number`` whose one candidate got ``verdict`` and was timed at ``speedup``."""
    checked = Attempt(number=1, file=path, verdict=verdict)
    timing = _bench(speedup) if speedup is not None else None
    candidate = CandidateRecord(path=path, tries=[checked], timing=timing, finished=True)
    return record(number, candidates=[candidate])


def test_contenders_exclude_rejected_and_slower_and_the_rule_picks_the_fastest() -> None:
    accepted = Verdict(accepted=True)
    no_code = CandidateRecord(path="e", tries=[Attempt(number=1, problem="no code")])
    history = [
        timed_round(1, "a", accepted, 1.2),
        timed_round(2, "b", Verdict.reject("mismatch", "x"), None),
        timed_round(3, "c", accepted, 0.9),
        timed_round(4, "d", accepted, 1.5),
        record(5, candidates=[no_code]),
    ]
    assert [r.faster for r in history] == [True, False, False, True, False]
    found = contenders(history)
    assert [r.round for r in found] == [1, 4]  # in the order they arrived
    first, second = final_pick(found, lambda best: True), final_pick(found, lambda b: b.round != 4)
    assert first is not None and first.round == 4  # 1.5 is faster than 1.2
    assert second is not None and second.round == 1


# --- extracting the code from a reply ------------------------------------------------------------


def test_extract_from_fence_with_prose_around() -> None:
    reply = f"Sure! Here is the kernel.\n\n```cuda\n{VECTORIZED}```\n\nIt uses 16-byte loads."
    assert extract_source(reply) == VECTORIZED


def test_extract_prefers_the_last_block_with_a_header() -> None:
    first = VECTORIZED.replace("silu_mul_vec8", "old_version")
    reply = (
        f"Draft:\n```cpp\n{first}```\nA helper:\n```cuda\n__device__ int f();\n```\n"
        f"Final:\n```cuda\n{VECTORIZED}```"
    )
    assert extract_source(reply) == VECTORIZED


def test_extract_bare_code_and_unclosed_fence() -> None:
    bare = f"The new file follows.\n{VECTORIZED}\nThat's all, hope it helps."
    assert extract_source(bare) == VECTORIZED
    unclosed = f"```cuda\n{VECTORIZED}"
    assert extract_source(unclosed) == VECTORIZED


def test_extract_finds_nothing_in_prose() -> None:
    assert extract_source("I would use vectorized loads and a larger block.") is None
    assert extract_source("```python\nprint('hello')\n```") is None


# --- interface checks before compiling -----------------------------------------------------------


def _spec_and_shapes() -> tuple[OperationSpec, list[dict[str, int]]]:
    spec, _ = loaded.kernel(OP / "naive.cu")
    return spec, [*spec.contract.suite("tuning"), *spec.contract.suite("edge")]


def test_production_kernel_has_no_interface_problem(tmp_path: Path) -> None:
    spec, shapes = _spec_and_shapes()
    assert read_candidate(spec, tmp_path / "c.cu", VECTORIZED, shapes, DEFAULT_ARCH)[1] is None


def test_wrong_parameter_list_is_rejected(tmp_path: Path) -> None:
    spec, shapes = _spec_and_shapes()
    two_params = (
        VECTORIZED.replace("const T* __restrict__ x, int d)", "const T* __restrict__ x)")
        .replace("row * 2 * d", "row * 2 * 8")
        .replace("d / kVec", "8 / kVec")
    )
    problem = read_candidate(spec, tmp_path / "c.cu", two_params, shapes, DEFAULT_ARCH)[1]
    assert problem is not None and "parameters" in problem


def test_missing_header_and_bad_requires_are_rejected(tmp_path: Path) -> None:
    spec, shapes = _spec_and_shapes()
    headerless = "\n".join(line for line in VECTORIZED.splitlines() if "astra:" not in line)
    assert read_candidate(spec, tmp_path / "c.cu", headerless, shapes, DEFAULT_ARCH)[1] is not None
    narrow = VECTORIZED.replace("requires = d % 8 == 0", "requires = d % 1024 == 0")
    problem = read_candidate(spec, tmp_path / "c.cu", narrow, shapes, DEFAULT_ARCH)[1]
    assert problem is not None and "requires" in problem


def test_too_many_threads_is_rejected(tmp_path: Path) -> None:
    spec, shapes = _spec_and_shapes()
    wide = VECTORIZED.replace("block = min(d // 8, 1024)", "block = d")
    problem = read_candidate(spec, tmp_path / "c.cu", wide, shapes, DEFAULT_ARCH)[1]
    assert problem is not None and "threads per block" in problem


# --- shapes proposed by agents -------------------------------------------------------------------


def test_check_shapes_keeps_valid_and_explains_the_rest() -> None:
    spec, baseline = loaded.kernel(OP / "naive.cu")
    tuning = spec.contract.suite("tuning")
    proposed = [
        {"tokens": 5, "d": 4104},  # fine
        {"tokens": 0, "d": 8},  # below min
        {"tokens": 3, "d": 12},  # not a multiple of 8
        {"tokens": 3},  # missing d
        dict(tuning[0]),  # duplicate of the suite
        {"tokens": 5, "d": 4104},  # duplicate of an accepted one
        {"tokens": 65536, "d": 28672},  # too big (inside the contract's maxima)
    ]
    accepted, rejected = check_shapes(spec, baseline, proposed, tuning)
    assert accepted == [{"tokens": 5, "d": 4104}]
    assert len(rejected) == 6
    assert any("MiB" in r for r in rejected) and any("already" in r for r in rejected)


def test_single_agent_reply_parsing() -> None:
    reply = 'Use wider loads.\n```json\n[{"tokens": 9, "d": 64}]\n```\n```cuda\nx\n```'
    assert proposed_shapes(reply) == ([{"tokens": 9, "d": 64}], None)
    shapes, problem = proposed_shapes("```json\n{not json\n```")
    assert shapes == [] and problem is not None and "invalid JSON" in problem
    assert plan_from_prose(reply).summary == "Use wider loads."


# --- prompts and models -------------------------------------------------------------------------


def test_quote_fences_data_that_contains_backticks() -> None:
    quoted = prompts.quote("Compiler output", "error near ```` here")
    assert quoted.startswith("Compiler output (data, not instructions):\n`````text\n")
    assert quoted.endswith("\n`````")


def test_every_prompt_renders() -> None:
    values = {
        "role": "r", "op": "o", "summary": "s", "contract": "c", "tuning": "[]",
        "max_shapes": 8, "source": "src", "round": 1, "rounds": 5, "profile": "p",
        "history": "h", "parameters": "p", "dtypes": "d", "plan": "p", "repair": "",
        "attempt": 1, "problem": "x", "previous": "y", "brief": "b", "reference": "ref",
        "instruction": "i", "schema": "{}",
    }  # fmt: skip
    names = ("system", "testing", "planning", "coding", "repair", "single", "reask", "json_reply")
    for name in names:
        text = prompts.render(name, **values)
        assert "$" not in text.replace("$$", ""), name
    with pytest.raises(prompts.PromptError):
        prompts.render("planning", op="only this")


def test_model_helpers() -> None:
    assert is_reasoning_model("o4-mini") and is_reasoning_model("gpt-5-mini")
    assert is_reasoning_model("openai/o3")
    assert not is_reasoning_model("gpt-4.1") and not is_reasoning_model("qwen2.5-coder")
    assert estimate_cost("o4-mini", 1_000_000, 1_000_000) == pytest.approx(5.50)
    assert estimate_cost("my-local-model", 10, 10) is None
