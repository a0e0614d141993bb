"""Roofline arithmetic and the per-device cache of the copy bandwidth (the measurement is faked)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from astra_graph.harness import roofline
from astra_graph.harness.results import Measurement
from astra_graph.kernel.contract import OperationSpec


@pytest.fixture(autouse=True)
def _cache_of_its_own(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test's own roofline cache: the session's is shared by xdist's workers, where one
    test's device (GPU D) was found in another's table when it ran first."""
    monkeypatch.setenv("ASTRA_CACHE_DIR", str(tmp_path / "astra-cache"))


def test_achieved_bandwidth_and_percent_of_roofline() -> None:
    # 3 MB in 1 us is 3000 GB/s; at a 3000 GB/s copy bandwidth that is 100% of the roofline
    assert roofline.achieved_gbps(3_000_000, 1.0) == pytest.approx(3000.0)
    assert roofline.roofline_pct(1500.0, 3000.0) == pytest.approx(50.0)
    assert roofline.floor_us(3_000_000, 3000.0) == pytest.approx(1.0)
    assert roofline.achieved_gbps(10, 0.0) == float("inf")


def floor_of(median_us: float, rel_std_err: float = 0.0) -> Measurement:
    return Measurement(
        median_us=median_us, spread_us=0.0, rel_std_err=rel_std_err, samples=10, method="events"
    )


def test_a_shape_roof_is_the_minimal_kernels_rate_there_when_higher() -> None:
    # 600 MB: the minimal kernel at 200 us moved 3000 GB/s, above a cached roof of 2900
    nbytes = 600_000_000
    assert roofline.shape_roof_gbps(2900.0, nbytes, floor_of(200.0)) == pytest.approx(3000.0)
    # a kernel as fast as the minimal kernel reads 100% of that roof, not 103% of the cached one
    pct = roofline.roofline_pct(roofline.achieved_gbps(nbytes, 200.0), 3000.0)
    assert pct == pytest.approx(100.0)
    # the roof is an upper bound: the fast end of the floor's interval (2 errors of 0.1%)
    noisy = roofline.shape_roof_gbps(2900.0, nbytes, floor_of(200.0, 0.001))
    assert noisy == pytest.approx(3000.0 / (1 - roofline.ROOF_SIGMAS * 0.001))
    assert roofline.roofline_pct(roofline.achieved_gbps(nbytes, 199.8), noisy) < 100.0
    # a noisy floor lifts the roof by at most 5%
    wild = roofline.shape_roof_gbps(2900.0, nbytes, floor_of(200.0, 0.3))
    assert wild == pytest.approx(3000.0 / roofline.ROOF_LIFT_FLOOR)
    # slower there (or latency-bound), or no floor timed: the cached roof stands
    assert roofline.shape_roof_gbps(2900.0, nbytes, floor_of(250.0)) == 2900.0
    assert roofline.shape_roof_gbps(2900.0, 8192, floor_of(2.0)) == 2900.0
    assert roofline.shape_roof_gbps(2900.0, nbytes, None) == 2900.0


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


def _spec(op: str) -> OperationSpec:
    from astra_graph.kernel.catalog import kernels_root
    from astra_graph.kernel.contract import load_contract

    return load_contract(kernels_root() / op)


def test_traffic_counts_inputs_outputs_and_in_place_arguments_from_the_contract() -> None:
    silu = roofline.traffic(_spec("silu_and_mul").contract, {"tokens": 16, "d": 4096}, "float16")
    assert (silu.read_bytes, silu.write_bytes) == (16 * 8192 * 2, 16 * 4096 * 2)
    assert silu.mix == "2.00"
    merge = roofline.traffic(
        _spec("merge_attn_states_lse").contract,
        {"tokens": 3, "heads": 5, "head_dim": 24},
        "bfloat16",
    )
    assert merge.read_bytes == 2 * 3 * 5 * 24 * 2 + 2 * 3 * 5 * 4
    assert merge.write_bytes == 3 * 5 * 24 * 2 + 3 * 5 * 4
    # in place: input and residual read and written, the weight only read
    norm = roofline.traffic(
        _spec("fused_add_rmsnorm").contract, {"tokens": 2, "hidden": 64}, "float16"
    )
    assert (norm.read_bytes, norm.write_bytes) == (2 * 2 * 64 * 2 + 64 * 2, 2 * 2 * 64 * 2)
    assert norm.mix == "1.25"
    assert roofline.Traffic(100, 0).mix == "read-only"


def test_the_minimal_kernel_covers_every_byte_with_few_reads_per_thread() -> None:
    for read, write in [(32, 16), (16, 16), (1000, 7), (0, 48), (48, 0), (17, 1)]:
        n_read, n_write, threads, reads = roofline.Traffic(read, write).vectors
        assert n_read * 16 >= read and n_write * 16 >= write
        assert threads >= n_write and threads * reads >= n_read
        assert reads <= roofline.MAX_READS_PER_THREAD
    assert roofline.Traffic(32 * 16, 16 * 16).vectors == (32, 16, 16, 2)


def test_scaled_keeps_the_mix() -> None:
    big = roofline.scaled(roofline.Traffic(2000, 1000), 3 << 20)
    assert big.read_bytes + big.write_bytes == 3 << 20
    assert big.mix == "2.00"


def test_limit_names_bandwidth_for_large_shapes_and_the_floor_for_small_ones() -> None:
    roof = 3000.0
    large = 600_000_000  # 200 us at the roof
    bw = roofline.limit_of(205.0, large, roof, copy_floor_us=201.0, launch_floor_us=1.5)
    assert bw.bound == "bandwidth" and bw.pct == pytest.approx(100 * 200 / 205)
    assert bw.text.startswith("bandwidth-bound at 98% of the bandwidth roof 3000 GB/s")
    assert "at the same-bytes copy floor (201.00 us, +2%)" in bw.text
    assert "136.67x the launch floor 1.50 us" in bw.text
    small = 400_000  # 0.13 us at the roof, far under a launch
    at = roofline.limit_of(2.1, small, roof, copy_floor_us=2.0, launch_floor_us=1.0)
    assert at.bound == "copy" and at.pct == pytest.approx(5.0)
    assert at.text.startswith("near the same-bytes copy floor: at the same-bytes copy floor (2.00")
    above = roofline.limit_of(3.0, small, roof, copy_floor_us=2.0, launch_floor_us=1.0)
    assert above.text.startswith("near the same-bytes copy floor: 1.50x the same-bytes copy")
    assert above.text.endswith("3.00x the launch floor 1.00 us")
    # no floor (per-call mode): the bandwidth view is all there is
    assert roofline.limit_of(3.0, small, roof, None).bound == "bandwidth"
    # the boundary: a floor just under COPY_BOUND_FACTOR x the bandwidth time is bandwidth
    bandwidth_time = roofline.floor_us(large, roof)
    edge = 0.99 * roofline.COPY_BOUND_FACTOR * bandwidth_time
    assert roofline.limit_of(edge, large, roof, edge).bound == "bandwidth"
    assert roofline.limit_of(edge, large, roof, 1.02 * edge / 0.99).bound == "copy"


def test_the_issue_25_shape_reads_as_memory_access_not_launch() -> None:
    # merge 512x32x256 from naive (issue 25): 2.4x above the copy floor at 26% of the roof; the
    # old profile called that "latency-bound: 138% above the latency floor"
    roof, nbytes = 3000.0, 3 * 512 * 32 * 256 * 2 + 3 * 512 * 32 * 4
    time_us = roofline.floor_us(nbytes, roof) / 0.26
    copy = time_us / 2.4
    limit = roofline.limit_of(time_us, nbytes, roof, copy_floor_us=copy, launch_floor_us=2.0)
    assert limit.bound == "copy"
    assert "latency" not in limit.text
    assert (
        "2.40x the same-bytes copy floor" in limit.text
        and "26% of the bandwidth roof" in limit.text
    )


def test_a_copy_floor_close_to_an_empty_launch_is_launch_bound() -> None:
    small = 400_000
    inside = roofline.LAUNCH_BOUND_FACTOR * 0.99 * 2.0
    near = roofline.limit_of(3.0, small, 3000.0, copy_floor_us=inside, launch_floor_us=2.0)
    assert near.bound == "launch" and near.pct == pytest.approx(50.0)
    assert near.text.startswith("near the launch floor: 1.50x the launch floor 2.00 us")
    outside = roofline.LAUNCH_BOUND_FACTOR * 1.01 * 2.0
    far = roofline.limit_of(3.0, small, 3000.0, copy_floor_us=outside, launch_floor_us=2.0)
    assert far.bound == "copy"
    # without a launch floor (reports before issue 25) the copy floor names the limit
    assert roofline.limit_of(3.0, small, 3000.0, copy_floor_us=inside).bound == "copy"


def test_old_reports_read_their_latency_floor_as_the_copy_floor() -> None:
    from astra_graph.harness.results import ShapeTiming

    old = {
        "label": "1x8",
        "dims": {"tokens": 1, "d": 8},
        "dtype": "float16",
        "bytes_moved": 48,
        "candidate": {
            "median_us": 2.1,
            "spread_us": 0.1,
            "rel_std_err": 0.01,
            "samples": 5,
            "method": "x",
        },
        "achieved_gbps": 0.02,
        "roofline_pct": 0.001,
        "latency_floor": {
            "median_us": 2.0,
            "spread_us": 0.1,
            "rel_std_err": 0.01,
            "samples": 5,
            "method": "x",
        },
        "bound": "latency",
    }
    shape = ShapeTiming.model_validate(old)
    assert shape.copy_floor is not None and shape.copy_floor.median_us == 2.0
    assert shape.bound == "copy" and shape.launch_floor is None


def test_achievable_bandwidth_is_cached_per_device_and_mix(monkeypatch: pytest.MonkeyPatch) -> None:
    measured: list[str] = []

    def fake_measure(mix: roofline.Traffic, total_bytes: int) -> float:
        measured.append(mix.mix)
        # the best size wins: the larger one reads higher here
        return 3000.0 + len(measured) + total_bytes // (512 << 20)

    monkeypatch.setattr(roofline, "measure_mix_gbps", fake_measure)
    monkeypatch.setattr(roofline, "measure_copy_gbps", lambda: 2990.0)
    monkeypatch.setattr(roofline, "device_key", lambda: ("GPU D|4", "GPU D"))
    two_to_one, one_to_one = roofline.Traffic(200, 100), roofline.Traffic(64, 64)
    assert roofline.achievable_gbps(two_to_one) == (3004.0, False)
    assert roofline.achievable_gbps(roofline.Traffic(4000, 2000)) == (3004.0, True)
    assert roofline.achievable_gbps(one_to_one) == (3006.0, False)
    # the copy bandwidth shares the device's entry without losing the mixes, and back
    assert roofline.copy_bandwidth_gbps() == (2990.0, False)
    assert roofline.achievable_gbps(one_to_one) == (3006.0, True)
    assert roofline.achievable_gbps(one_to_one, refresh=True) == (3008.0, False)
    assert roofline.copy_bandwidth_gbps() == (2990.0, True)
    assert measured == ["2.00", "2.00", "1.00", "1.00", "1.00", "1.00"]
    # a roof cached by another method is measured again
    table = json.loads(roofline.cache_path().read_text())
    for entry in table.values():
        for cached in entry.get("mix", {}).values():
            cached["method"] = "2 GiB only"
    roofline.cache_path().write_text(json.dumps(table))
    assert roofline.achievable_gbps(one_to_one) == (3010.0, False)


def test_shapes_beyond_the_minimal_kernels_indices_are_flagged() -> None:
    assert roofline.Traffic(2 << 30, 1 << 30).fits_minimal_kernel
    assert not roofline.Traffic(64 << 30, 32 << 30).fits_minimal_kernel
