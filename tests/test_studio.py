"""LangGraph Studio: ``langgraph dev`` serves the graph named in langgraph.json.

Starts the real server (tests/langgraph_dev.py) in a scratch copy of langgraph.json and
graphs/, then reads the graph over HTTP as Studio does.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from langgraph_dev import request as _request
from langgraph_dev import serve

REPO = Path(__file__).resolve().parents[1]
USER_SET = {
    "kernel", "run_dir", "rounds", "max_repairs", "candidates", "agents", "models", "started_at"
}  # fmt: skip
"""What optimize() passes in (runner.optimize builds its initial state from exactly these)."""


@pytest.fixture(scope="module")
def studio(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Base URL of a running ``langgraph dev`` serving this repository's langgraph.json."""
    workdir = tmp_path_factory.mktemp("studio")
    shutil.copy(REPO / "langgraph.json", workdir / "langgraph.json")
    skip_caches = shutil.ignore_patterns("__pycache__")
    shutil.copytree(REPO / "graphs", workdir / "graphs", ignore=skip_caches)
    with serve(workdir) as base:
        yield base


def test_studio_serves_the_astra_graph(studio: str) -> None:
    assistants = _request(f"{studio}/assistants/search", {"graph_id": "astra"})
    assert [a["graph_id"] for a in assistants] == ["astra"]
    graph = _request(f"{studio}/assistants/{assistants[0]['assistant_id']}/graph")

    nodes = {node["id"] for node in graph["nodes"]}
    for name in ("testing", "planning", "profile_baseline", "candidate", "join", "tuning"):
        assert name in nodes
    for name in ("finalize", "__start__", "__end__"):
        assert name in nodes
    # the candidate branches (best-of-K), opened as Studio opens subgraphs
    inside = _request(f"{studio}/assistants/{assistants[0]['assistant_id']}/graph?xray=true")
    inside_nodes = {node["id"] for node in inside["nodes"]}
    for name in ("coding", "verify", "measure"):
        assert f"candidate:{name}" in inside_nodes, inside_nodes

    edges = graph["edges"]
    assert {"source": "finalize", "target": "__end__"} in [
        {"source": e["source"], "target": e["target"]} for e in edges
    ]
    # the round cap: after a round is profiled and tuned, either plan the next one or finalize
    conditional: dict[str, set[str]] = {}
    for edge in edges:
        if edge.get("conditional"):
            conditional.setdefault(edge["source"], set()).add(edge["target"])
    assert {"planning", "finalize"} <= conditional.get("tuning", set()), edges


def test_studio_input_form_shows_only_what_a_caller_sets(studio: str) -> None:
    """Studio builds its input form from the graph's input schema: the fields optimize() passes
    in, none of the state the nodes keep; the output is the run's result."""
    (assistant,) = _request(f"{studio}/assistants/search", {"graph_id": "astra"})
    schemas = _request(f"{studio}/assistants/{assistant['assistant_id']}/schemas")
    assert set(schemas["input_schema"]["properties"]) == USER_SET
    assert schemas["input_schema"]["required"] == ["kernel", "run_dir"]
    assert set(schemas["output_schema"]["properties"]) == {"result"}
    # the state the nodes share is larger, and none of its own fields is in the form
    internal = set(schemas["state_schema"]["properties"]) - USER_SET - {"result"}
    assert {"history", "usage", "suite", "baseline"} <= internal


def test_studio_serves_the_single_agent_baseline_as_its_own_graph(studio: str) -> None:
    (assistant,) = _request(f"{studio}/assistants/search", {"graph_id": "astra-single"})
    graph = _request(f"{studio}/assistants/{assistant['assistant_id']}/graph")
    nodes = {node["id"] for node in graph["nodes"]}
    assert {"testing", "single", "verify", "profiling", "tuning", "finalize"} <= nodes
    assert not {"planning", "candidate", "join", "coding"} & nodes
    # the one agent's repair edge goes back to it, not to a relabelled coding node
    conditional = {(e["source"], e["target"]) for e in graph["edges"] if e.get("conditional")}
    assert {("single", "single"), ("verify", "single"), ("tuning", "single")} <= conditional
