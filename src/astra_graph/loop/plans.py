"""What the LLM agents return (structured output): shapes proposed, plans, the test suite.

Pydantic models, validated by :mod:`astra_graph.llm.replies`; their JSON schemas are what a
server with guided decoding is given, so they stay strict-safe (lists of named values, no open
dicts where a model writes).
"""

from __future__ import annotations

from pydantic import BaseModel, Field


class DimValue(BaseModel):
    """One dimension of a shape. A list of these (not a dict) keeps the JSON schema strict-safe."""

    name: str
    value: int


class ProposedShape(BaseModel):
    dims: list[DimValue] = Field(description="a value for every dim of the contract")
    why: str = Field(description="what this shape exercises: a real model size, or an edge")


class ShapeProposals(BaseModel):
    """The testing agent's reply."""

    shapes: list[ProposedShape]


class PlannedChange(BaseModel):
    change: str = Field(description="what to change in the code")
    why: str = Field(description="the evidence from the profile or the verdicts")
    expected_effect: str = Field(description="what should improve, and roughly by how much")


class Plan(BaseModel):
    """The planning agent's reply: ordered changes for the coding agent."""

    summary: str = Field(description="one line: the idea of this round")
    changes: list[PlannedChange]


class PlanSet(BaseModel):
    """The planning agent's reply in a best-of-K round: K distinct plans, one per candidate."""

    plans: list[Plan] = Field(description="distinct plans, each a different idea")


# --- the record of a round ---------------------------------------------------------------------


class TestSuite(BaseModel):
    """The testing agent's extra shapes; the agents also see the contract's tuning and edge
    suites (read from the contract, not copied here)."""

    __test__ = False  # not a pytest class

    extra: list[dict[str, int]] = []
    rejected: list[str] = []
    """Proposed shapes that were dropped, each with the reason."""
    problem: str | None = None
    """Why the testing agent's reply could not be used (LLM error, malformed reply), if so."""
