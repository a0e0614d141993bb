"""A table read only at rows integer ids name has rows of its own, on the CPU.

FlashInfer's ``rope_quantize`` checks the shape of every tensor but its cos/sin cache, which its
kernel reads only at ``cos_sin_cache + pos * rope_dim + vec_idx``, ``pos = pos_ids[idx]``: no
one sizes the cache's rows, and none needs to, since the ids are drawn below them. Its row count
is then a dim of its own (:func:`~astra_graph.framework.launchers.free_row_axes`), its row length
the sized axis the launch passes as the row offset's length. The fixture
tests/fixtures/framework/free_rows was written for these tests in that style (no framework code
is copied): a rotation by a table of cos/sin rows, and variants that stay refused (a row past
the id's, a table also written, a row length the caller passes as it likes).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from astra_graph.cli import main
from astra_graph.framework.draft import FREE_ROWS_HELDOUT, FREE_ROWS_TUNING
from astra_graph.framework.importer import import_file
from astra_graph.framework.launchers import (
    FREE_ROWS_NOTE,
    TensorUse,
    Unmapped,
    _refuse_unindexed_rows,
)
from astra_graph.framework.parse import parse_source
from astra_graph.harness.cases import make_case
from astra_graph.kernel.contract import load_contract

pytestmark = pytest.mark.usefixtures("default_search_path")

BASE = Path(__file__).resolve().parent / "fixtures" / "framework" / "free_rows"
HEADER = BASE / "include" / "fr" / "tables.cuh"
FOLDERS = [BASE / "include", BASE / "csrc"]
PARAMS = "float* out, float* table, const long* ids, const float* other, unsigned d"
UNSIZED = "neither the launcher asks its sizes nor does its caller"


def _id_rows(body: str) -> tuple[tuple[str, str, tuple[str, ...]], ...]:
    source = "__device__ float read_one(const float* a) { return *a; }\n"
    source += f"__global__ void k({PARAMS}) {{\n  const long pos = ids[blockIdx.x];\n"
    source += f"  unsigned j = threadIdx.x;\n{body}\n}}\n"
    (kernel,) = parse_source(source).kernels
    return kernel.id_rows


@pytest.mark.parametrize(
    "body",
    [
        "out[j] = table[pos * d + j];",
        "out[j] = table[ids[blockIdx.x] * d + j];",  # the element itself, no holder
        "out[j] = read_one(table + pos * d + j) + *(table + (pos * d) + j);",
        "out[j] = table[j + pos * 2 * d];",  # a length of two factors
    ],
)
def test_a_table_read_only_at_id_rows_has_them(body: str) -> None:
    (found,) = _id_rows(body)
    assert found[:2] == ("table", "ids")
    assert found[2] in (("d",), ("2", "d"))


@pytest.mark.parametrize(
    "body",
    [
        "const long next = ids[blockIdx.x] + 1; out[j] = table[next * d + j];",  # computed row
        "out[j] = table[(pos + 1) * d + j];",  # a row past the id's
        "out[j] = table[ids[j]];",  # an element id, no row
        "out[j] = table[pos * d + j + d];",  # steps into the next row
        "out[j] = table[pos * d + (long)other[j]];",  # another element beside the row
        "out[j] = table[pos * d + j]; table[pos * d + j] = 0.f;",  # also written
        "const float* row = table + pos * d; out[j] = row[j + d];",  # offset out of sight
        "out[j] = table[pos * d + j] + table[blockIdx.y * d + j];",  # a row no id names
        "out[j] = table[pos * d + j] + table[pos * (2 * d) + j];",  # two row lengths
        "out[j] = table[pos * d + j] - table[0];",  # a constant index beside
    ],
)
def test_a_table_reached_other_than_at_id_rows_has_none(body: str) -> None:
    assert _id_rows(body) == ()


def test_an_id_holder_assigned_again_names_no_row() -> None:
    assert _id_rows("long p = ids[0]; p = 3; out[j] = table[p * d + j];") == ()


@pytest.mark.usefixtures("needs_nvrtc")
def test_the_table_gets_rows_of_its_own_and_the_ids_are_drawn_below_them(tmp_path: Path) -> None:
    report = import_file(HEADER, FOLDERS, tmp_path)
    results = {r.launcher: r for r in report.launchers}
    assert not report.compile_error
    assert results["Rotate"].imported, results["Rotate"].reason
    spec = load_contract(tmp_path / "rotate")
    args = {a.name: a for a in spec.contract.args}
    assert args["table"].shape == ["table_rows", "rot"]
    assert args["q"].shape == ["nnz", "rot"]
    init = args["positions"].init
    assert init is not None and init.below == "table_rows"
    assert any(n.startswith(f"table: {FREE_ROWS_NOTE}") for n in results["Rotate"].notes)
    suites = spec.contract.suites
    assert {s["table_rows"] for s in suites.tuning} == set(FREE_ROWS_TUNING)
    assert {s["table_rows"] for s in suites.heldout} == set(FREE_ROWS_HELDOUT)
    case = make_case(
        spec, {"nnz": 7, "rot": 64, "table_rows": 4096}, "float16", np.random.default_rng(5)
    )
    positions = case.arrays["positions"]
    assert positions.min() >= 0 and positions.max() < 4096
    assert positions.max() >= 7  # rows past the token count are read
    assert np.any(case.arrays["table"] != 0) and np.any(case.arrays["q"] != 0)
    assert main(["validate", str(tmp_path / "rotate")]) == 0
    # a row past the id's, a table also written, a row length no sized axis: the table unsized
    for refused in ("NextRow", "Tally", "WideRows"):
        assert not results[refused].imported
        assert f"tensor 'table': {UNSIZED}" in str(results[refused].reason)


@pytest.mark.parametrize(
    ("element", "refused"), [("int64", False), ("float32", True), (None, True)]
)
def test_rows_named_by_values_that_are_no_row_ids_are_refused(
    element: str | None, refused: bool
) -> None:
    """The draft draws only int32/int64 inputs below a table's rows: rows named by a float's
    values (or a type not known) could be any, past the table's own."""
    tensors = {"table": TensorUse("table"), "pos": TensorUse("pos", element=element)}
    notes = [f"table: {FREE_ROWS_NOTE}: a dim of its own, table_rows"]
    if refused:
        with pytest.raises(Unmapped, match="no row ids"):
            _refuse_unindexed_rows({"table": ("q", -1, "pos")}, tensors, notes)
    else:
        _refuse_unindexed_rows({"table": ("q", -1, "pos")}, tensors, notes)
