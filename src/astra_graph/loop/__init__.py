"""The optimisation loop: the graph's state and round records, its runtime context, the graphs
(multi-agent, single-agent, offline) and their nodes (``agents``), progress events, and the
result read off the final state.

May import: ``kernel``, ``store``, ``harness``, ``llm`` and LangGraph. Never ``report``, ``run``
or the command line.
"""
