"""Locals an ``if``/``else`` chain sets before a launch, read per path (one variant each).

The fixture tests/fixtures/framework/csrc/group_shapes.cu was written for these tests in the
style of a serving framework's static fp8 quantisation (no framework code is copied): the
group shape and scale strides are declared bare and set on each path of a chain on the scale's
rank, one path testing an optional, one failing; a second launcher's chain has a path that
reads a local assigned again after the chain.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from astra_graph.cli import main
from astra_graph.framework.flatten import flatten
from astra_graph.framework.launchers import Unmapped, analyse, device_constants
from astra_graph.framework.parse import REASSIGNED, Launcher, Source, parse_source
from astra_graph.framework.values import branch_variants
from astra_graph.kernel import expr
from astra_graph.kernel.contract import load_contract

SOURCE = Path(__file__).resolve().parent / "fixtures" / "framework" / "csrc" / "group_shapes.cu"
H100 = device_constants("sm_90", (13, 0))

pytestmark = pytest.mark.usefixtures("default_search_path")


def _launcher(name: str) -> tuple[Source, Launcher]:
    source = parse_source(flatten(SOURCE, []).text)
    return source, next(x for x in source.launchers if x.name == name)


def test_a_chain_that_sets_locals_is_read_into_its_paths() -> None:
    _, launcher = _launcher("static_group_quant")
    (launch,) = launcher.launches
    assert f"{REASSIGNED}group_m" in launch.locals  # the chain's value is no one expression
    (chain,) = launch.branches
    per_tensor, given, absent, failing = chain.paths
    assert per_tensor.conditions == (("scale.dim() == 0 || scale.numel() == 1", True),)
    assert dict(per_tensor.values) == {
        "group_m": "tokens",
        "group_n": "hidden",
        "stride_m": "0",
        "stride_n": "0",
    }
    assert given.conditions[-1] == ("group.has_value()", True)
    assert dict(absent.values)["group_m"] == "tokens / rows"
    assert absent.declared == ("rows",) and absent.checks == ("tokens % rows == 0",)
    # the failing branch's check is its path's: a variant that is never taken
    assert failing.values == () and failing.checks == ("false",)


def test_each_path_is_a_variant_with_its_values_and_conditions() -> None:
    source, launcher = _launcher("static_group_quant")
    (launch,) = launcher.launches
    variants = branch_variants(launch)
    assert len(variants) == 4
    per_tensor, note = variants[0]
    assert f"{REASSIGNED}group_m" not in per_tensor.locals
    assert per_tensor.locals["group_m"] == "tokens"
    assert "scale.dim() == 0 || scale.numel() == 1 is true" in note
    analysis = analyse(launcher, per_tensor, source.kernels, source.macros, H100, source.constants)
    # the path's condition allows a one-element scale, which the kernel then reads at 0
    assert analysis.shapes["scale"] == ["1"]
    values = {b.param: b.value for b in analysis.bindings}
    at = {"tokens": 7, "hidden": 64}
    assert expr.evaluate_int(values["group_m"], at) == at["tokens"]
    assert expr.evaluate_int(values["group_n"], at) == at["hidden"]
    assert expr.evaluate_int(values["stride_m"], at) == 0
    failing, _ = variants[3]
    with pytest.raises(Unmapped, match="'group_m' is assigned after its declaration"):
        analyse(launcher, failing, source.kernels, source.macros, H100, source.constants)


def test_a_path_that_reads_a_local_assigned_after_the_chain_is_left_out() -> None:
    _, launcher = _launcher("late_group_quant")
    (launch,) = launcher.launches
    (chain,) = launch.branches
    # `group_n = width` read width before `width = 64`: that path is no variant
    assert [dict(p.values)["group_n"] for p in chain.paths] == ["64", "128"]


@pytest.mark.usefixtures("needs_nvrtc")
def test_the_serving_path_is_imported_and_validates(tmp_path: Path) -> None:
    assert main(["import", str(SOURCE), "--out", str(tmp_path)]) == 0
    spec = load_contract(tmp_path / "static_group_quant")
    shapes = {a.name: a.shape for a in spec.contract.args}
    assert shapes["scale"] == ["1"]
    assert main(["validate", str(tmp_path / "static_group_quant")]) == 0


def test_a_path_that_sets_a_local_an_earlier_value_of_it_reads_is_unread() -> None:
    """``b = a; a = 5;`` in one branch: values are read at the launch, where b would read 5."""
    source = parse_source(
        """
__global__ void k(float* out, int n) { out[threadIdx.x] = n; }
void launch(torch::Tensor& out, int64_t w) {
  int a = w;
  int b;
  if (w > 4) {
    b = a;
    a = 5;
  } else {
    b = 1;
  }
  k<<<b, a>>>(out.data_ptr<float>(), a);
}
"""
    )
    (launch,) = next(x for x in source.launchers if x.name == "launch").launches
    assert launch.branches == ()  # the chain is not read into paths
