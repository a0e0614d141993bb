"""A scripted OpenAI-compatible chat server on 127.0.0.1, for tests that use the real ChatOpenAI.

Replies are scripted per agent: a request goes to the queue of the agent named in its system
prompt ("You are the planning agent ..."). Each scripted reply is text, a structured value, an
HTTP error (optionally with ``Retry-After``) or a hang-up (the connection closed with no
answer, as when the server goes away mid-run), and may be cut off (``finish_reason="length"``)
or delayed. Every chat request body and its Authorization header are recorded. A request
whose queue is empty gets a 500 and is recorded as unscripted; a request from no agent (a
one-token probe) is answered "OK".

An :class:`Imitation` makes the server behave like a family of real servers, as their
documentation describes them: which request features it refuses with HTTP 400 (json_schema,
tools, JSON mode), how a structured answer comes back (bare JSON, in a fence with prose around
it, after a sentence, after a ``<think>`` block, or with ``reasoning_content`` beside it), which
models ``/models`` lists, whether any model name is answered (llama.cpp) and whether a key is
required. A refused request consumes no scripted reply, as a real server generates nothing.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Literal

AGENTS = ("testing", "planning", "coding", "single")
DEFAULT_MODELS = ("o4-mini",)
SHUTDOWN_POLL_S = 0.01
"""How often a serving thread looks for a shutdown request. Leaving a server waits for that
look, and socketserver's default interval (0.5 s) made every exit take 0.501 s (measured)."""

Wrap = Literal["plain", "fenced", "prose", "think", "reasoning"]


@dataclass(frozen=True)
class Imitation:
    refuses: frozenset[str] = frozenset()
    """Request features answered with HTTP 400: ``json_schema``, ``tools``, ``json_object``."""
    wrap: Wrap = "plain"
    """How a structured value is written in the content (tool calls are always bare JSON)."""
    models: tuple[str, ...] = DEFAULT_MODELS
    any_model: bool = False
    """Answer whatever model is named (llama.cpp serves one model under any name)."""
    key: str | None = None
    """The bearer key the server requires; None: any or none."""
    has_models_endpoint: bool = True


IMITATIONS: dict[str, Imitation] = {
    # OpenAI and recent vLLM / SGLang / LM Studio: json_schema honoured
    "openai": Imitation(),
    # older vLLM, gateways, hosted APIs: "supported: text, json_object"; tool calling off
    "json_mode_only": Imitation(frozenset({"json_schema", "tools"})),
    # a server that only does plain text, and a model that answers in prose around its JSON
    "prose": Imitation(frozenset({"json_schema", "tools", "json_object"}), "prose"),
    # plain text, JSON in a ```json fence with prose before and after
    "fenced": Imitation(frozenset({"json_schema", "tools", "json_object"}), "fenced"),
    # a reasoning model served with its thinking inline: <think>...</think> before the answer
    "think": Imitation(frozenset({"json_schema", "tools"}), "think"),
    # a DeepSeek-R1-style server: reasoning_content beside the content; no json_schema, no tools
    "reasoning": Imitation(frozenset({"json_schema", "tools"}), "reasoning"),
    # llama.cpp: any model name, no json_schema through this route
    "llama_cpp": Imitation(frozenset({"json_schema"}), "plain", ("local-model",), True),
}

REFUSALS = {
    "json_schema": "response_format type 'json_schema' is not supported; supported: text, "
    "json_object",
    "json_object": "response_format type 'json_object' is not supported; supported: text",
    "tools": "tool calling is not supported by this server ('tools' must be empty)",
}


@dataclass(frozen=True)
class Scripted:
    content: str | None = ""
    status: int = 200
    input_tokens: int = 120
    output_tokens: int = 80
    structured: bool = False
    """``content`` is a JSON value to be written the way the imitated server writes JSON."""
    finish_reason: str = "stop"
    retry_after: str | None = None
    delay_s: float = 0.0
    hang_up: bool = False
    """Close the connection without an answer."""


def text(content: str, input_tokens: int = 120, output_tokens: int = 80) -> Scripted:
    return Scripted(content, 200, input_tokens, output_tokens)


def structured(value: Any, **options: Any) -> Scripted:
    """A structured-output reply: ``value`` as the server's style writes JSON."""
    return Scripted(json.dumps(value), structured=True, **options)


def raw_json(value: Any) -> Scripted:
    """The JSON text of ``value`` as the content, whatever the imitation."""
    return Scripted(json.dumps(value))


def error(status: int = 500, retry_after: str | None = None) -> Scripted:
    return Scripted(None, status, retry_after=retry_after)


def hang_up() -> Scripted:
    return Scripted(None, hang_up=True)


def empty() -> Scripted:
    return Scripted("")


def cut(reply: Scripted | str) -> Scripted:
    """A reply cut off by the output-token limit: the first half of its content."""
    reply = text(reply) if isinstance(reply, str) else reply
    content = reply.content or ""
    half = {"content": content[: len(content) // 2], "finish_reason": "length"}
    return Scripted(**{**reply.__dict__, **half, "output_tokens": 4096})


def slow(reply: Scripted, delay_s: float) -> Scripted:
    return Scripted(**{**reply.__dict__, "delay_s": delay_s})


@dataclass
class Request:
    agent: str | None
    body: dict[str, Any]
    authorization: str
    at: float = 0.0
    refused: str | None = None

    @property
    def text(self) -> str:
        """All message contents of the request, joined."""
        parts = []
        for message in self.body.get("messages", []):
            content = message.get("content")
            parts.append(content if isinstance(content, str) else json.dumps(content))
        return "\n".join(parts)

    @property
    def method(self) -> str:
        """The structured-output method the request used."""
        if self.body.get("tools"):
            return "function_calling"
        kind = str((self.body.get("response_format") or {}).get("type"))
        return {"json_schema": "json_schema", "json_object": "json_mode"}.get(kind, "text")


def wrap(value_json: str, style: Wrap) -> tuple[str, str | None]:
    """(content, reasoning_content) of a structured answer written in ``style``."""
    if style == "fenced":
        return f"Here is my answer.\n\n```json\n{value_json}\n```\n\nLet me know.", None
    if style == "prose":
        return f"After looking at the profile, my answer is {value_json}. Good luck.", None
    if style == "think":
        return f"<think>The profile shows {{bandwidth}}; try [x].</think>\n{value_json}", None
    if style == "reasoning":
        return value_json, "First I read the profile {it is slow}. Then I decide."
    return value_json, None


@dataclass
class FakeOpenAI:
    """``with FakeOpenAI({"planning": [structured(plan)], ...}) as server: server.base_url``."""

    script: Mapping[str, Iterable[Scripted]] = field(default_factory=dict)
    imitation: Imitation = field(default_factory=Imitation)
    requests: list[Request] = field(default_factory=list)
    unscripted: list[Request] = field(default_factory=list)
    model_lookups: int = 0

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

    def for_agent(self, agent: str, *, answered: bool = True) -> list[Request]:
        """The agent's chat requests; ``answered``: leave out the ones refused with a 400."""
        return [r for r in self.requests if r.agent == agent and not (answered and r.refused)]

    def _next(self, request: Request) -> Scripted | None:
        with self._lock:
            self.requests.append(request)
            if request.refused:
                return None
            if request.agent is None:  # no agent's system prompt: a probe such as preflight's
                return Scripted("OK", input_tokens=3, output_tokens=1)
            queue = self._queues.get(request.agent)
            if not queue:
                self.unscripted.append(request)
                return None
            return queue.popleft()

    def _refusal(self, body: dict[str, Any]) -> str | None:
        kind = (body.get("response_format") or {}).get("type")
        for feature in ("json_schema", "json_object"):
            if kind == feature and feature in self.imitation.refuses:
                return feature
        if body.get("tools") and "tools" in self.imitation.refuses:
            return "tools"
        return None

    def __enter__(self) -> FakeOpenAI:
        fake = self
        imitation = self.imitation

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:  # keep test output quiet
                pass

            def _authorised(self) -> bool:
                if imitation.key is None:
                    return True
                if self.headers.get("Authorization", "") == f"Bearer {imitation.key}":
                    return True
                self._send(401, {"error": {"message": "Incorrect API key provided."}})
                return False

            def do_GET(self) -> None:
                if not self._authorised():
                    return
                if self.path == "/v1/models" and imitation.has_models_endpoint:
                    fake.model_lookups += 1
                    data = [
                        {"id": m, "object": "model", "owned_by": "me"} for m in imitation.models
                    ]
                    self._send(200, {"object": "list", "data": data})
                else:
                    self._send(404, {"error": {"message": f"unknown path {self.path}"}})

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", 0))
                body = json.loads(self.rfile.read(length) or b"{}")
                if not self._authorised():
                    return
                if self.path != "/v1/chat/completions":
                    self._send(404, {"error": {"message": f"unknown path {self.path}"}})
                    return
                model = body.get("model", "")
                if not imitation.any_model and model not in imitation.models:
                    message = f"The model `{model}` does not exist or you do not have access."
                    self._send(404, {"error": {"message": message, "code": "model_not_found"}})
                    return
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
                refused = fake._refusal(body)
                request = Request(
                    agent, body, self.headers.get("Authorization", ""), time.monotonic(), refused
                )
                reply = fake._next(request)
                if refused:
                    self._send(400, {"error": {"message": REFUSALS[refused], "code": 400}})
                elif reply is None:
                    self._send(500, {"error": {"message": f"unscripted request for {agent}"}})
                else:
                    time.sleep(reply.delay_s)
                    if reply.hang_up:
                        self.close_connection = True
                        self.connection.shutdown(socket.SHUT_RDWR)
                    elif reply.status != 200:
                        headers = {"Retry-After": reply.retry_after} if reply.retry_after else {}
                        message = f"scripted failure {reply.status}"
                        self._send(reply.status, {"error": {"message": message}}, headers)
                    else:
                        self._send(200, fake._completion(body, reply))

            def _send(
                self, status: int, payload: dict[str, Any], headers: Mapping[str, str] = {}
            ) -> None:
                data = json.dumps(payload).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    for name, value in headers.items():
                        self.send_header(name, value)
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):  # the client gave up waiting
                    pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        serve = self._server.serve_forever
        threading.Thread(target=serve, args=(SHUTDOWN_POLL_S,), daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.shutdown()
        self._server.server_close()

    def _completion(self, body: dict[str, Any], reply: Scripted) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": reply.content}
        finish = reply.finish_reason
        if reply.structured and reply.content is not None:
            tools = body.get("tools") or []
            if tools and finish == "stop":
                name = tools[0]["function"]["name"]
                call: dict[str, Any] = {"id": "call_1", "type": "function"}
                call["function"] = {"name": name, "arguments": reply.content}
                message = {"role": "assistant", "content": None, "tool_calls": [call]}
                finish = "tool_calls"
            else:
                content, reasoning = wrap(reply.content, self.imitation.wrap)
                message["content"] = content
                if reasoning:
                    message["reasoning_content"] = reasoning
        elif self.imitation.wrap == "think" and reply.content:
            message["content"] = "<think>Let me think about {the code}.</think>\n" + reply.content
        elif self.imitation.wrap == "reasoning" and reply.content:
            message["reasoning_content"] = "I should vectorize {loads}."
        return {
            "id": "chatcmpl-fake",
            "object": "chat.completion",
            "created": 0,
            "model": body.get("model", "fake"),
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": {
                "prompt_tokens": reply.input_tokens,
                "completion_tokens": reply.output_tokens,
                "total_tokens": reply.input_tokens + reply.output_tokens,
            },
        }
