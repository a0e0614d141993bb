"""The paper's single-agent baseline as LangGraph Studio sees it (``--agents single``).

Served beside ``astra`` (``langgraph.json``); compiled without a checkpointer, as the server
requires. See graphs/astra.py and docs/STUDIO.md.
"""

from astra_graph.loop.single_graph import graph

__all__ = ["graph"]
