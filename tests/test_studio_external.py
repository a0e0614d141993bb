"""External agents in LangGraph Studio, driven over ``langgraph dev``'s HTTP API on the CPU.

Studio's path: an assistant of the ``astra`` graph with the context ``{"model": "external"}``
runs on a thread; the run stops at each agent's request (the thread's interrupt carries the
request: messages, and for structured replies the schema and an example); a run with
``command.resume`` answers it and the graph goes on. The server serves a scratch graph module
that puts the scripted FakeEvaluator in the harness's place (no GPU here); everything else is
the real graph, the real server and the real ChatOpenAI pipeline behind the interrupt.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from astra_graph.kernel.catalog import kernels_root
from astra_graph.llm.external import QUESTION_KIND
from kernel_sources import VECTORIZED, fenced, marked
from langgraph_dev import request, serve

TESTS = Path(__file__).resolve().parent
NAIVE = kernels_root() / "silu_and_mul" / "naive.cu"
RUN_TIMEOUT_S = 120

CPU_GRAPH = """
import sys
sys.path.insert(0, {tests!r})

import astra_graph.loop.context as context
from fake_evaluator import FakeEvaluator

_evaluator = FakeEvaluator()
context._shared_evaluator = lambda: _evaluator  # the harness's place: no GPU in this test

from astra_graph.loop.graph import graph  # noqa: E402
"""


@pytest.fixture(scope="module")
def studio(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    workdir = tmp_path_factory.mktemp("studio-external")
    (workdir / "graphs").mkdir()
    (workdir / "graphs" / "astra_cpu.py").write_text(CPU_GRAPH.format(tests=str(TESTS)))
    config = {"dependencies": ["."], "graphs": {"astra": "./graphs/astra_cpu.py:graph"}}
    (workdir / "langgraph.json").write_text(json.dumps(config))
    with serve(workdir) as base:
        yield base


def interrupt_values(studio: str, thread_id: str) -> list[dict[str, Any]]:
    state = request(f"{studio}/threads/{thread_id}/state")
    return [i["value"] for task in state.get("tasks", []) for i in task.get("interrupts", [])]


def test_studio_shows_each_request_and_answering_it_resumes_the_run(
    studio: str, tmp_path: Path
) -> None:
    assistant = request(
        f"{studio}/assistants",
        {"graph_id": "astra", "name": "astra, answered here", "context": {"model": "external"}},
    )
    thread = request(f"{studio}/threads", {})
    runs = f"{studio}/threads/{thread['thread_id']}/runs/wait"
    start = {"kernel": str(NAIVE), "run_dir": str(tmp_path / "run"), "rounds": 1}
    request(
        runs,
        {"assistant_id": assistant["assistant_id"], "input": start},
        timeout_s=RUN_TIMEOUT_S,
    )

    answers = {
        "testing": {
            "shapes": [
                {
                    "dims": [{"name": "tokens", "value": 3}, {"name": "d", "value": 64}],
                    "why": "small",
                }
            ]
        },
        "planning": {"summary": "vectorize the loads", "changes": []},
        "coding": fenced(marked(VECTORIZED, speedup=1.7)),
    }
    asked = []
    while pending := interrupt_values(studio, thread["thread_id"]):
        (question,) = pending
        assert question["kind"] == QUESTION_KIND
        asked.append(question["agent"])
        assert [m["role"] for m in question["messages"]][-1] == "user"
        if question["agent"] == "coding":
            assert question["reply"] == "text" and question["response_schema"] is None
            assert "vectorize the loads" in question["messages"][-1]["content"]
        else:
            assert question["reply"] == "structured"
            assert question["response_schema"]["type"] == "object"
            assert question["example"] is not None
        request(
            runs,
            {
                "assistant_id": assistant["assistant_id"],
                "command": {"resume": answers[question["agent"]]},
            },
            timeout_s=RUN_TIMEOUT_S,
        )
        assert len(asked) <= 3
    assert asked == ["testing", "planning", "coding"]

    values = request(f"{studio}/threads/{thread['thread_id']}/state")["values"]
    result = values["result"]
    assert result["status"] == "finished" and result["best_round"] == 1
    assert result["geomean_speedup"] == pytest.approx(1.7)
    assert result["test_suite"]["extra"] == [{"tokens": 3, "d": 64}]
    assert {(u["agent"], u["model"], u["input_tokens"]) for u in result["usage"]} == {
        ("testing", "external", 0),
        ("planning", "external", 0),
        ("coding", "external", 0),
    }
    assert (tmp_path / "run" / "rounds" / "1" / "candidate.cu").is_file()
