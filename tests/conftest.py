"""Shared fixtures. GPU tests carry ``@pytest.mark.gpu`` and skip, with the reason, without one."""

from __future__ import annotations

from functools import cache

import pytest


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


@pytest.fixture(autouse=True)
def _isolated_cache(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Compile cache per test session, so tests never read a developer's cache."""
    monkeypatch.setenv("ASTRA_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "astra-cache"))
