"""Framework kernels as the framework writes them (``astra import``).

One module per job: :mod:`~astra_graph.framework.parse` reads C++ with tree-sitter (kernels,
launchers, launch sites, macros), :mod:`~astra_graph.framework.flatten` inlines a file's
framework includes into one self-contained file, :mod:`~astra_graph.framework.launchers` maps a
launcher's arguments to kernel parameters, dims, dtypes and launch geometry,
:mod:`~astra_graph.framework.callers` reads a raw-pointer header launcher through its caller,
:mod:`~astra_graph.framework.values` makes a value-dispatch macro one instantiation, and
:mod:`~astra_graph.framework.device` prepares the device code for NVRTC (c10 types as CUDA's,
the headers NVRTC lacks). Nothing here imports LangGraph.

May import: ``kernel`` and ``harness`` (compiling the device part, launching the original as
the oracle) and tree-sitter (lazily).
"""
