"""A scripted OpenAI-compatible chat server on 127.0.0.1, for tests that use the real ChatOpenAI.

Replies are scripted per agent: a request goes to the queue of the agent named in its system
prompt ("You are the planning agent ..."). Each reply is plain text, JSON for structured
output (langchain-openai's json_schema format reads ``message.content``), an HTTP error or an
empty reply. Every request body and its Authorization header are recorded. A request whose
queue is empty gets a 500 and is recorded as unscripted.
"""

from __future__ import annotations

import json
import threading
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

AGENTS = ("testing", "planning", "coding", "single")


@dataclass(frozen=True)
class Scripted:
    content: str | None = ""
    status: int = 200
    input_tokens: int = 120
    output_tokens: int = 80


def text(content: str, input_tokens: int = 120, output_tokens: int = 80) -> Scripted:
    return Scripted(content, 200, input_tokens, output_tokens)


def structured(value: Any) -> Scripted:
    """A structured-output reply: the JSON text of ``value`` as the message content."""
    return Scripted(json.dumps(value))


def error(status: int = 500) -> Scripted:
    return Scripted(None, status)


def empty() -> Scripted:
    return Scripted("")


@dataclass
class Request:
    agent: str | None
    body: dict[str, Any]
    authorization: str

    @property
    def text(self) -> str:
        """All message contents of the request, joined."""
        parts = []
        for message in self.body.get("messages", []):
            content = message.get("content")
            parts.append(content if isinstance(content, str) else json.dumps(content))
        return "\n".join(parts)


@dataclass
class FakeOpenAI:
    """``with FakeOpenAI({"planning": [structured(plan)], ...}) as server: server.base_url``."""

    script: Mapping[str, Iterable[Scripted]] = field(default_factory=dict)
    requests: list[Request] = field(default_factory=list)
    unscripted: list[Request] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._queues = {agent: deque(self.script.get(agent, ())) for agent in AGENTS}
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None

    def add(self, agent: str, *replies: Scripted) -> None:
        with self._lock:
            self._queues[agent].extend(replies)

    @property
    def base_url(self) -> str:
        assert self._server is not None, "server not started"
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def for_agent(self, agent: str) -> list[Request]:
        return [r for r in self.requests if r.agent == agent]

    def _next(self, request: Request) -> Scripted | None:
        with self._lock:
            self.requests.append(request)
            queue = self._queues.get(request.agent or "")
            if not queue:
                self.unscripted.append(request)
                return None
            return queue.popleft()

    def __enter__(self) -> FakeOpenAI:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:  # keep test output quiet
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", 0))
                body = json.loads(self.rfile.read(length) or b"{}")
                system = next(
                    (
                        m.get("content", "")
                        for m in body.get("messages", [])
                        if m.get("role") in ("system", "developer")
                    ),
                    "",
                )
                agent = next((a for a in AGENTS if f"You are the {a}" in system), None)
                if agent is None and "the only agent" in system:
                    agent = "single"
                request = Request(agent, body, self.headers.get("Authorization", ""))
                reply = fake._next(request)
                if not self.path.endswith("/chat/completions"):
                    self._send(404, {"error": {"message": f"unknown path {self.path}"}})
                elif reply is None:
                    self._send(500, {"error": {"message": f"unscripted request for {agent}"}})
                elif reply.status != 200:
                    self._send(reply.status, {"error": {"message": "scripted failure"}})
                else:
                    self._send(200, fake._completion(body, reply))

            def _send(self, status: int, payload: dict[str, Any]) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.shutdown()
        self._server.server_close()

    @staticmethod
    def _completion(body: dict[str, Any], reply: Scripted) -> dict[str, Any]:
        return {
            "id": "chatcmpl-fake",
            "object": "chat.completion",
            "created": 0,
            "model": body.get("model", "fake"),
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": reply.content},
                    "finish_reason": "stop",
                }
            ],
            "usage": {
                "prompt_tokens": reply.input_tokens,
                "completion_tokens": reply.output_tokens,
                "total_tokens": reply.input_tokens + reply.output_tokens,
            },
        }
