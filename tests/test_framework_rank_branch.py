"""Rank branches of a caller and sizes counted from the end, on the CPU.

FlashInfer's ``rope_quantize`` checks a 3-D q (``CHECK_DIM(3, q_rope_in)``) and reads its sizes
from the front (``size(0)``, ``size(1)``) and from the end (``rope_dim = q_rope_in.size(-1)``),
and takes its keys 2-D (MLA, one shared head) or 3-D (GQA) in branches on their rank, each with
its own checks and strides. A size counted from the end is the last axis at the checked rank
(:func:`~astra_graph.framework.callers.checked_shapes`), and each rank the branches define is an
operation of its own (:func:`~astra_graph.framework.callers.rank_forms`). The fixture
tests/fixtures/framework/rank_branch was written for these tests in that style (no framework
code is copied).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from astra_graph.cli import main
from astra_graph.framework import callers
from astra_graph.framework.callers import (
    CallSite,
    _call_site,
    _decided_locals,
    checked_dtypes,
    rank_forms,
)
from astra_graph.framework.importer import import_file
from astra_graph.framework.parse import _callee, _parser, _walk
from astra_graph.kernel.contract import load_contract

pytestmark = pytest.mark.usefixtures("default_search_path")

BASE = Path(__file__).resolve().parent / "fixtures" / "framework" / "rank_branch"
HEADER = BASE / "include" / "rb" / "heads.cuh"
FOLDERS = [BASE / "include", BASE / "csrc"]


def _shapes(folder: Path) -> dict[str, list[str | int]]:
    return {a.name: list(a.shape) for a in load_contract(folder).contract.args}


def _forms(body: str) -> list[CallSite]:
    source = (
        f"void bind(TensorView q, TensorView k, TensorView out) {{\n{body}\n  launch(q, k);\n}}\n"
    )
    tree = _parser().parse(source.encode()).root_node
    (call,) = [c for c in _walk(tree, ("call_expression",)) if _callee(c) == "launch"]
    site = _call_site(Path("bind.cu"), call)
    assert site is not None
    return rank_forms(site, call)


def _ranks(site: CallSite) -> list[tuple[str, str]]:
    return [(args[1].strip(), args[0]) for name, args in site.checks if name == "CHECK_DIM"]


@pytest.mark.usefixtures("needs_nvrtc")
def test_a_size_counted_from_the_end_is_the_last_axis_at_the_checked_rank(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``dim = q.size(-1)`` of a q checked 3-D is its third axis, not the second the launch's
    two-axis draft put it at (where it clashed with ``heads = q.size(1)``, and no shape was
    read for the outputs checked against them)."""
    report = import_file(HEADER, FOLDERS, tmp_path)
    results = {r.op: r for r in report.launchers if r.op}
    assert results["scale_heads"].imported, results["scale_heads"].reason
    shapes = _shapes(tmp_path / "scale_heads")
    assert shapes["q"] == shapes["out"] == ["nnz", "heads", "dim"]
    assert main(["validate", str(tmp_path / "scale_heads")]) == 0
    # without the rule, the clash leaves the output unshaped
    monkeypatch.setattr(callers, "_counted_from_end", lambda *_: False)
    again = import_file(HEADER, FOLDERS, tmp_path / "again", only={"ScaleHeads"})
    (refused,) = again.launchers
    assert not refused.imported
    assert "tensor 'out'" in refused.reason and "give no shape" in refused.reason


@pytest.mark.usefixtures("needs_nvrtc")
def test_each_rank_branch_of_the_caller_is_an_operation_with_its_checks(tmp_path: Path) -> None:
    report = import_file(HEADER, FOLDERS, tmp_path)
    results = {r.op: r for r in report.launchers if r.op}
    assert not report.compile_error
    two, three = results["scale_qk_k_2d"], results["scale_qk_k_3d"]
    assert two.imported and three.imported, (two.reason, three.reason)
    assert two.line == three.line and two.launcher == three.launcher == "ScaleQK"
    flat, headed = _shapes(tmp_path / "scale_qk_k_2d"), _shapes(tmp_path / "scale_qk_k_3d")
    assert flat["k"] == flat["k_out"] == ["nnz", "dim"]
    assert headed["k"] == headed["k_out"] == ["nnz", "k_heads", "dim"]
    assert flat["q"] == headed["q"] == ["nnz", "q_heads", "dim"]
    assert any(n.startswith("k_2d: read where scale_qk's k has 2 axes") for n in two.notes)
    assert any(n.startswith("k_3d: read where scale_qk's k has 3 axes") for n in three.notes)
    # one shared head in the 2-D form: no dim of k's heads
    assert "k_heads" not in load_contract(tmp_path / "scale_qk_k_2d").contract.dims
    for op in ("scale_qk_k_2d", "scale_qk_k_3d"):
        assert main(["validate", str(tmp_path / op)]) == 0


@pytest.mark.usefixtures("needs_nvrtc")
def test_a_branch_that_checks_no_rank_is_left_out_and_said(tmp_path: Path) -> None:
    report = import_file(HEADER, FOLDERS, tmp_path, only={"ScaleQKOpen"})
    (only,) = report.launchers
    assert only.imported and only.op == "scale_qkopen_k_2d", only.reason
    assert any("where k.ndim() != 2, no check says k's rank: not imported" in n for n in only.notes)


def test_the_forms_hold_the_checks_of_their_branches_only() -> None:
    two, three = _forms(
        "  CHECK_DIM(3, q);\n  int h;\n  if (k.ndim() == 2) { CHECK_DIM(2, k); h = 1; }\n"
        "  else { CHECK_DIM(3, k); h = k.size(1); }\n"
        "  if (k.ndim() == 3) { CHECK_EQ(out.size(1), h); }\n"
    )
    assert (two.form, three.form) == ("k_2d", "k_3d")
    assert _ranks(two) == [("q", "3"), ("k", "2")]
    assert _ranks(three) == [("q", "3"), ("k", "3")]
    assert ("CHECK_EQ", ("out.size(1)", "h")) in three.checks
    assert all(name != "CHECK_EQ" for name, _ in two.checks)
    assert (two.locals["h"], three.locals["h"]) == ("1", "k.size(1)")
    assert "k.ndim() == 2" in two.facts and "k.ndim() == 3" in three.facts


@pytest.mark.parametrize(
    ("body", "forms"),
    [
        # an `else if` chain, and a comparison written the other way round
        (
            "if (2 == k.dim()) { CHECK_DIM(2, out); }"
            " else if (k.dim() == 3) { CHECK_DIM(3, out); }",
            ["k_2d", "k_3d"],
        ),
        # `!=`: its then-branch is the other ranks, named by its check
        ("if (k.ndim() != 2) { CHECK_DIM(4, k); } else { CHECK_DIM(2, out); }", ["k_2d", "k_4d"]),
        # a check outside the branches says the rank: the other branch is never taken
        (
            "CHECK_DIM(3, k); if (k.ndim() == 2) { CHECK_DIM(2, out); } else { CHECK_DIM(3, k); }",
            ["k_3d"],
        ),
        # branches on two tensors' ranks: read as written, no forms
        ("if (k.ndim() == 2) { CHECK_DIM(2, k); } if (q.ndim() == 2) { CHECK_DIM(2, q); }", [""]),
        # a branch on something other than a rank: no forms
        ("if (k.size(0) == 2) { CHECK_DIM(2, k); } else { CHECK_DIM(3, k); }", [""]),
    ],
)
def test_the_rank_forms_a_caller_defines(body: str, forms: list[str]) -> None:
    assert [f.form for f in _forms(body)] == forms


def test_a_chain_value_is_the_branch_the_form_takes() -> None:
    written = {
        "h": "(k.ndim() == 2) ? (1) : ((k.ndim() == 3) ? (k.size(1)) : (0))",
        "n": "q.size(0)",
    }
    assert _decided_locals(written, {"k.ndim() == 2": False, "k.ndim() == 3": True}) == {
        "h": "k.size(1)",
        "n": "q.size(0)",
    }
    assert _decided_locals(written, {})["h"] == written["h"]  # undecided: kept


def test_two_tensors_dtypes_alike_name_no_dtype() -> None:
    """``a.dtype() == b.dtype()`` says nothing of which dtypes the caller takes: only the
    check that names them cuts the dispatch."""
    (site,) = _forms(
        "  TVM_FFI_ICHECK_EQ(q.dtype(), k.dtype());\n"
        "  TVM_FFI_ICHECK(q.dtype() == dl_float16 || q.dtype() == dl_bfloat16);"
    )
    assert checked_dtypes(site, {"q", "k"}) == {"float16", "bfloat16"}
