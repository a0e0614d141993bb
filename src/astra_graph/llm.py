"""Chat models for the agents: langchain-openai's ``ChatOpenAI`` against OpenAI or any
OpenAI-compatible server (``base_url``): vLLM, SGLang, Ollama, llama.cpp, LM Studio, gateways.

- **Structured output on every server.** The first of json_schema, tool calling, JSON mode and
  plain text that the endpoint accepts is found on the first structured call, per endpoint and
  model, and remembered for the run (each :class:`~astra_graph.usage.Usage` records it, so it is
  in ``run.json``). A method counts as refused when the server answers it with 400, 415, 422 or
  501 (not a context-length complaint). Whatever the method, the reply goes through
  :mod:`astra_graph.replies` (fences, prose, ``<think>``, ``reasoning_content``); a reply that
  does not validate is asked again once, with the validation error, before the call fails.
- **Retries** are the OpenAI SDK's (exponential backoff, ``Retry-After`` honoured up to two
  minutes): ``max_retries`` of them. ``timeout_s`` bounds a whole request including its
  retries and waits: the request runs on a private event loop under ``asyncio.wait_for``. A
  request ended by that limit names the server's last error answer (a 429 and its
  ``Retry-After``, say), seen through an httpx response hook, instead of only the limit.
- **Truncation** (``finish_reason == "length"``) is kept on the reply; ``max_output_tokens`` is
  the output limit sent with every request (None: the server's own).
- **Tokens** the server reports are counted for every reply, usable or not.
- The API key comes from ``OPENAI_API_KEY`` or ``ASTRA_API_KEY`` and lives only inside the
  client objects: it never enters the graph state, the checkpoint, ``run.json`` or a log.
- :func:`preflight` checks an endpoint before a run starts: a well-formed URL, a server that
  answers, a key it accepts and a model it serves.
- Cost is estimated from :data:`PRICES_PER_MILLION` (USD per million input and output tokens,
  OpenAI's list prices as of 2025); a model not in the table costs ``None`` (unknown).
"""

from __future__ import annotations

import asyncio
import json
import os
import threading
from collections.abc import Coroutine, Iterable, Mapping
from concurrent.futures import CancelledError, Future
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Generic, Literal, TypeVar
from urllib.parse import urlparse

import httpx
import openai
import structlog
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
from langchain_core.utils.function_calling import convert_to_openai_function
from langchain_openai import ChatOpenAI
from langgraph.errors import GraphBubbleUp
from pydantic import BaseModel

from astra_graph.external import EXTERNAL
from astra_graph.external_chat import ExternalChat
from astra_graph.replies import RawReply, ReplyProblem, read_structured, schema_instruction
from astra_graph.usage import AgentName, Usage

DEFAULT_MODEL = "o4-mini"
API_KEY_VARIABLES = ("OPENAI_API_KEY", "ASTRA_API_KEY")
PLACEHOLDER_KEY = "not-needed"
"""Sent to a ``base_url`` server when no key is set (local servers ignore it)."""
OPENAI_URL = "https://api.openai.com/v1"
PREFLIGHT_TIMEOUT_S = 20.0
"""How long preflight waits for each answer: a reachable server answers /models at once."""

log = structlog.get_logger(__name__)
StructuredMethod = Literal["json_schema", "function_calling", "json_mode", "text"]
METHODS: tuple[StructuredMethod, ...] = ("json_schema", "function_calling", "json_mode", "text")
"""Tried in this order: the strongest guarantee first, plain text (always accepted) last."""
REFUSAL_STATUSES = frozenset({400, 415, 422, 501})
"""Statuses with which servers refuse a request parameter they do not support."""
_CONTEXT_WORDS = ("context length", "context window", "maximum context", "too many tokens")

PRICES_PER_MILLION: dict[str, tuple[float, float]] = {
    "o4-mini": (1.10, 4.40),
    "o3": (2.00, 8.00),
    "o3-mini": (1.10, 4.40),
    "o1": (15.00, 60.00),
    "gpt-5": (1.25, 10.00),
    "gpt-5-mini": (0.25, 2.00),
    "gpt-5-nano": (0.05, 0.40),
    "gpt-4.1": (2.00, 8.00),
    "gpt-4.1-mini": (0.40, 1.60),
    "gpt-4.1-nano": (0.10, 0.40),
    "gpt-4o": (2.50, 10.00),
    "gpt-4o-mini": (0.15, 0.60),
    EXTERNAL: (0.0, 0.0),  # answered outside (astra reply, Studio): no tokens, no cost
}

SchemaT = TypeVar("SchemaT", bound=BaseModel)
ValueT = TypeVar("ValueT")


@dataclass(frozen=True)
class LLMSettings:
    """Which models the agents use and how they are called. Holds no secret."""

    model: str = DEFAULT_MODEL
    base_url: str | None = None
    agent_models: Mapping[str, str] = field(default_factory=dict)
    """A different model for some agents, e.g. ``{"planning": "o3"}``."""
    timeout_s: float = 600.0
    """The limit on one request, its retries and their waits included."""
    max_retries: int = 3
    """Retries of a request on connection errors, timeouts, 408, 409, 429 and 5xx (the SDK's)."""
    max_output_tokens: int | None = None
    """The output-token limit of each request (reasoning included); None: the server's."""
    reasoning_effort: str | None = None
    temperature: float | None = None
    """Only for models that accept one; ignored for reasoning models."""

    def model_for(self, agent: AgentName) -> str:
        return self.agent_models.get(agent, self.model)

    def endpoint(self) -> str:
        return self.base_url or OPENAI_URL


def api_key() -> str | None:
    """The key from the environment (OPENAI_API_KEY, then ASTRA_API_KEY), or None."""
    for name in API_KEY_VARIABLES:
        value = os.environ.get(name, "").strip()
        if value:
            return value
    return None


def endpoint_problem(
    settings: LLMSettings, agents: Iterable[AgentName] | None = None
) -> str | None:
    """Why no model can be called (no key and no base URL), or None.

    None also when every agent (of ``agents``, or every model named in ``settings``) is
    external: those are answered outside, with no endpoint.
    """
    if not served_models(settings, agents):
        return None
    if api_key() is None and not settings.base_url:
        return (
            "no model endpoint configured: set OPENAI_API_KEY (or ASTRA_API_KEY), "
            "or pass --base-url for an OpenAI-compatible server"
        )
    return None


def served_models(settings: LLMSettings, agents: Iterable[AgentName] | None = None) -> list[str]:
    """The models a server must answer for (of ``agents``, or every model named in
    ``settings``): all but the external ones."""
    named = (
        [settings.model_for(a) for a in agents]
        if agents is not None
        else [settings.model, *settings.agent_models.values()]
    )
    return [m for m in dict.fromkeys(named) if m != EXTERNAL]


def is_reasoning_model(model: str) -> bool:
    name = model.rsplit("/", 1)[-1].lower()
    return name.startswith("gpt-5") or (len(name) > 1 and name[0] == "o" and name[1].isdigit())


def estimate_cost(model: str, input_tokens: int, output_tokens: int) -> float | None:
    price = PRICES_PER_MILLION.get(model.rsplit("/", 1)[-1].lower())
    if price is None:
        return None
    return (input_tokens * price[0] + output_tokens * price[1]) / 1e6


# --- errors as one line -----------------------------------------------------------------------


def _squash(text: str, limit: int = 300) -> str:
    return " ".join(text.split())[:limit]


def server_message(exc: openai.APIStatusError) -> str:
    """The server's own error message, not the SDK's wrapping of it."""
    body = exc.body
    if isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, dict) and inner.get("message"):
            return _squash(str(inner["message"]))
        if isinstance(inner, str):
            return _squash(inner)
    return _squash(exc.message)


def _root_cause(exc: BaseException) -> str:
    """What went wrong underneath a connection error: the SDK wraps the transport's error
    ("Server disconnected without sending a response.") and langchain-openai wraps the SDK's
    ("Connection error."), so the innermost message is the one that says something."""
    seen = {id(exc)}
    inner: BaseException = exc
    while True:
        cause = inner.__cause__ or inner.__context__
        if cause is None or id(cause) in seen:
            break
        seen.add(id(cause))
        inner = cause
    return _squash(str(inner)) or type(inner).__name__


def describe_error(exc: BaseException, endpoint: str) -> str:
    """One line: what failed and what the server said."""
    if isinstance(exc, openai.APIStatusError):
        return f"HTTP {exc.status_code} from {endpoint}: {server_message(exc)}"
    if isinstance(exc, openai.APITimeoutError):
        return f"no answer from {endpoint} in time (timeout)"
    if isinstance(exc, openai.APIConnectionError):
        return f"cannot connect to {endpoint}: {_root_cause(exc)}"
    return f"{type(exc).__name__}: {_squash(str(exc)) or 'no message'}"


def refuses_method(exc: BaseException) -> bool:
    """The server refused a request parameter (as opposed to failing the request)."""
    if not isinstance(exc, openai.APIStatusError) or exc.status_code not in REFUSAL_STATUSES:
        return False
    message = server_message(exc).lower()
    return not any(word in message for word in _CONTEXT_WORDS)


# --- the chat model ---------------------------------------------------------------------------


class ChatModel(ChatOpenAI):
    """``ChatOpenAI`` that keeps the ``reasoning_content`` (or ``reasoning``) field that vLLM,
    SGLang, DeepSeek and others put beside the content; the base class drops it."""

    def _create_chat_result(self, response: Any, generation_info: dict | None = None) -> Any:
        result = super()._create_chat_result(response, generation_info)
        data = response if isinstance(response, dict) else response.model_dump()
        for generation, choice in zip(result.generations, data.get("choices") or [], strict=False):
            message = choice.get("message") or {}
            reasoning = message.get("reasoning_content") or message.get("reasoning")
            if isinstance(reasoning, str) and reasoning:
                generation.message.additional_kwargs["reasoning_content"] = reasoning
        return result


def message_text(message: AIMessage) -> str:
    """The text of a reply, whether ``content`` is a string or a list of content blocks."""
    if isinstance(message.content, str):
        return message.content
    parts = []
    for block in message.content:
        if isinstance(block, str):
            parts.append(block)
        elif isinstance(block, dict) and block.get("type") == "text":
            parts.append(str(block.get("text", "")))
    return "".join(parts)


def raw_reply(message: AIMessage) -> RawReply:
    """The reply as the pipeline reads it: a tool call's arguments if there is one, else the
    content; the finish reason; the reasoning text."""
    text = message_text(message)
    if message.tool_calls:
        text = json.dumps(message.tool_calls[0]["args"])
    elif message.invalid_tool_calls:
        text = str(message.invalid_tool_calls[0].get("args") or text)
    reasoning = message.additional_kwargs.get("reasoning_content")
    return RawReply(
        text=text,
        finish_reason=message.response_metadata.get("finish_reason"),
        reasoning=reasoning if isinstance(reasoning, str) else None,
    )


def _tokens(message: Any) -> tuple[int, int]:
    meta = getattr(message, "usage_metadata", None) or {}
    return int(meta.get("input_tokens", 0)), int(meta.get("output_tokens", 0))


@dataclass
class Reply(Generic[ValueT]):
    """One agent call: the value or a one-line problem, its tokens (every reply the server
    billed, usable or not), the requests made and the structured-output method used."""

    value: ValueT | None
    problem: str | None
    model: str
    input_tokens: int = 0
    output_tokens: int = 0
    requests: int = 0
    method: StructuredMethod | None = None
    endpoint: str | None = None
    notes: list[str] = field(default_factory=list)
    """How the method was found: the methods the server refused, and its answers."""
    raw: RawReply | None = None

    def usage(self, agent: AgentName, round_number: int) -> Usage:
        return Usage(
            agent=agent,
            round=round_number,
            model=self.model,
            input_tokens=self.input_tokens,
            output_tokens=self.output_tokens,
            cost_usd=estimate_cost(self.model, self.input_tokens, self.output_tokens),
            method=self.method,
            endpoint=self.endpoint if self.method else None,
            failure=self.problem,
            requests=self.requests,
            failed_calls=1 if self.problem else 0,
            notes=self.notes,
        )


@dataclass
class _Answer:
    """One request's outcome: the reply and its tokens, or the error."""

    reply: RawReply | None = None
    input_tokens: int = 0
    output_tokens: int = 0
    error: BaseException | None = None


_HTTP_ERRORS: ContextVar[list[str] | None] = ContextVar("astra_http_errors", default=None)
"""The error answers (status, Retry-After) the server gave the request running in this task."""


async def _note_http_error(response: httpx.Response) -> None:
    """httpx response hook: record an error answer for the request's own task to report."""
    seen = _HTTP_ERRORS.get()
    if seen is not None and response.status_code >= 400:
        after = response.headers.get("retry-after")
        seen.append(
            f"HTTP {response.status_code}" + (f" with Retry-After {after} s" if after else "")
        )


async def _recording(runnable: Any, messages: list[BaseMessage], seen: list[str]) -> Any:
    _HTTP_ERRORS.set(seen)  # this task's context: the hook, awaited inside it, sees the list
    return await runnable.ainvoke(messages)


class RequestCancelled(KeyboardInterrupt):
    """The run was interrupted (Ctrl-C, SIGTERM) while this request was in flight: the request
    was cancelled, its connection closed. A KeyboardInterrupt, so that no node's ``except
    Exception`` records it as the model's failure: the run stops and a resume sends it again."""


class _EventLoop:
    """A private event loop on a daemon thread: requests run there under a deadline.

    :meth:`cancel` cancels every request in flight (the asyncio task, so httpx closes the
    connection at once) and every later one, until :meth:`allow`: a request blocked for minutes
    on a slow server must not hold an interrupted run open."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self._in_flight: set[Future[Any]] = set()
        self._cancelled = False
        self._guard = threading.RLock()  # re-entrant: cancel() runs in a signal handler

    def run(self, coroutine: Coroutine[Any, Any, Any], limit: float) -> Any:
        bounded = asyncio.wait_for(coroutine, timeout=limit)
        with self._guard:
            if self._cancelled:
                bounded.close()
                raise RequestCancelled("the run was interrupted before the request was sent")
            future = asyncio.run_coroutine_threadsafe(bounded, self.loop)
            self._in_flight.add(future)
        try:
            return future.result()
        except CancelledError:
            raise RequestCancelled("the run was interrupted during the request") from None
        except BaseException:  # interrupted while waiting (the main thread's Ctrl-C): stop it
            future.cancel()
            raise
        finally:
            with self._guard:
                self._in_flight.discard(future)

    def cancel(self) -> None:
        """Cancel the requests in flight and refuse new ones (safe from a signal handler)."""
        with self._guard:
            self._cancelled = True
            in_flight = list(self._in_flight)
        for future in in_flight:
            future.cancel()

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=5)
        if not self.thread.is_alive():
            self.loop.close()


class CallTimedOut(Exception):
    """A request with its retries ran past ``timeout_s``."""


class LLM:
    """The agents' access to chat models; one ``ChatModel`` per distinct model."""

    def __init__(self, settings: LLMSettings) -> None:
        self.settings = settings
        self._models: dict[str, ChatOpenAI] = {}
        self.methods: dict[str, StructuredMethod] = {}
        """Structured-output method per ``"<endpoint> <model>"``, found on first use."""
        self._loop: _EventLoop | None = None
        self._http: httpx.AsyncClient | None = None
        """One HTTP client for every model, with the hook that records error answers."""
        self._lock = threading.Lock()
        self._cancelled = False

    def remember_methods(self, usage: Iterable[Usage]) -> None:
        """Keep the methods a run found before it stopped (its usage records), so a resumed run
        does not probe the same endpoint and model again; another endpoint is probed afresh."""
        for record in usage:
            if record.method in METHODS and record.endpoint and record.failure is None:
                key = f"{record.endpoint} {record.model}"
                self.methods.setdefault(key, record.method)

    def close(self) -> None:
        with self._lock:
            http, loop = self._http, self._loop
            self._http, self._loop = None, None  # the models built on that client go with it
            self._models = {k: m for k, m in self._models.items() if isinstance(m, ExternalChat)}
        if loop is None:
            return
        try:
            if http is not None:
                asyncio.run_coroutine_threadsafe(http.aclose(), loop.loop).result(timeout=5)
        except Exception as exc:  # closing must never hide the run's own outcome
            log.warning("llm_client_close_failed", error=str(exc))
        finally:
            loop.close()

    def cancel(self) -> None:
        """Cancel the requests in flight and every later one: each raises
        :class:`RequestCancelled` within a second (the runner calls this on Ctrl-C or SIGTERM;
        an external agent's request is a file, not a connection, and needs nothing)."""
        self._cancelled = True  # no lock: the handler may interrupt a holder of self._lock
        loop = self._loop
        if loop is not None:
            loop.cancel()

    def chat_model(self, agent: AgentName) -> ChatOpenAI:
        with self._lock:  # candidate branches ask at once: one model and one client each
            return self._chat_model(agent)

    def _chat_model(self, agent: AgentName) -> ChatOpenAI:
        name = self.settings.model_for(agent)
        if name == EXTERNAL:  # answered through interrupt(): one chat model per agent
            key = f"{EXTERNAL}:{agent}"
            if key not in self._models:
                self._models[key] = ExternalChat.for_agent(agent)
            return self._models[key]
        if name not in self._models:
            options: dict[str, Any] = {
                "model": name,
                "timeout": self.settings.timeout_s,
                "max_retries": self.settings.max_retries,
                "api_key": api_key() or PLACEHOLDER_KEY,
                "http_async_client": self._http_client(),
            }
            if self.settings.base_url:
                options["base_url"] = self.settings.base_url
            if self.settings.max_output_tokens is not None:
                options["max_tokens"] = self.settings.max_output_tokens
            if is_reasoning_model(name):
                if self.settings.reasoning_effort:
                    options["reasoning_effort"] = self.settings.reasoning_effort
            elif self.settings.temperature is not None:
                options["temperature"] = self.settings.temperature
            self._models[name] = ChatModel(**options)
        return self._models[name]

    def _http_client(self) -> httpx.AsyncClient:
        """The shared client (called with ``_lock`` held). Redirects, connection limits and the
        timeout as the OpenAI SDK's own client has them; the hook records error answers."""
        if self._http is None:
            self._http = httpx.AsyncClient(
                follow_redirects=True,
                timeout=httpx.Timeout(self.settings.timeout_s),
                limits=httpx.Limits(max_connections=1000, max_keepalive_connections=100),
                event_hooks={"response": [_note_http_error]},
            )
        return self._http

    def _request(self, runnable: Any, messages: list[BaseMessage], external: bool) -> _Answer:
        """One request with the SDK's retries, bounded as a whole by ``timeout_s``.

        An external agent's request runs in the node's own thread instead: its ``interrupt()``
        needs the graph's context, and no limit applies to a person's answer.
        """
        with self._lock:
            if self._loop is None and not external:
                self._loop = _EventLoop()
        if self._cancelled and not external:  # read after the loop exists: see cancel()
            raise RequestCancelled("the run was interrupted before the request was sent")
        limit = self.settings.timeout_s
        seen: list[str] = []
        try:
            if external:
                message = runnable.invoke(messages)
            else:
                assert self._loop is not None
                message = self._loop.run(_recording(runnable, messages, seen), limit)
        except GraphBubbleUp:  # an external agent's interrupt: the run stops here
            raise
        except TimeoutError:
            last = f"; the server's last answer: {seen[-1]}" if seen else ""
            return _Answer(error=CallTimedOut(f"no reply within {limit:g} s (--llm-timeout){last}"))
        except openai.LengthFinishReasonError as exc:  # the SDK's parse() refuses a cut reply
            completion = exc.completion
            content = completion.choices[0].message.content if completion.choices else ""
            usage = completion.usage
            return _Answer(
                RawReply(content or "", "length"),
                usage.prompt_tokens if usage else 0,
                usage.completion_tokens if usage else 0,
            )
        except Exception as exc:  # any client failure becomes a recorded problem
            return _Answer(error=exc)
        inputs, outputs = _tokens(message)
        return _Answer(raw_reply(message), inputs, outputs)

    def _describe(self, exc: BaseException) -> str:
        if isinstance(exc, CallTimedOut):
            return f"{self.settings.endpoint()}: {exc}"
        return describe_error(exc, self.settings.endpoint())

    def ask_text(self, agent: AgentName, system: str, user: str) -> Reply[RawReply]:
        """A free-text request (the coding agent's): the raw reply, read by the caller."""
        model = self.chat_model(agent)
        external = isinstance(model, ExternalChat)
        answer = self._request(model, [SystemMessage(system), HumanMessage(user)], external)
        reply: Reply[RawReply] = Reply(
            None, None, model.model_name, answer.input_tokens, answer.output_tokens, 1
        )
        if answer.error is not None:
            reply.problem = f"LLM call failed: {self._describe(answer.error)}"
        else:
            reply.value = reply.raw = answer.reply
        return reply

    def _bind(self, model: ChatOpenAI, schema: type[BaseModel], method: StructuredMethod) -> Any:
        if method == "json_schema":
            function = convert_to_openai_function(schema, strict=True)
            response_format = {
                "type": "json_schema",
                "json_schema": {
                    "name": function["name"],
                    "description": function.get("description", ""),
                    "schema": function["parameters"],
                    "strict": True,
                },
            }
            return model.bind(response_format=response_format)
        if method == "function_calling":
            return model.bind_tools([schema], tool_choice=schema.__name__)
        if method == "json_mode":
            return model.bind(response_format={"type": "json_object"})
        return model

    def ask_structured(
        self, agent: AgentName, schema: type[SchemaT], system: str, user: str
    ) -> Reply[SchemaT]:
        """A reply validated against ``schema``, with one re-ask; the method found on the first
        call to this endpoint and model is kept for the rest of the run. Should the server
        refuse it later (restarted without guided decoding, another server on the same port),
        the other methods are probed again in order."""
        model = self.chat_model(agent)
        key = f"{self.settings.endpoint()} {model.model_name}"
        known = self.methods.get(key)
        reply: Reply[SchemaT] = Reply(None, None, model.model_name)
        order = (known, *(m for m in METHODS if m != known)) if known else METHODS
        for method in order:
            prompt = user
            if method in ("json_mode", "text"):  # the request itself does not carry the schema
                prompt = f"{user}\n\n{schema_instruction(schema)}"
            messages: list[BaseMessage] = [SystemMessage(system), HumanMessage(prompt)]
            runnable = self._bind(model, schema, method)
            answer = self._count(reply, runnable, messages, isinstance(model, ExternalChat))
            if answer.error is not None:
                if method != "text" and refuses_method(answer.error):
                    was = " (it worked before: probing again)" if method == known else ""
                    reply.notes.append(f"{method} refused{was}: {self._describe(answer.error)}")
                    continue
                reply.problem = f"LLM call failed: {self._describe(answer.error)}"
                return reply
            self.methods[key] = reply.method = method
            reply.endpoint = self.settings.endpoint()
            assert answer.reply is not None
            parsed = read_structured(answer.reply, schema)
            if isinstance(parsed, ReplyProblem):  # ask once more, with what was wrong
                reply.notes.append(f"re-asked: {parsed.message}")
                messages += [AIMessage(answer.reply.text), HumanMessage(parsed.repair)]
                again = self._count(reply, runnable, messages, isinstance(model, ExternalChat))
                if again.error is not None:
                    reply.problem = f"LLM call failed on the re-ask: {self._describe(again.error)}"
                    return reply
                assert again.reply is not None
                parsed = read_structured(again.reply, schema)
            if isinstance(parsed, ReplyProblem):
                reply.problem = f"unusable reply after one re-ask: {parsed.message}"
            else:
                reply.value = parsed
            return reply
        reply.problem = "every structured-output method was refused: " + "; ".join(reply.notes)
        return reply

    def _count(
        self, reply: Reply[Any], runnable: Any, messages: list[BaseMessage], external: bool
    ) -> _Answer:
        answer = self._request(runnable, messages, external)
        reply.requests += 1
        reply.input_tokens += answer.input_tokens
        reply.output_tokens += answer.output_tokens
        reply.raw = answer.reply or reply.raw
        return answer


def every_call_failed(usage: Iterable[Usage]) -> str | None:
    """When no LLM call of a run gave a usable reply: one line naming the last failure."""
    calls = list(usage)
    if not calls or any(u.failed_calls < u.calls for u in calls):
        return None
    return f"every LLM call failed ({len(calls)} calls); the last: {calls[-1].failure}"


# --- preflight --------------------------------------------------------------------------------


class EndpointError(ValueError):
    """The model endpoint cannot serve this run; the message names the flag and the answer."""


def _url_problem(url: str) -> str | None:
    parsed = urlparse(url)
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        return (
            f"--base-url {url!r}: expected an http:// or https:// URL such as http://host:8000/v1"
        )
    try:
        _ = parsed.port
    except ValueError as exc:
        return f"--base-url {url!r}: {exc}"
    return None


def _key_source() -> str:
    for name in API_KEY_VARIABLES:
        if os.environ.get(name, "").strip():
            return name
    return "OPENAI_API_KEY (none set)"


def preflight(settings: LLMSettings, agents: Iterable[AgentName]) -> None:
    """Check the endpoint before a run starts; raise EndpointError with one line if it cannot
    serve: a malformed URL, no answer, a refused key, or a model it does not serve.

    ``/models`` answers the first three at once; a model it does not list is tried with a
    one-token request, since some servers (llama.cpp) answer to any model name.
    """
    models = served_models(settings, agents)
    if not models:
        return  # every agent is answered outside: no endpoint to check
    endpoint = settings.endpoint()
    flag = "--base-url " + endpoint if settings.base_url else f"the OpenAI API ({endpoint})"
    if settings.base_url and (problem := _url_problem(settings.base_url)):
        raise EndpointError(problem)
    client = openai.OpenAI(
        base_url=endpoint,
        api_key=api_key() or PLACEHOLDER_KEY,
        max_retries=1,
        timeout=PREFLIGHT_TIMEOUT_S,
    )
    with client:
        served: list[str] | None = None
        try:
            served = [m.id for m in client.models.list()]
        except (openai.AuthenticationError, openai.PermissionDeniedError) as exc:
            raise EndpointError(
                f"{_key_source()}: {flag} refused the key: {describe_error(exc, endpoint)}"
            ) from None
        except openai.APIStatusError:
            served = None  # no /models on this server: the one-token request decides
        except openai.APIConnectionError as exc:
            raise EndpointError(f"{flag}: {describe_error(exc, endpoint)}") from None
        except Exception:  # an answer that is not an OpenAI model list (an HTML page, ...)
            served = None
        for model in models:
            if served is not None and model in served:
                continue
            option = "--model" if model == settings.model else "--agent-model"
            _probe(client, f"{option} {model}", model, flag, served)


def _probe(
    client: openai.OpenAI, option: str, model: str, flag: str, served: list[str] | None
) -> None:
    """A one-token request: does the server answer for ``model``?"""
    endpoint = str(client.base_url).rstrip("/")
    try:
        client.chat.completions.create(
            model=model, messages=[{"role": "user", "content": "Say OK."}], max_tokens=1
        )
    except (openai.AuthenticationError, openai.PermissionDeniedError) as exc:
        raise EndpointError(
            f"{_key_source()}: {flag} refused the key: {describe_error(exc, endpoint)}"
        ) from None
    except openai.APIStatusError as exc:
        message = server_message(exc).lower()
        if exc.status_code == 404 and "model" not in message and served is None:
            raise EndpointError(  # neither /models nor /chat/completions exist there
                f"{flag}: no OpenAI-compatible API at this URL (POST /chat/completions: "
                f"{describe_error(exc, endpoint)}); most servers serve it under /v1"
            ) from None
        if exc.status_code == 404 or (exc.status_code in REFUSAL_STATUSES and "model" in message):
            listed = f" (it serves: {', '.join(served[:8])})" if served else ""
            raise EndpointError(
                f"{option}: not served by {endpoint}{listed}: {describe_error(exc, endpoint)}"
            ) from None
        if exc.status_code not in (400, 422):  # 400/422: a parameter it dislikes, model known
            raise EndpointError(f"{flag}: {describe_error(exc, endpoint)}") from None
    except Exception as exc:  # no connection, or an answer that is not a chat completion
        raise EndpointError(f"{flag}: {describe_error(exc, endpoint)}") from None
