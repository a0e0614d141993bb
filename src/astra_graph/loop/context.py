"""The graph's runtime context: what the nodes use but never checkpoint.

The evaluator (a worker process with the GPU), the chat models (holding the API key) and the
timing mode are supplied per run (``graph.invoke(..., context=Context(...))``); none of them
enters the state, so none is written to the checkpoint or ``run.json``. Left unset (as in
LangGraph Studio), they default to a shared GPU pool (one harness ``Evaluator`` per visible
GPU, ``harness.pool``) started on first use and to models configured from the environment.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cache
from typing import ClassVar

from pydantic import ConfigDict
from pydantic.json_schema import SkipJsonSchema

from astra_graph.harness.compile import DEFAULT_ARCH
from astra_graph.harness.protocol import EvaluatorLike
from astra_graph.harness.results import TimingMode
from astra_graph.llm.client import LLM
from astra_graph.llm.settings import DEFAULT_MODEL, LLMSettings


@cache
def _shared_evaluator() -> EvaluatorLike:
    """One pool for every run of this process (Studio's): a worker per visible GPU, or Ray
    actors with ``ASTRA_BACKEND=ray``, so best-of-K branches use every GPU there too."""
    from astra_graph.harness.backends import open_pool

    return open_pool()


@dataclass(kw_only=True)
class Context:
    """What a run supplies; Studio's context form shows the plain settings (model, timing
    mode, tuning budget, arch), not the objects, which only a Python caller can give."""

    __pydantic_config__: ClassVar[ConfigDict] = ConfigDict(arbitrary_types_allowed=True)

    evaluator: SkipJsonSchema[EvaluatorLike | None] = None
    """Verifies and times candidates; None: a shared GPU pool (``harness.backends.open_pool``),
    started on first use."""
    llm: SkipJsonSchema[LLM | None] = None
    """The agents' chat models; None: ``LLMSettings(model=model)`` (key from the environment)."""
    model: str = DEFAULT_MODEL
    """Every agent's model when ``llm`` is None; ``external`` answers the agents' requests
    through interrupts (a Studio assistant with the context ``{"model": "external"}``)."""
    timing_mode: TimingMode = "device"
    tune_budget_s: float = 60.0
    """Time budget of each tunable sweep (the baseline's and each accepted candidate's)."""
    arch: str | None = None
    """Architecture for the local compile check that precedes every GPU check; None: the
    evaluator's GPU's (so the check compiles the cubin the worker then loads from the cache,
    once per candidate on any GPU), or sm_90 when the evaluator cannot say."""
    _default_llm: SkipJsonSchema[LLM | None] = field(default=None, repr=False)

    def compile_arch(self) -> str:
        """The architecture of the local compile check (see ``arch``)."""
        if self.arch is not None:
            return self.arch
        arch = getattr(self.get_evaluator(), "arch", None)
        return arch() if callable(arch) else DEFAULT_ARCH

    def get_evaluator(self) -> EvaluatorLike:
        return self.evaluator if self.evaluator is not None else _shared_evaluator()

    def get_llm(self) -> LLM:
        if self.llm is not None:
            return self.llm
        if self._default_llm is None:
            self._default_llm = LLM(LLMSettings(model=self.model))
        return self._default_llm
