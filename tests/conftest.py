"""Shared fixtures. GPU tests carry ``@pytest.mark.gpu`` and skip, with the reason, without one.

``make test`` spreads the suite over one process per core (pytest-xdist's ``-n auto``) where no
GPU is visible; with a GPU it runs in one process, as before, so no kernel is ever timed while
another test uses the same GPU or loads the host.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from functools import cache

import pytest

from astra_graph.report import plots


@cache
def gpu_unavailable_reason() -> str | None:
    """Why GPU tests cannot run here, or None when CuPy sees a CUDA device."""
    try:
        import cupy
    except ImportError:
        return "CuPy is not installed (install the cuda12 or cuda13 extra)"
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:  # CUDARuntimeError when there is no driver
        return f"no CUDA GPU: {str(exc).splitlines()[0]}"
    return None if count > 0 else "no CUDA GPU: CuPy sees 0 devices"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    reason = gpu_unavailable_reason()
    if reason is None:
        return
    skip = pytest.mark.skip(reason=f"GPU test: {reason}")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.hookimpl(optionalhook=True)  # pytest without xdist (the GPU machine's) must still run
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int | None:
    """``-n auto``: no extra processes where a GPU is visible (0: pytest-xdist stays off), else
    xdist's own count, one per core."""
    return 0 if gpu_unavailable_reason() is None else None


@pytest.fixture(autouse=True)
def _isolated_cache(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Compile cache per test session, so tests never read a developer's cache; xdist's workers
    share the session's (the cache writes each file atomically)."""
    session_temp = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        session_temp = session_temp.parent  # a worker's basetemp is <session>/popen-<worker>
    monkeypatch.setenv("ASTRA_CACHE_DIR", str(session_temp / "astra-cache"))


PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


@pytest.fixture
def plots_not_drawn(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every chart of a report is built from the run's data but not drawn into a PNG.

    For tests of the agent graph, whose runs each end in a report that they read as text, if
    at all. Drawing is most of what a report costs (0.5 s of 0.6 s for its three charts: each
    is drawn twice, once for the tight bounding box) and, over about 70 runs, about a third of
    the suite's time; the drawn PNGs are checked in test_report.py and the notebook test. The
    stand-in bytes start as a PNG file does.
    """
    monkeypatch.setattr(plots, "_png", lambda figure: PNG_SIGNATURE + b" (not drawn in tests)")


@pytest.fixture
def needs_nvrtc() -> None:
    """Skip, saying why, where NVRTC cannot be loaded (the import and compile tests need it)."""
    from astra_graph.harness import nvrtc

    try:
        nvrtc.version()
    except nvrtc.NvrtcUnavailable as exc:
        pytest.skip(f"NVRTC unavailable: {exc}")


@pytest.fixture
def default_search_path() -> Iterator[None]:
    """The kernel search path reset around a test: a ``--path`` given to ``main()`` is global
    state and must not leak into later tests."""
    from astra_graph.kernel.catalog import set_search_dirs

    set_search_dirs(None)
    yield
    set_search_dirs(None)
