"""astra-graph: LLM agents that make existing CUDA kernels faster, with every speedup proven.

``from astra_graph import optimize`` (or ``astra_graph.optimize(kernel, ...)``) runs the agent
loop on one kernel (``astra_graph.run.runner``). The names below load on first use, so that
``import astra_graph`` (and the ``astra`` command line) does not pay for LangGraph's import.

Every exception ``optimize()`` raises is importable from here: ConfigurationError (bad
arguments or endpoint), ContractError (a bad kernel or contract), HarnessUnavailable (no GPU),
RunFailed and RunInterrupted (Ctrl-C or SIGTERM; resume the run).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

if TYPE_CHECKING:
    from astra_graph.harness.evaluator import HarnessUnavailable
    from astra_graph.kernel.contract import ContractError
    from astra_graph.loop.state import OptimizationResult
    from astra_graph.run.runner import ConfigurationError, RunFailed, RunInterrupted, optimize

_LAZY = {
    "optimize": "astra_graph.run.runner",
    "ConfigurationError": "astra_graph.run.runner",
    "RunFailed": "astra_graph.run.runner",
    "RunInterrupted": "astra_graph.run.runner",
    "ContractError": "astra_graph.kernel.contract",
    "HarnessUnavailable": "astra_graph.harness.evaluator",
    "OptimizationResult": "astra_graph.loop.state",
}

__all__ = [
    "ConfigurationError",
    "ContractError",
    "HarnessUnavailable",
    "OptimizationResult",
    "RunFailed",
    "RunInterrupted",
    "__version__",
    "optimize",
]


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'astra_graph' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(_LAZY[name]), name)
    globals()[name] = value
    return value
