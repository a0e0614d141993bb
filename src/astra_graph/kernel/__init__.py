"""Describing operations: what a kernel computes and how it is called, with no GPU and no model.

The contract (``contract.toml``: dims, arguments, scalars, suites, bindings), the implementation
header (``// astra:`` lines of a ``.cu``), the kernel's C++ signature, the catalog that finds
operations, safe arithmetic expressions, element types, and the per-run loader.

May import: the standard library, NumPy and Pydantic only; nothing else of ``astra_graph``.
Everything above builds on this package.
"""
