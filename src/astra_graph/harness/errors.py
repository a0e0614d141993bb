"""Failures of the check job that are not verdicts on the candidate, and the one that is."""

from __future__ import annotations

from astra_graph.harness.results import Verdict


class BaselineError(RuntimeError):
    """The baseline itself failed to compile or launch: bad input, not the candidate's fault."""


class NoGpu(RuntimeError):
    """The worker sees no CUDA device."""


class Rejected(Exception):
    """A case failed: ``verdict`` says why."""

    def __init__(self, verdict: Verdict) -> None:
        super().__init__(verdict.message)
        self.verdict = verdict
