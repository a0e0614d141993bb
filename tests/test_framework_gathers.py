"""Integer inputs drawn below the rows they index, on the CPU (issue 23, review of 98edc3a).

An integer tensor whose elements offset the kernel's reads of another tensor (a position into
a cos/sin cache, a gather's row ids) was drawn below the fewest rows of any tensor. Where the
table has more rows than the others (a cache of 4096 positions beside 7 tokens) its upper rows
were never read, and a candidate wrong only there passed. The kernel's own offsets now say
which tensors the ids index (:func:`~astra_graph.framework.parse._gathered`), and the draft
draws them below those tensors' rows (:func:`~astra_graph.framework.draft._indexed_tables`).
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, cast

import numpy as np
import pytest

from astra_graph.cli import main
from astra_graph.framework.draft import _index_rows, _indexed_tables
from astra_graph.framework.launchers import GatherUse
from astra_graph.framework.parse import parse_source
from astra_graph.harness.cases import make_case
from astra_graph.kernel.contract import load_contract

if TYPE_CHECKING:
    from astra_graph.framework.launchers import Analysis

pytestmark = pytest.mark.usefixtures("default_search_path")

CSRC = Path(__file__).resolve().parent / "fixtures" / "framework" / "csrc"


def _gathered(body: str, params: str) -> tuple[tuple[str, str, bool], ...]:
    (kernel,) = parse_source(f"__global__ void k({params}) {{\n{body}\n}}\n").kernels
    return kernel.gathered


def test_a_position_held_in_a_local_offsets_the_table_as_a_row() -> None:
    body = """
  const int t = blockIdx.x;
  const long pos = positions[t];
  const float* row = cache + pos * rot;
  out[t * rot + threadIdx.x] = row[threadIdx.x];
"""
    found = _gathered(body, "float* out, const float* cache, const long* positions, int rot")
    assert found == (("positions", "cache", True),)


def test_an_element_index_a_sum_chain_and_a_cast_are_read() -> None:
    body = """
  int i = threadIdx.x;
  out[i] = vals[idx[i]] + table[j + ids[i] * d];
  out[i] += static_cast<const float*>(raw)[d * ids[i]];
"""
    found = _gathered(
        body,
        "float* out, const float* vals, const float* table, const void* raw, "
        "const int* idx, const int* ids, int d, int j",
    )
    assert set(found) == {("idx", "vals", False), ("ids", "table", True), ("ids", "raw", True)}


def test_an_id_offsetting_a_local_pointer_or_array_reaches_an_unread_tensor() -> None:
    body = """
  int i = threadIdx.x;
  const float* base = table + blockIdx.x * stride;
  float kept[4];
  out[i] = base[ids[i] * d] + kept[slot[i]] + ids[i] * 2.0f;
"""
    found = _gathered(
        body, "float* out, const float* table, const int* ids, const int* slot, int d, int stride"
    )
    assert set(found) == {("ids", "", True), ("slot", "", False)}


@pytest.mark.parametrize(
    "use",
    [
        "out[i] *= scale_of(scales, ids[i]);",  # handed to a call
        "long e; e = ids[i]; out[i] *= scales[e];",  # assigned, not initialised
        "const int* moved = ids + 1; out[i] *= scales[moved[i]];",  # the pointer moved
        "const long e = ids[i]; out[i] *= fold(e);",  # a holder handed to a call
    ],
)
def test_an_id_used_out_of_sight_reaches_an_unread_tensor(use: str) -> None:
    """Beside a gather the rule reads (``table[ids[i] * d + j]``), a use it does not read
    may reach another tensor with fewer rows (review: ``scales[e]`` read in a helper): the ids
    get an unknown use, so the draft keeps them below every tensor's rows."""
    body = f"""
  int i = threadIdx.x;
  out[i] = table[ids[i] * d + threadIdx.y];
  {use}
"""
    found = _gathered(
        body, "float* out, const float* table, const float* scales, const int* ids, int d"
    )
    assert ("ids", "table", True) in found and ("ids", "", True) in found


def test_an_id_compared_or_held_is_accounted_for() -> None:
    body = """
  int i = threadIdx.x;
  if (ids[i] < 0) return;
  const long e = static_cast<long>(ids[i]);
  if (e + 1 >= n) return;
  out[i] = table[e * d + threadIdx.y];
"""
    found = _gathered(body, "float* out, const float* table, const int* ids, int d, int n")
    assert found == (("ids", "table", True),)


def test_an_id_that_is_only_compared_or_counted_offsets_nothing() -> None:
    body = """
  int i = threadIdx.x;
  int n = lengths[i];
  if (i < n) out[i * d + threadIdx.y] = 1.0f;
  out[i] = (float)counts[i];
"""
    found = _gathered(body, "float* out, const int* lengths, const int* counts, int d")
    assert found == ()


@pytest.mark.usefixtures("needs_nvrtc")
def test_positions_are_drawn_over_every_row_of_the_cache(tmp_path: Path) -> None:
    """partial_rotary.cu (vLLM's rotary): positions index the cos/sin cache's rows, so they are
    drawn below its rows, and reach past the token count, which they do not index."""
    assert main(["import", str(CSRC / "partial_rotary.cu"), "--out", str(tmp_path)]) == 0
    spec = load_contract(tmp_path / "partial_rotary")
    args = {a.name: a for a in spec.contract.args}
    cache_rows = str(args["cos_sin_cache"].shape[0])
    tokens = str(args["positions"].shape[0])
    assert cache_rows != tokens
    init = args["positions"].init
    assert init is not None and init.below == cache_rows
    report = (tmp_path / "import.json").read_text()
    assert "the rows of the tensors its elements index: cos_sin_cache" in report
    dims = {d: 8 for d in spec.contract.dims} | {tokens: 7, cache_rows: 4096}
    case = make_case(spec, dims, "float16", np.random.default_rng(3))
    positions = case.arrays["positions"]
    assert positions.min() >= 0 and positions.max() < 4096
    assert positions.max() >= 7  # rows past the token count are read


def _tables(
    shapes: dict[str, list[str]], uses: tuple[GatherUse, ...]
) -> tuple[list[str], str, bool]:
    analysis = SimpleNamespace(slots={}, gathers={"ids": uses}, shapes=shapes)
    return _indexed_tables(cast("Analysis", analysis), "ids")


def test_a_use_that_may_not_read_a_row_keeps_the_fewest_rows_of_any_tensor() -> None:
    shapes = {"ids": ["n"], "table": ["rows", "d"], "flat": ["elements"], "out": ["n", "d"]}
    tables, why, indexed = _tables(shapes, (GatherUse("table", True, False),))
    assert tables == ["table"] and indexed and "its elements index: table" in why
    # an element index added alone reads a row of a 1-D tensor
    assert _tables(shapes, (GatherUse("flat", False, False),))[0] == ["flat"]
    # a row index into a 1-D tensor (`flat[ids[i] * d]`), an element index into a row
    # (`table[b * d + ids[b]]`, a column), a tensor at a moved address, and a use whose tensor
    # is not read: every other tensor bounds it, as before
    for use in (
        GatherUse("flat", True, False),
        GatherUse("table", False, False),
        GatherUse("table", True, True),
        GatherUse("", True, False),
    ):
        tables, why, indexed = _tables(shapes, (GatherUse("table", True, False), use))
        assert tables == ["table", "flat", "out"] and "fewest rows" in why and not indexed


def test_a_table_of_a_fixed_row_count_bounds_its_ids() -> None:
    """Eight experts' weights indexed by expert ids: the ids stay below 8 (a whole-number axis
    dropped as no rows left the ids the default normal draw, negative values among them)."""
    uses = {"ids": (GatherUse("w", True, False),)}
    shapes = {"ids": ["n"], "w": ["8", "k"], "out": ["n", "k"]}
    tensors = {"ids": SimpleNamespace(element="int32", const=True)}
    analysis = SimpleNamespace(slots={}, gathers=uses, shapes=shapes, tensors=tensors, offsets={})
    assert _index_rows(cast("Analysis", analysis), "ids") == "8"


def test_a_summand_of_the_rows_stride_may_step_past_the_ids_row() -> None:
    """``table[ids[i] * d + j + d]`` reads row id + 1: the id is no row of the table, and the
    draft keeps the ids below every tensor's rows (review of 6fdeb8e). Summands in other names
    (``+ j``, the id's own index ``+ i``) are not checked: they are taken as within the row."""
    params = "float* out, const float* table, const int* ids, int d"
    stepped = _gathered(
        "int i = threadIdx.x, j = threadIdx.y;\nout[i] = table[ids[i] * d + j + d];", params
    )
    assert stepped == (("ids", "", True),)
    within = _gathered(
        "int i = threadIdx.x, j = threadIdx.y;\nout[i] = table[ids[i] * d + j + i];", params
    )
    assert within == (("ids", "table", True),)
