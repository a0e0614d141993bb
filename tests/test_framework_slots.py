"""Slot tensors: integer inputs whose elements place a kernel's writes (issue 23), on the CPU.

The fixture tests/fixtures/framework/csrc/slot_store.cu was written for these tests in the
style of SGLang's fused KV-cache store: ``slot = slot_mapping[token]`` places a row of
``key_cache``, so two tokens with one slot race; a gather through a pointer that is not const
but only read is no such store. The import draws slots with no two alike
(``init.distinct``), keeps the tokens within the slots, and the harness's draw, its
scenarios and the contract's validation keep to that.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from pydantic import ValidationError

from astra_graph.cli import main
from astra_graph.framework.flatten import flatten
from astra_graph.framework.importer import LauncherResult, import_file
from astra_graph.framework.parse import parse_source
from astra_graph.harness import scenarios
from astra_graph.harness.cases import distinct_values, make_case
from astra_graph.kernel.contract import Contract, ContractError, load_contract

SOURCE = Path(__file__).resolve().parent / "fixtures" / "framework" / "csrc" / "slot_store.cu"

pytestmark = pytest.mark.usefixtures("default_search_path")


@pytest.fixture(scope="module")
def imported(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[LauncherResult]]:
    out = tmp_path_factory.mktemp("slots")
    return out, import_file(SOURCE, [], out).launchers


def test_the_pointer_whose_elements_place_writes_is_found_and_a_read_gather_is_not() -> None:
    kernels = {k.name: k for k in parse_source(flatten(SOURCE, []).text).kernels}
    assert kernels["store_rows_kernel"].scattered == (("slot_mapping", "key_cache"),)
    # `table` is not const, but only read: its ids are a gather's, duplicates are fine
    assert kernels["gather_rows_kernel"].scattered == ()


@pytest.mark.usefixtures("needs_nvrtc")
def test_slots_are_drafted_distinct_with_room_for_every_token(
    imported: tuple[Path, list[LauncherResult]],
) -> None:
    out, results = imported
    ops = {r.op: r for r in results}
    for op in ("run_store_1", "run_store_2"):
        assert ops[op].imported, ops[op].reason
        spec = load_contract(out / op)
        (slots,) = [a for a in spec.contract.args if a.name == "slot_mapping"]
        # every slot of the cache, not only those below the token count
        assert slots.init.distinct and slots.init.below == "num_slots"
        header = (out / op / "production.cu").read_text()
        assert "// astra: requires = (num_tokens) <= num_slots" in header
        assert main(["validate", str(out / op)]) == 0
    gather = load_contract(out / "run_gather")
    (ids,) = [a for a in gather.contract.args if a.name == "ids"]
    assert not ids.init.distinct


@pytest.mark.usefixtures("needs_nvrtc")
def test_a_case_draws_every_slot_once_and_its_scenarios_repeat_none(
    imported: tuple[Path, list[LauncherResult]],
) -> None:
    out, _ = imported
    spec = load_contract(out / "run_store_2")
    (mapping,) = [a for a in spec.contract.args if a.name == "slot_mapping"]
    for tokens, slots in ((64, 64), (37, 500), (1, 1)):
        dims = {"num_tokens": tokens, "num_slots": slots, "width": 8}
        case = make_case(spec, dims, "float32", np.random.default_rng(tokens))
        scenarios.apply(spec, case.arrays, "float32", np.random.default_rng(tokens + 1))
        drawn = case.arrays["slot_mapping"]
        assert drawn.dtype.kind == "i" and drawn.shape == (tokens,)
        assert len(set(drawn.tolist())) == tokens  # no two alike, after the scenarios too
        assert drawn.min() >= 0 and drawn.max() < slots
        # run 2's changed inputs trade slots among the chosen elements: still no two alike
        rng = np.random.default_rng(tokens + 2)
        changed = scenarios.perturbed(case.arrays, [mapping], rng)["slot_mapping"]
        assert sorted(changed.tolist()) == sorted(drawn.tolist())
    # with as many tokens as slots, every slot is used once, in a random order
    dims = {"num_tokens": 64, "num_slots": 64, "width": 8}
    drawn = make_case(spec, dims, "float32", np.random.default_rng(9)).arrays["slot_mapping"]
    assert sorted(drawn.tolist()) == list(range(64)) and drawn.tolist() != list(range(64))
    changed = scenarios.perturbed({"slot_mapping": drawn}, [mapping], np.random.default_rng(3))
    assert (changed["slot_mapping"] != drawn).any()  # some elements did change


@pytest.mark.usefixtures("needs_nvrtc")
def test_distinct_draws_past_the_permuted_range_and_too_many_elements_are_named(
    imported: tuple[Path, list[LauncherResult]],
) -> None:
    out, _ = imported
    (slots,) = [
        a for a in load_contract(out / "run_store_1").contract.args if a.name == "slot_mapping"
    ]
    wide = {"num_tokens": 3000, "num_slots": 1 << 30, "width": 8}
    drawn = distinct_values(slots, (3000,), np.random.default_rng(2), wide)
    assert (
        len(np.unique(drawn)) == 3000 and drawn.max() < 1 << 30 and (drawn == np.rint(drawn)).all()
    )
    with pytest.raises(ValueError, match=r"args\.slot_mapping\.init\.distinct: 9 elements"):
        distinct_values(slots, (9,), np.random.default_rng(2), {"num_tokens": 4, "num_slots": 4})


def test_stores_not_placed_by_an_element_factor_are_no_slots() -> None:
    """A histogram's atomic address (ids repeat by design), an element added alone to a row's
    base, and a read of an inout tensor place no row; a cast element times a width does."""
    source = """
__global__ void hist(int* counts, const int* ids) {
  counts[threadIdx.x] = 0;
  atomicAdd(&counts[ids[threadIdx.x]], 1);
}
__global__ void last(float* out, const int* lengths, int n) {
  int len = lengths[blockIdx.x];
  out[blockIdx.x * n + len - 1] = 1.f;
}
__global__ void reread(float* y, const long* idx, int d) {
  float v = y[idx[blockIdx.x] * d];
  y[blockIdx.x * d] = v;
}
__global__ void store(float* out, const long* slots, int d) {
  out[static_cast<long>(slots[blockIdx.x]) * d + threadIdx.x] = 1.f;
}
"""
    kernels = {k.name: k.scattered for k in parse_source(source).kernels}
    assert kernels == {"hist": (), "last": (), "reread": (), "store": (("slots", "out"),)}


def test_distinct_asks_for_a_uniform_draw(tmp_path: Path) -> None:
    folder = tmp_path / "op"
    folder.mkdir()
    (folder / "contract.toml").write_text(
        'name = "op"\nsummary = "s"\ndtypes = ["float32"]\nreference = "reference.py:op"\n'
        'bytes_moved = "n * 8"\n'
        "[dims.n]\nmin = 1\n"
        '[[args]]\nname = "ids"\ndtype = "int32"\nshape = ["n"]\nrole = "input"\n'
        'init = { dist = "normal", distinct = true }\n'
        '[[args]]\nname = "y"\ndtype = "float32"\nshape = ["n"]\nrole = "output"\n'
        "[tolerance.float32]\natol = 1e-6\nrtol = 1e-6\n"
        "[suites]\ntuning = [{ n = 4 }]\nheldout = [{ n = 5 }]\n"
    )
    with pytest.raises(ContractError, match=r"args\.ids\.init\.distinct: expected dist"):
        load_contract(folder)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"dtype": "float32"}, "needs dtype int32 or int64"),
        ({"dtype": "uint8"}, "needs dtype int32 or int64"),
        ({"role": "inout"}, "needs role 'input'"),
        ({"init": {"dist": "uniform", "distinct": True, "row_scale": [0.5, 2.0]}}, "row_scale"),
    ],
)
def test_distinct_asks_for_an_integer_input_the_scenarios_leave_alone(
    change: dict[str, object], message: str
) -> None:
    ids: dict[str, object] = {
        "name": "ids",
        "dtype": "int32",
        "shape": ["n"],
        "role": "input",
        "init": {"dist": "uniform", "distinct": True},
    }
    contract = {
        "name": "op",
        "summary": "s",
        "dtypes": ["float32"],
        "reference": "reference.py:op",
        "bytes_moved": "n * 8",
        "dims": {"n": {"min": 1}},
        "args": [
            {**ids, **change},
            {"name": "y", "dtype": "float32", "shape": ["n"], "role": "output"},
        ],
        "tolerance": {"float32": {"atol": 1e-6, "rtol": 1e-6}, "int32": {"atol": 0, "rtol": 0}},
        "suites": {"tuning": [{"n": 4}], "heldout": [{"n": 5}]},
    }
    with pytest.raises(ValidationError, match=rf"args\.ids\.init\.distinct: .*{message}"):
        Contract.model_validate(contract)
    # a special that names a slot tensor is refused too: its values would repeat slots
    contract["args"] = [ids, contract["args"][1]]  # type: ignore[index]
    contract["specials"] = [{"name": "big", "values": {"ids": [0]}}]
    with pytest.raises(ValidationError, match="holds offsets or distinct slots"):
        Contract.model_validate(contract)
