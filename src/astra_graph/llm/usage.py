"""Which agents call a model, and what their calls cost: the record the LLM client writes.

It sits below the LLM client (:mod:`astra_graph.llm.client`, :mod:`astra_graph.llm.chat`) and
the graph's state (:mod:`astra_graph.loop.state`), which both use it, so that the client never
imports the graph's state. Pydantic only.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel

AgentName = Literal["testing", "planning", "coding", "single"]
"""The agents that call a model (each may have its own, ``--agent-model AGENT=MODEL``)."""


class Usage(BaseModel):
    """Tokens and estimated cost of one agent's LLM calls in one round (round 0: before any)."""

    agent: AgentName
    round: int
    model: str
    calls: int = 1
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float | None = None
    """None when the model's price is unknown."""
    requests: int = 1
    """HTTP requests behind these calls: a re-ask or a method refused by the server adds one."""
    method: str | None = None
    """The structured-output method the endpoint ended up with (json_schema, function_calling,
    json_mode, text); None for free-text calls."""
    endpoint: str | None = None
    """The base URL the structured calls went to, so that a resumed run keeps its method there
    (None for free-text calls)."""
    failure: str | None = None
    """Why the call gave nothing usable (the server's error, or the reply's problem)."""
    failed_calls: int = 0
    notes: list[str] = []
    """How the call went: methods the server refused, re-asks."""
