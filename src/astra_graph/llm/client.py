"""Chat models for the agents: langchain-openai's ``ChatOpenAI`` against OpenAI or any
OpenAI-compatible server (``base_url``): vLLM, SGLang, Ollama, llama.cpp, LM Studio, gateways.

- **Structured output on every server.** The first of json_schema, tool calling, JSON mode and
  plain text that the endpoint accepts is found on the first structured call, per endpoint and
  model, and remembered for the run (each :class:`~astra_graph.llm.usage.Usage` records it, so it is
  in ``run.json``). A method counts as refused when the server answers it with 400, 415, 422 or
  501 (not a context-length complaint). Whatever the method, the reply goes through
  :mod:`astra_graph.llm.replies` (fences, prose, ``<think>``, ``reasoning_content``); a reply that
  does not validate is asked again once, with the validation error, before the call fails.
- **Retries** are the OpenAI SDK's (exponential backoff, ``Retry-After`` honoured up to two
  minutes): ``max_retries`` of them. ``timeout_s`` bounds a whole request including its
  retries and waits: the request runs on a private event loop under ``asyncio.wait_for``. A
  request ended by that limit names the server's last error answer (a 429 and its
  ``Retry-After``, say), seen through an httpx response hook, instead of only the limit.
- **Truncation** (``finish_reason == "length"``) is kept on the reply; ``max_output_tokens`` is
  the output limit sent with every request (None: the server's own).
- **Tokens** the server reports are counted for every reply, usable or not.

Beside it: :mod:`~astra_graph.llm.settings` (settings, key, prices), :mod:`~astra_graph.llm.errors`
(one-line errors), :mod:`~astra_graph.llm.chat` (the chat model and :class:`Reply`) and
:mod:`~astra_graph.llm.preflight` (checking an endpoint before a run).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine, Iterable
from concurrent.futures import CancelledError, Future
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, TypeVar

import httpx
import openai
import structlog
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
from langchain_core.utils.function_calling import convert_to_openai_function
from langchain_openai import ChatOpenAI
from langgraph.errors import GraphBubbleUp
from pydantic import BaseModel

from astra_graph.llm.chat import ChatModel, Reply, StructuredMethod, raw_reply
from astra_graph.llm.errors import describe_error, refuses_method
from astra_graph.llm.external import EXTERNAL
from astra_graph.llm.external_chat import ExternalChat
from astra_graph.llm.replies import RawReply, ReplyProblem, read_structured, schema_instruction
from astra_graph.llm.settings import PLACEHOLDER_KEY, LLMSettings, api_key, is_reasoning_model
from astra_graph.llm.usage import AgentName, Usage

log = structlog.get_logger(__name__)
METHODS: tuple[StructuredMethod, ...] = ("json_schema", "function_calling", "json_mode", "text")
"""Tried in this order: the strongest guarantee first, plain text (always accepted) last."""
SchemaT = TypeVar("SchemaT", bound=BaseModel)


def _tokens(message: Any) -> tuple[int, int]:
    meta = getattr(message, "usage_metadata", None) or {}
    return int(meta.get("input_tokens", 0)), int(meta.get("output_tokens", 0))


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
