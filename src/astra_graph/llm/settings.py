"""Which models the agents use and what they cost: :class:`LLMSettings` (no secret in it), the
API key from the environment, which models a server must answer for, and the price table.

Cost is estimated from :data:`PRICES_PER_MILLION` (USD per million input and output tokens,
OpenAI's list prices as of 2025); a model not in the table costs ``None`` (unknown). The API key
comes from ``OPENAI_API_KEY`` or ``ASTRA_API_KEY`` and lives only inside the client objects: it
never enters the graph state, the checkpoint, ``run.json`` or a log.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from astra_graph.llm.external import EXTERNAL
from astra_graph.llm.usage import AgentName

DEFAULT_MODEL = "o4-mini"
API_KEY_VARIABLES = ("OPENAI_API_KEY", "ASTRA_API_KEY")
PLACEHOLDER_KEY = "not-needed"
"""Sent to a ``base_url`` server when no key is set (local servers ignore it)."""
OPENAI_URL = "https://api.openai.com/v1"

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
