"""LangGraph Studio: ``langgraph dev`` serves the graph named in langgraph.json.

Starts the real server (``langgraph-cli[inmem]``) on 127.0.0.1 and a free port, in a scratch
copy of langgraph.json and graphs/ (the server resolves graph paths against its working
directory and writes its state to ``.langgraph_api/`` there), then reads the graph over HTTP
as Studio does.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]
STUDIO_ENV = {
    "LANGGRAPH_CLI_NO_ANALYTICS": "1",
    "LANGGRAPH_NO_VERSION_CHECK": "true",
    "LANGSMITH_TRACING": "false",
}
AGENTS = ("testing", "planning", "coding", "profiling")
START_TIMEOUT_S = 90


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _request(url: str, body: dict[str, Any] | None = None) -> Any:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read())


def _stop(process: subprocess.Popen[bytes]) -> None:
    """Stop the server and the workers it started: the whole process group."""
    if process.poll() is not None:
        return
    os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=15)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=15)


@pytest.fixture(scope="module")
def studio(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Base URL of a running ``langgraph dev`` serving this repository's langgraph.json."""
    workdir = tmp_path_factory.mktemp("studio")
    shutil.copy(REPO / "langgraph.json", workdir / "langgraph.json")
    skip_caches = shutil.ignore_patterns("__pycache__")
    shutil.copytree(REPO / "graphs", workdir / "graphs", ignore=skip_caches)
    port = _free_port()
    log_path = workdir / "server.log"
    command = [
        str(Path(sys.executable).parent / "langgraph"),
        "dev",
        "--no-browser",
        "--no-reload",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
    ]
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            command,
            cwd=workdir,
            env={**os.environ, **STUDIO_ENV},
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            if process.poll() is not None:
                tail = log_path.read_text(errors="replace")[-3000:]
                pytest.fail(f"langgraph dev exited with {process.returncode}:\n{tail}")
            try:
                if _request(f"{base}/ok").get("ok"):
                    break
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            if time.monotonic() > deadline:
                tail = log_path.read_text(errors="replace")[-3000:]
                pytest.fail(f"langgraph dev did not answer /ok in {START_TIMEOUT_S} s:\n{tail}")
            time.sleep(0.5)
        yield base
    finally:
        _stop(process)


def test_studio_serves_the_astra_graph(studio: str) -> None:
    assistants = _request(f"{studio}/assistants/search", {"graph_id": "astra"})
    assert [a["graph_id"] for a in assistants] == ["astra"]
    graph = _request(f"{studio}/assistants/{assistants[0]['assistant_id']}/graph")

    nodes = {node["id"] for node in graph["nodes"]}
    for name in (
        *AGENTS,
        "profile_baseline",
        "verify",
        "tuning",
        "finalize",
        "__start__",
        "__end__",
    ):
        assert name in nodes

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
