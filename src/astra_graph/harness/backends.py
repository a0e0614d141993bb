"""The choice of evaluation backend: the local pool over this host's GPUs or Ray actors.

It lives apart from both so that neither imports the other: ``ray_backend`` builds on
``pool``'s slots, and this module, above both, picks one by a flag or ``ASTRA_BACKEND``.
"""

from __future__ import annotations

from astra_graph.harness.pool import (
    GpuPool,
    PoolConfigError,
    backend_choice,
    local_pool,
    select_gpus,
    visible_gpus,
)


def open_pool(backend: str | None = None, gpus: str | None = None) -> GpuPool:
    """The evaluation pool a run uses: ``local`` (default) over the GPUs ``--gpus`` chooses, or
    ``ray`` over one actor per GPU of the Ray cluster (``RAY_ADDRESS``, else a local one)."""
    chosen = backend_choice(backend)
    if chosen == "ray":
        if gpus is not None:
            raise PoolConfigError(
                "--gpus: chooses GPUs of this host; with the ray backend the pool has one "
                "actor per GPU of the cluster"
            )
        from astra_graph.harness.ray_backend import ray_pool

        return ray_pool()
    return local_pool(select_gpus(gpus, visible_gpus()))
