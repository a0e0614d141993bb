"""astra-graph: LLM agents that make existing CUDA kernels faster, with every speedup proven."""

__version__ = "0.1.0"
