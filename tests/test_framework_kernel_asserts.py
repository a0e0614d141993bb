"""A launched kernel's own ``static_assert`` s bound the imported operation's domain.

The fixture tests/fixtures/framework/csrc/asserted_lanes.cu was written for these tests in the
style of SGLang's rope kernel: the launcher's class computes a lane count from a template width
with a constexpr helper that loops, and the kernel, from its template values and ``constexpr``
locals, asserts that the width splits into whole vectors, one a lane. Every width a multiple of
8 builds, so the sizes the import searches all build and nothing narrowed the domain; SGLang's
rope original was drafted at odd rope dims and did not compile against itself (H100).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from astra_graph.framework.flatten import flatten
from astra_graph.framework.launchers import _kernel_checks, analyse, device_constants
from astra_graph.framework.parse import parse_source
from astra_graph.harness.compile import CompileFailed, compile_implementation
from astra_graph.harness.domain import domain_shapes
from astra_graph.harness.plan import random_shapes
from astra_graph.kernel import expr
from astra_graph.kernel.contract import load_contract
from astra_graph.kernel.dtypes import DTYPES
from astra_graph.kernel.header import load_implementation

CSRC = Path(__file__).resolve().parent / "fixtures" / "framework" / "csrc"
LANES = CSRC / "asserted_lanes.cu"
ROWS = CSRC / "asserted_rows.cu"
H100 = device_constants("sm_90", (13, 0))
WIDTHS = (2, 3, 4, 6, 10, 12, 31, 48, 102, 4096)
"""Widths on both sides of the kernel's assert: odd ones, even ones whose vectors of four or
eight do not divide them (6, 10, 102) and ones they do."""


def _asserted_widths() -> dict[int, bool]:
    """Whether the fixture's kernel assert holds at each of :data:`WIDTHS`, as C++ computes
    it (the class's lanes, then the kernel's locals)."""

    def round_pow2(target: int, factor: int) -> int:
        power = 1
        while power * factor < target:
            power *= 2
        return power

    out = {}
    for width in WIDTHS:
        lanes = round_pow2(width, 8)
        per_lane = round_pow2(width, 2 * lanes) * 2
        out[width] = width % per_lane == 0 and width // per_lane <= lanes
    return out


def test_the_kernels_static_assert_is_read_with_its_constexpr_locals() -> None:
    source = parse_source(flatten(LANES, []).text)
    (kernel,) = source.kernels
    asserted, unread = kernel.asserted
    assert unread == "sizeof(Pair<T>) == 2 * sizeof(T)"
    # the locals read into the condition, in the kernel's own template parameters
    assert "kPerLane" not in asserted and "kUsed" not in asserted
    assert "round_pow2(kWidth, 2 * kLanes)" in asserted
    launcher = next(x for x in source.launchers if x.name == "run")
    (launch,) = launcher.launches
    checked, _ = _kernel_checks(launch, kernel, launcher)
    assert checked.checks[len(launch.checks) :] == (
        asserted,
        "sizeof(Pair<DType>) == 2 * sizeof(DType)",
    )
    assert (asserted, True) in checked.conditions


def test_an_assert_reading_a_local_not_read_in_is_left_out() -> None:
    """Two locals declared at once and a local that is not ``constexpr`` are not read into an
    assert; one reading them is left out (the launch's scope could give those names other
    values), while one over read-in locals, compared without blanks, is kept whole."""
    source = """
template <int N> __global__ void lanes_kernel(float* x) {
  constexpr int kVec = N / 4, kPer = N / 8;
  const int kLanes = N / 2;
  constexpr int kTwice = N * 2;
  static_assert(kPer > 0);
  static_assert(kLanes > 1);
  static_assert(kTwice > 1);
  static_assert(N>kTwice - 100);
  x[0] = 1.f;
}
"""
    (kernel,) = parse_source(source).kernels
    assert kernel.asserted == ("(N * 2) > 1", "N>(N * 2) - 100")
    # the two left out say why, for the operation's notes
    assert kernel.asserts_unread == (
        "static_assert(kPer > 0) reads the local 'kPer', not read in",
        "static_assert(kLanes > 1) reads the local 'kLanes', not read in",
    )


def test_a_kernel_without_asserts_adds_nothing() -> None:
    """asserted_rows.cu's kernel asserts nothing: its launch and requirements are as before."""
    source = parse_source(flatten(ROWS, []).text)
    (kernel,) = source.kernels
    assert kernel.asserted == ()
    launcher = next(x for x in source.launchers if x.name == "run")
    (launch,) = launcher.launches
    assert _kernel_checks(launch, kernel, launcher) == (launch, [])
    found = analyse(launcher, launch, source.kernels, source.macros, H100, source.constants)
    assert found.requires == [
        "hidden_size == ((hidden_size))",
        "(hidden_size) % 256 == 0 and elem_bytes == 2",
    ]


def test_an_assert_on_a_template_value_the_launch_leaves_unbound_is_left_out() -> None:
    """A parameter with no argument and no default has no value at the launch: the launcher's
    scope may give its name another, so the assert is not read there."""
    source = parse_source(flatten(LANES, []).text)
    (kernel,) = source.kernels
    launcher = next(x for x in source.launchers if x.name == "run")
    (launch,) = launcher.launches
    short = replace(launch, template_args=launch.template_args[:2])
    # the lanes' assert reads kLanes, bound to nothing; the pair's reads T alone
    read = _kernel_checks(short, kernel, launcher)[0].checks[len(short.checks) :]
    assert read == ("sizeof(Pair<DType>) == 2 * sizeof(DType)",)


@pytest.mark.usefixtures("needs_nvrtc")
def test_the_kernels_assert_bounds_the_domain_and_every_drawn_shape_builds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from astra_graph.framework.importer import import_file

    monkeypatch.setenv("ASTRA_CACHE_DIR", str(tmp_path / "cache"))
    (result,) = import_file(LANES, [], tmp_path / "ops").launchers
    assert result.imported, result.reason
    # an assert the import cannot read is said to be the kernel's, and narrows nothing
    assert any(
        n.startswith("the kernel's static_assert 'sizeof(Pair<DType>) == 2 * sizeof(DType)'")
        for n in result.notes
    )
    folder = tmp_path / "ops" / "run"
    spec = load_contract(folder)
    impl = load_implementation(folder / "production.cu", spec.contract)
    header = impl.header
    fp16 = DTYPES["float16"]

    def admitted(width: int) -> bool:
        dims = {"num_tokens": 1, "hidden_size": width}
        return header.unmet_requirement(dims, fp16, {}) is None

    # the requirement is the assert: it admits a width exactly where the kernel builds there
    expected = _asserted_widths()
    assert {w: admitted(w) for w in WIDTHS} == expected
    for width in (3, 6, 12):
        settings = {
            name: expr.evaluate_int(value, {"hidden_size": width})
            for name, value in header.specializations.items()
        }
        try:
            compile_implementation(impl, fp16, settings)
            built = True
        except CompileFailed:
            built = False
        assert built == expected[width], width
    # the least width is the first the assert admits; every suite and drawn shape builds
    assert spec.contract.dims["hidden_size"].min == 2
    shapes = [*spec.contract.suite("tuning"), *spec.contract.suite("heldout")]
    rng = np.random.default_rng(7)
    shapes += random_shapes(
        spec, rng, lambda dims: header.unmet_requirement(dims, fp16, {}) is None, "float16"
    )
    assert all(admitted(s["hidden_size"]) for s in shapes)
    minimum = next(s for s in domain_shapes(spec, "float16", rng) if s.kind == "min")
    assert admitted(minimum.dims["hidden_size"])
