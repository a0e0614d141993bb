"""The run directory on disk: where every file of a run goes (``rundir``) and the code
provenance written beside results (``provenance``).

May import: the standard library only. It sits beside ``kernel`` at the bottom, so the LLM
layer (external answers), the agents and the report all read and write runs the same way.
"""
