"""The evaluation harness: compile, load, launch, verify, time and tune kernels on the GPU.

One concern per module (``docs/ARCHITECTURE.md`` lists them): NVRTC and the compile cache, the
launch of one instantiation, the check's cases and its defences (``verify``, ``compare``,
``oracle``, ``poison``, ``domain``, ``module_state``), the timing protocols and the bench, the
tuner, the worker process that owns the CUDA context and the evaluator that talks to it.

May import: ``kernel``, ``store``, the standard library, NumPy, Pydantic, and CuPy inside the
functions that touch the GPU. Never LangGraph or LangChain (``tests/test_layers.py``): the
harness is usable on its own, and the agents reach the GPU only through its evaluator protocol.
"""
