"""Results out: a finished run as a drop-in torch op (``torch_package``), an upstream patch
against the framework's launcher (``patch``), and the proof of both on the GPU (``verify``:
against the original op built from source; ``gate``: keep or revert inside a serving block).

May import: ``kernel``, ``store``, ``harness``, ``loop`` (the run's recorded state) and the
standard library; torch and CuPy only inside the GPU paths. The generated package imports
nothing of ``astra_graph`` (its shipped files are in ``shipped/``).
"""
