"""Roofline arithmetic and the per-device cache of the copy bandwidth (the measurement is faked)."""

from __future__ import annotations

import json

import pytest

from astra_graph.harness import roofline


def test_achieved_bandwidth_and_percent_of_roofline() -> None:
    # 3 MB in 1 us is 3000 GB/s; at a 3000 GB/s copy bandwidth that is 100% of the roofline
    assert roofline.achieved_gbps(3_000_000, 1.0) == pytest.approx(3000.0)
    assert roofline.roofline_pct(1500.0, 3000.0) == pytest.approx(50.0)
    assert roofline.floor_us(3_000_000, 3000.0) == pytest.approx(1.0)
    assert roofline.achieved_gbps(10, 0.0) == float("inf")


def test_impossible_only_beyond_the_margin() -> None:
    copy = 3000.0
    assert not roofline.impossible(copy * 1.1, copy)
    assert roofline.impossible(copy * (roofline.IMPOSSIBLE_MARGIN + 0.01), copy)
    assert roofline.impossible(float("inf"), copy)


def test_copy_bandwidth_is_measured_once_per_device(monkeypatch: pytest.MonkeyPatch) -> None:
    measured: list[int] = []

    def fake_measure() -> float:
        measured.append(1)
        return 2900.0 + len(measured)

    device = {"key": ("GPU A|0001", "GPU A")}
    monkeypatch.setattr(roofline, "measure_copy_gbps", fake_measure)
    monkeypatch.setattr(roofline, "device_key", lambda: device["key"])
    assert roofline.copy_bandwidth_gbps() == (2901.0, False)
    assert roofline.copy_bandwidth_gbps() == (2901.0, True)
    device["key"] = ("GPU B|0002", "GPU B")
    assert roofline.copy_bandwidth_gbps() == (2902.0, False)
    table = json.loads(roofline.cache_path().read_text())
    assert {entry["device"] for entry in table.values()} == {"GPU A", "GPU B"}
    assert roofline.copy_bandwidth_gbps(refresh=True) == (2903.0, False)


def test_a_corrupt_cache_is_measured_again(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(roofline, "measure_copy_gbps", lambda: 3100.0)
    monkeypatch.setattr(roofline, "device_key", lambda: ("GPU C|3", "GPU C"))
    roofline.cache_path().parent.mkdir(parents=True, exist_ok=True)
    roofline.cache_path().write_text("{not json")
    assert roofline.copy_bandwidth_gbps() == (3100.0, False)
    assert roofline.copy_bandwidth_gbps() == (3100.0, True)
