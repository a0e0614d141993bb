"""Chat models for the agents: langchain-openai's ``ChatOpenAI`` against OpenAI or any
OpenAI-compatible server (``base_url``), with our own retry loop and token accounting.

- The API key comes from ``OPENAI_API_KEY`` or ``ASTRA_API_KEY`` and lives only inside the
  client object: it never enters the graph state, the checkpoint, ``run.json`` or a log.
- Reasoning models (o-series, gpt-5*) get no temperature; ``reasoning_effort`` is passed on.
- Transport failures (connection, timeout, 429, 5xx) are retried ``max_retries`` times, waiting
  ``backoff_s``, then twice that, and so on (tests set it to 0). Other failures, and replies
  that cannot be parsed, come back as a :class:`Reply` with ``problem`` set: an agent records
  them and the run goes on.
- Cost is estimated from :data:`PRICES_PER_MILLION` (USD per million input and output tokens,
  OpenAI's list prices as of 2025); a model not in the table costs ``None`` (unknown).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import openai
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage
from langchain_openai import ChatOpenAI
from langgraph.errors import GraphBubbleUp
from pydantic import BaseModel

from astra_graph.external import EXTERNAL
from astra_graph.external_chat import ExternalChat
from astra_graph.state import AgentName, Usage

DEFAULT_MODEL = "o4-mini"
API_KEY_VARIABLES = ("OPENAI_API_KEY", "ASTRA_API_KEY")
PLACEHOLDER_KEY = "not-needed"
"""Sent to a ``base_url`` server when no key is set (local servers ignore it)."""

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
    max_retries: int = 3
    backoff_s: float = 2.0
    reasoning_effort: str | None = None
    temperature: float | None = None
    """Only for models that accept one; ignored for reasoning models."""

    def model_for(self, agent: AgentName) -> str:
        return self.agent_models.get(agent, self.model)


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
    named = (
        {settings.model_for(a) for a in agents}
        if agents is not None
        else {settings.model, *settings.agent_models.values()}
    )
    if named <= {EXTERNAL}:
        return None
    if api_key() is None and not settings.base_url:
        return (
            "no model endpoint configured: set OPENAI_API_KEY (or ASTRA_API_KEY), "
            "or pass --base-url for an OpenAI-compatible server"
        )
    return None


def is_reasoning_model(model: str) -> bool:
    name = model.rsplit("/", 1)[-1].lower()
    return name.startswith("gpt-5") or (len(name) > 1 and name[0] == "o" and name[1].isdigit())


def estimate_cost(model: str, input_tokens: int, output_tokens: int) -> float | None:
    price = PRICES_PER_MILLION.get(model.rsplit("/", 1)[-1].lower())
    if price is None:
        return None
    return (input_tokens * price[0] + output_tokens * price[1]) / 1e6


@dataclass
class Reply(Generic[ValueT]):
    """One agent call: the value (text or parsed model) or a one-line problem, and its tokens."""

    value: ValueT | None
    problem: str | None
    model: str
    input_tokens: int = 0
    output_tokens: int = 0

    def usage(self, agent: AgentName, round_number: int) -> Usage:
        return Usage(
            agent=agent,
            round=round_number,
            model=self.model,
            input_tokens=self.input_tokens,
            output_tokens=self.output_tokens,
            cost_usd=estimate_cost(self.model, self.input_tokens, self.output_tokens),
        )


def _retryable(exc: Exception) -> bool:
    if isinstance(exc, openai.APIConnectionError | openai.APITimeoutError):
        return True
    return isinstance(exc, openai.APIStatusError) and (
        exc.status_code == 429 or exc.status_code >= 500
    )


def _one_line(exc: Exception) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text[:300]}"


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


def _tokens(message: Any) -> tuple[int, int]:
    meta = getattr(message, "usage_metadata", None) or {}
    return int(meta.get("input_tokens", 0)), int(meta.get("output_tokens", 0))


class LLM:
    """The agents' access to chat models; one ``ChatOpenAI`` per distinct model."""

    def __init__(self, settings: LLMSettings) -> None:
        self.settings = settings
        self._models: dict[str, ChatOpenAI] = {}

    def chat_model(self, agent: AgentName) -> ChatOpenAI:
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
                "max_retries": 0,  # retried here, with a backoff tests can turn off
                "api_key": api_key() or PLACEHOLDER_KEY,
            }
            if self.settings.base_url:
                options["base_url"] = self.settings.base_url
            if is_reasoning_model(name):
                if self.settings.reasoning_effort:
                    options["reasoning_effort"] = self.settings.reasoning_effort
            elif self.settings.temperature is not None:
                options["temperature"] = self.settings.temperature
            self._models[name] = ChatOpenAI(**options)
        return self._models[name]

    def _call(self, runnable: Any, system: str, user: str) -> tuple[Any, str]:
        """Invoke with retries; returns (output, "") or (None, problem)."""
        messages = [SystemMessage(system), HumanMessage(user)]
        attempts = self.settings.max_retries + 1
        for attempt in range(attempts):
            try:
                return runnable.invoke(messages), ""
            except GraphBubbleUp:  # an external agent's interrupt: the run stops here
                raise
            except Exception as exc:  # any client failure becomes a recorded problem
                if not _retryable(exc) or attempt == attempts - 1:
                    suffix = f" (after {attempt + 1} tries)" if attempt else ""
                    return None, f"LLM call failed{suffix}: {_one_line(exc)}"
                time.sleep(self.settings.backoff_s * 2**attempt)
        raise AssertionError("unreachable")

    def ask_text(self, agent: AgentName, system: str, user: str) -> Reply[str]:
        model = self.chat_model(agent)
        output, problem = self._call(model, system, user)
        if output is None:
            return Reply(None, problem, model.model_name)
        text = message_text(output)
        inputs, outputs = _tokens(output)
        return Reply(
            text if text.strip() else None,
            None if text.strip() else "the model returned an empty reply",
            model.model_name,
            inputs,
            outputs,
        )

    def ask_structured(
        self, agent: AgentName, schema: type[SchemaT], system: str, user: str
    ) -> Reply[SchemaT]:
        model = self.chat_model(agent)
        runnable = model.with_structured_output(schema, method="json_schema", include_raw=True)
        output, problem = self._call(runnable, system, user)
        if output is None:
            return Reply(None, problem, model.model_name)
        inputs, outputs = _tokens(output.get("raw"))
        parsed = output.get("parsed")
        if output.get("parsing_error") is not None or not isinstance(parsed, schema):
            error = output.get("parsing_error")
            detail = _one_line(error) if isinstance(error, Exception) else "no structured reply"
            return Reply(
                None, f"unusable structured reply: {detail}", model.model_name, inputs, outputs
            )
        return Reply(parsed, None, model.model_name, inputs, outputs)
