"""Start the real ``langgraph dev`` server (``langgraph-cli[inmem]``) for a test, and talk to it.

:func:`serve` runs the server on 127.0.0.1 and a free port in a scratch folder (the server
resolves graph paths against its working directory and writes its state to
``.langgraph_api/`` there), waits for ``/ok`` and stops the server's whole process group at the
end. :func:`request` is one JSON call of its HTTP API, as Studio makes them.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

STUDIO_ENV = {
    "LANGGRAPH_CLI_NO_ANALYTICS": "1",
    "LANGGRAPH_NO_VERSION_CHECK": "true",
    "LANGSMITH_TRACING": "false",
}
START_TIMEOUT_S = 90


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def request(url: str, body: dict[str, Any] | None = None, timeout_s: float = 10) -> Any:
    data = None if body is None else json.dumps(body).encode()
    call = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(call, timeout=timeout_s) as response:
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


@contextmanager
def serve(workdir: Path) -> Iterator[str]:
    """Base URL of ``langgraph dev`` serving ``workdir/langgraph.json``."""
    port = free_port()
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
                if request(f"{base}/ok").get("ok"):
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
