"""``astra`` as a real process whose GPU harness is scripted: for tests that signal a run.

``python tests/scripted_astra.py optimize ...`` runs the real command line (:func:`astra_graph.
cli.main`) with the evaluation pool replaced by one :class:`fake_evaluator.FakeEvaluator` and a
GPU architecture reported, so a run needs no GPU. The candidate's ``// fake:`` marks say what
the harness answers; ``ASTRA_FAKE_DELAYS=check=30,tune=30`` makes the first such call that slow,
sleeping in a real worker process (``ASTRA_FAKE_IN_C=check``: in one C call on the calling thread
instead, as an NVRTC compile blocks), and ``ASTRA_FAKE_SLOW_STARTED`` names a file the slow call's
kind is written to as it starts. Charts are not drawn (conftest.py's ``plots_not_drawn`` says why).
Everything else, the model client, the graph, the checkpoints, the signal handling and the exit
code, is the real thing.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from astra_graph import cli
from astra_graph.commands import optimize as command
from astra_graph.harness.pool import GpuPool, Slot
from astra_graph.report import plots
from fake_evaluator import FakeEvaluator

PNG_STAND_IN = b"\x89PNG\r\n\x1a\n (not drawn in tests)"


DELAYS = "ASTRA_FAKE_DELAYS"
STARTED = "ASTRA_FAKE_SLOW_STARTED"
IN_C = "ASTRA_FAKE_IN_C"


def _delays() -> dict[str, float]:
    pairs = (item.split("=") for item in os.environ.get(DELAYS, "").split(",") if item)
    return {kind: float(seconds) for kind, seconds in pairs}


def _pool(backend: str | None, gpus: str | None) -> GpuPool:
    started = os.environ.get(STARTED)

    def tell(kind: str) -> None:
        if started:
            Path(started).write_text(kind)

    in_c = frozenset(item for item in os.environ.get(IN_C, "").split(",") if item)
    fake = FakeEvaluator(delays_s=_delays(), in_c=in_c, on_slow=tell)
    return GpuPool([Slot(gpu="0", evaluator=fake)])


if __name__ == "__main__":
    command.open_pool = _pool  # type: ignore[assignment]  # the scripted harness
    command.gpu_arch = lambda: "sm_90"
    plots._png = lambda figure: PNG_STAND_IN  # type: ignore[assignment]
    sys.exit(cli.main())
