"""Running optimisations: ``optimize()`` for one kernel (``runner``) and several kernels over
the GPU pool (``many``).

May import: every layer below (``kernel``, ``store``, ``harness``, ``llm``, ``loop``,
``report``). Imported by the commands and the Python API (``astra_graph.optimize``).
"""
