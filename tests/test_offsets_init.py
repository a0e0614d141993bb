"""CSR offsets inputs (``init.offsets_into``) on the CPU: the contract's one-line refusals, the
draw (0 first, the end exactly last, non-decreasing, empty segments), the stale-output
perturbation keeping them valid, and the import of a launcher walking segments."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from astra_graph.cli import main
from astra_graph.framework.importer import import_file
from astra_graph.harness.cases import offsets_values, random_values
from astra_graph.harness.scenarios import perturbed
from astra_graph.kernel.contract import Contract, load_contract


def _contract(indptr: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {
        "name": "segments",
        "summary": "rows scaled per segment",
        "dtypes": ["float32"],
        "reference": "reference.py:segments",
        "bytes_moved": "rows * 8",
        "dims": {"rows": {"min": 0}, "batch": {"min": 1}},
        "args": [
            {"name": "x", "dtype": "T", "shape": ["rows"], "role": "inout"},
            {"name": "indptr", "dtype": "int32", "shape": ["batch + 1"], "role": "input", **indptr},
        ],
        "tolerance": {"float32": {"atol": 0, "rtol": 0}, "int32": {"atol": 0, "rtol": 0}},
        "suites": {"tuning": [{"rows": 10, "batch": 3}], "heldout": [{"rows": 0, "batch": 2}]},
        **extra,
    }


def test_a_valid_offsets_input_is_accepted() -> None:
    contract = Contract.model_validate(_contract({"init": {"offsets_into": "rows"}}))
    arg = next(a for a in contract.args if a.name == "indptr")
    assert arg.init.offsets_into == "rows"


@pytest.mark.parametrize(
    ("indptr", "extra", "message"),
    [
        ({"init": {"offsets_into": "tokens"}}, {}, "init.offsets_into: unknown dim 'tokens'"),
        ({"dtype": "float32", "init": {"offsets_into": "rows"}}, {}, "needs an integer dtype"),
        ({"role": "inout", "init": {"offsets_into": "rows"}}, {}, "needs role 'input'"),
        ({"shape": ["batch", 2], "init": {"offsets_into": "rows"}}, {}, "needs a 1-D input"),
        ({"init": {"offsets_into": "rows", "below": "rows"}}, {}, "drop init.below"),
        ({"init": {"offsets_into": "rows"}}, {"rows_independent": True}, "rows_independent"),
        (
            {"init": {"offsets_into": "rows"}},
            {"specials": [{"name": "zeros", "values": {"indptr": [0.0]}}]},
            "specials[0].values: 'indptr' holds offsets",
        ),
    ],
)
def test_an_offsets_input_the_draw_cannot_honour_is_refused_in_one_line(
    indptr: dict[str, Any], extra: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValueError, match=r"args\.indptr|specials") as caught:
        Contract.model_validate(_contract(indptr, **extra))
    said = str(caught.value)
    assert message in said, said


def test_shapes_whose_offsets_cannot_be_drawn_are_no_shapes_of_the_contract() -> None:
    spec = _contract({"init": {"offsets_into": "rows"}})
    spec["dims"]["batch"]["min"] = 0
    contract = Contract.model_validate(spec)
    assert contract.shape_problem({"rows": 5, "batch": 3}) is None
    assert contract.shape_problem({"rows": 0, "batch": 0}) is None  # [0]: no segment, end 0
    assert "cannot run from 0" in str(contract.shape_problem({"rows": 5, "batch": 0}))
    assert "does not fit int32" in str(contract.shape_problem({"rows": 2**31, "batch": 3}))


def _check_offsets(drawn: np.ndarray, end: int) -> None:
    assert np.all(drawn[..., 0] == 0)
    assert np.all(drawn[..., -1] == end)
    assert np.all(np.diff(drawn, axis=-1) >= 0)
    assert np.all(drawn == np.floor(drawn))


@pytest.mark.parametrize("end", [0, 1, 7, 1000, 2**31 - 1])
def test_offsets_start_at_zero_end_at_the_dim_and_never_decrease(end: int) -> None:
    rng = np.random.default_rng(0)
    drawn = offsets_values(np, rng, (50, 9), end)
    assert drawn.shape == (50, 9)
    _check_offsets(drawn, end)


def test_offsets_hold_empty_and_uneven_segments() -> None:
    drawn = offsets_values(np, np.random.default_rng(1), (200, 17), 4096)
    lengths = np.diff(drawn, axis=-1)
    assert 0.02 < np.mean(lengths == 0) < 0.3  # about EMPTY_SEGMENT_FRACTION
    assert lengths.max() > 4 * np.median(lengths[lengths > 0])
    one = offsets_values(np, np.random.default_rng(2), (1000, 2), 9)  # one segment: never empty
    assert np.all(one[:, 1] == 9)


def test_the_case_draw_and_the_stale_run_keep_the_offsets_valid() -> None:
    contract = Contract.model_validate(_contract({"init": {"offsets_into": "rows"}}))
    arg = next(a for a in contract.args if a.name == "indptr")
    rng = np.random.default_rng(3)
    values = random_values(arg, (33,), rng, {"rows": 300, "batch": 32})
    stored = contract.dtype_of(arg, "float32").from_float64(np, values)
    assert stored.dtype == np.int32
    _check_offsets(stored, 300)
    changed = perturbed({"indptr": stored}, [arg], rng)["indptr"]
    _check_offsets(changed, 300)
    moved = [
        perturbed({"indptr": stored}, [arg], np.random.default_rng(s))["indptr"] for s in range(20)
    ]
    assert any(not np.array_equal(m, stored) for m in moved)


HEADER_ONLY = Path(__file__).resolve().parent / "fixtures" / "framework" / "header_only"
"""Its include/fw/segments.cuh: a raw-pointer launcher walking CSR segments of rows, and
csrc/segments_binding.cu: one binding that ties x's rows to out's, one that does not."""


@pytest.mark.usefixtures("needs_nvrtc", "default_search_path")
def test_offsets_into_rows_the_binding_ties_are_imported_and_untied_ones_refused(
    tmp_path: Path,
) -> None:
    folders = [HEADER_ONLY / "include", HEADER_ONLY / "csrc"]
    report = import_file(HEADER_ONLY / "include" / "fw" / "segments.cuh", folders, tmp_path)
    results = {r.launcher: r for r in report.launchers}
    tied = results["SegmentScale"]
    assert tied.imported, tied.reason
    contract = load_contract(tmp_path / "segment_scale").contract
    # as a check's worker receives it: every field dumped with its value, and read again
    assert Contract.model_validate(contract.model_dump()) == contract
    args = {a.name: a for a in contract.args}
    # x's rows are q.size(0) passed as it is (no local names them): the check x.size(0) ==
    # out.size(0) makes them one dim, the launch's own name for them
    assert args["x"].shape == args["out"].shape == ["tokens", "heads", "head_dim"]
    assert args["indptr"].shape == ["(batch_size + 1)"] and args["indptr"].role == "input"
    assert args["indptr"].init.offsets_into == "tokens" and not args["indptr"].init.distinct
    header = (tmp_path / "segment_scale" / "production.cu").read_text()
    assert "<= min(" not in header  # offsets are no slots: no room requirement
    assert main(["validate", str(tmp_path / "segment_scale")]) == 0
    untied = results["SegmentScaleUntied"]
    assert not untied.imported
    assert "out's axis 0 (out_rows), x's axis 0 (tokens): not one dim" in untied.reason
