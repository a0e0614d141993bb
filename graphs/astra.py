"""The astra graph as LangGraph Studio sees it (``make studio``; see docs/STUDIO.md).

``langgraph dev`` loads ``graph`` from here, as named in ``langgraph.json``. It must be
compiled without a checkpointer: the server brings its own and refuses a graph that has one.
Runs started from Studio need the same environment as ``astra optimize`` (model endpoint and
key, and a GPU for the harness); drawing and inspecting the graph needs neither.
"""

from astra_graph.loop.graph import graph

__all__ = ["graph"]
