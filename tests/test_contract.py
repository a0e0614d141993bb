"""Contracts and implementation headers: the shipped ones load, every mistake is one clear line."""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from astra_graph.harness import scenarios
from astra_graph.harness.cases import make_case
from astra_graph.kernel.catalog import kernels_root, operations, resolve
from astra_graph.kernel.contract import CONTRACT_FILE, ContractError, OperationSpec, load_contract
from astra_graph.kernel.dtypes import DTYPES
from astra_graph.kernel.header import Implementation, load_implementation

OPS = (
    "fused_add_rmsnorm",
    "gelu_and_mul",
    "gelu_tanh_and_mul",
    "merge_attn_states_lse",
    "per_token_fp8_quant",
    "rms_norm",
    "rotary_embedding",
    "silu_and_mul",
)
FIXTURES = Path(__file__).parent / "data" / "contracts"

# A small valid contract; each error test changes one thing in it.
BASE = """\
name = "scale_rows"
summary = "out = x * w, row by row"
dtypes = ["float16", "bfloat16"]
reference = "reference.py:scale_rows"
bytes_moved = "2 * tokens * hidden * elem_bytes + hidden * elem_bytes"

[dims.tokens]
min = 1

[dims.hidden]
min = 8
max = 4096
multiple_of = 8

[[args]]
name = "out"
dtype = "T"
shape = ["tokens", "hidden"]
role = "output"

[[args]]
name = "x"
dtype = "T"
shape = ["tokens", "hidden"]
role = "input"

[[args]]
name = "w"
dtype = "T"
shape = ["hidden"]
role = "input"

[[scalars]]
name = "hidden"
dtype = "int32"
value = "hidden"

[[scalars]]
name = "gain"
dtype = "float32"
default = 1.0

[tolerance.float16]
atol = 1e-5
rtol = 1e-3

[tolerance.bfloat16]
atol = 1e-5
rtol = 8e-3

[suites]
tuning = [{ tokens = 4, hidden = 64 }]
heldout = [{ tokens = 3, hidden = 72 }]
edge = [{ tokens = 1, hidden = 8 }]

[[specials]]
name = "large"
values = { x = [-1000.0, 1000.0] }
"""

REFERENCE = """\
def scale_rows(xp, inputs, params):
    return {"out": inputs["x"] * inputs["w"] * params["gain"]}
"""

HEADER = """\
// scale rows
// astra: description = one block per row
// astra: entry = scale_rows<T, BLOCK>
// astra: grid = (tokens, 1)
// astra: block = BLOCK
// astra: smem = BLOCK * 4
// astra: tunable BLOCK = 128, 256
// astra: requires = hidden % 8 == 0

template <typename T, int BLOCK>
__global__ void scale_rows(T* out, const T* x, const T* w, int hidden, float gain) {}
"""


def write_op(tmp_path: Path, text: str = BASE, reference: str | None = REFERENCE) -> Path:
    folder = tmp_path / "scale_rows"
    folder.mkdir(exist_ok=True)
    (folder / CONTRACT_FILE).write_text(text)
    if reference is not None:
        (folder / "reference.py").write_text(reference)
    return folder


def edited(old: str, new: str, text: str = BASE) -> str:
    assert old in text, f"test bug: {old!r} not in the text"
    return text.replace(old, new, 1)


def contract_error(tmp_path: Path, text: str) -> str:
    folder = write_op(tmp_path, text)
    with pytest.raises(ContractError) as info:
        load_contract(folder)
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(f"{folder / CONTRACT_FILE}: ")
    return message.removeprefix(f"{folder / CONTRACT_FILE}: ")


# --- the shipped contracts -----------------------------------------------------------------------


def test_the_three_operations_load() -> None:
    specs = operations()
    assert [s.name for s in specs] == list(OPS)
    for spec in specs:
        assert spec.folder == kernels_root() / spec.name
        assert callable(spec.reference)
        assert {p.stem for p in spec.implementations()} >= {"naive", "production"}


@pytest.mark.parametrize("op", OPS)
def test_shipped_contract_is_consistent(op: str) -> None:
    spec = load_contract(kernels_root() / op)
    c = spec.contract
    tuning = {tuple(sorted(s.items())) for s in c.suite("tuning")}
    heldout = {tuple(sorted(s.items())) for s in c.suite("heldout")}
    assert not tuning & heldout, "held-out shapes must be ones the tuning suite lacks"
    assert 8 <= len(tuning) <= 12
    for suite in ("tuning", "heldout", "edge"):
        for dims in c.suite(suite):
            assert c.shape_problem(dims) is None
            for dtype in c.dtypes:
                assert c.bytes_for(dims, dtype) > 0
                largest = max(
                    DTYPES[dtype if a.dtype == "T" else a.dtype].itemsize
                    * _product(c.shape_of(a, dims))
                    for a in c.args
                )
                assert largest < 1 << 30, f"{dims}: a tensor over 1 GB"
    assert any(min(s.values()) == 1 or s.get("tokens") == 1 for s in c.suite("edge"))
    written = [a for a in c.args if a.role != "input"]
    for arg in written:
        for dtype in c.dtypes:
            assert c.dtype_of(arg, dtype).name in c.tolerance


@pytest.mark.parametrize("op", OPS)
def test_every_suite_shape_runs_on_every_shipped_implementation(op: str) -> None:
    spec = load_contract(kernels_root() / op)
    c = spec.contract
    for path in spec.implementations():
        impl = load_implementation(path, c)
        assert impl.header.description
        for dims in c.suite("tuning") + c.suite("heldout") + c.suite("edge"):
            for dtype in c.dtypes:
                for tunables in impl.header.configurations():
                    assert impl.header.unmet_requirement(dims, DTYPES[dtype], tunables) is None
                    grid, block, smem = impl.header.launch(dims, DTYPES[dtype], tunables)
                    assert block[0] * block[1] * block[2] <= 1024
                    assert grid[1] <= 65535 and grid[2] <= 65535
                    assert smem <= 227 * 1024


def test_merge_and_rmsnorm_contract_details() -> None:
    merge = load_contract(kernels_root() / "merge_attn_states_lse").contract
    assert [a.name for a in merge.args] == ["v_a", "s_a", "v_b", "s_b", "v_merged", "s_merged"]
    assert {a.name: a.dtype for a in merge.args}["s_merged"] == "float32"
    assert "float32" in merge.tolerance
    assert "token-major" in merge.notes and "BASE-2" in merge.notes
    paired = [s for s in merge.specials if s.paired]
    assert paired and all(v == [float("-inf")] for v in paired[0].values.values())
    dims = {"tokens": 2, "heads": 3, "head_dim": 8}
    assert merge.bytes_for(dims, "float16") == 3 * 2 * 3 * 8 * 2 + 3 * 2 * 3 * 4

    norm = load_contract(kernels_root() / "fused_add_rmsnorm").contract
    roles = {a.name: a.role for a in norm.args}
    assert roles == {"input": "inout", "residual": "inout", "weight": "input"}
    assert norm.scalar_values({"tokens": 2, "hidden": 16}) == {"hidden": 16, "eps": 1e-6}
    assert norm.scalar_values({"tokens": 2, "hidden": 16}, {"eps": 1e-5})["eps"] == 1e-5
    assert norm.bytes_for({"tokens": 2, "hidden": 16}, "bfloat16") == 4 * 2 * 16 * 2 + 16 * 2


def _product(shape: tuple[int, ...]) -> int:
    out = 1
    for n in shape:
        out *= n
    return out


# --- a valid contract, and queries ---------------------------------------------------------------


def test_base_contract_loads_and_answers_queries(tmp_path: Path) -> None:
    spec = load_contract(write_op(tmp_path))
    c = spec.contract
    dims = {"tokens": 3, "hidden": 16}
    assert c.shape_of(c.args[0], dims) == (3, 16)
    assert c.bytes_for(dims, "bfloat16") == 2 * 3 * 16 * 2 + 16 * 2
    assert c.scalar_values(dims, {"gain": 2.0}) == {"hidden": 16, "gain": 2.0}
    assert c.label(dims) == "3x16"
    assert c.shape_problem({"tokens": 3, "hidden": 12}) == "hidden=12 is not a multiple of 8"
    assert c.shape_problem({"tokens": 0, "hidden": 8}) == "tokens=0 is below its minimum 1"
    assert c.shape_problem({"tokens": 1, "hidden": 8192}) == "hidden=8192 is above its maximum 4096"
    assert c.shape_problem({"tokens": 1}) == "missing dim 'hidden'"
    assert c.shape_problem({"tokens": 1, "hidden": 8, "heads": 2}) == "unknown dim 'heads'"
    fractional: dict[str, Any] = {"tokens": 1.5, "hidden": 8}  # not a shape, on purpose
    assert c.shape_problem(fractional) == "tokens must be a whole number, got 1.5"
    with pytest.raises(ContractError, match="scale_rows: unknown parameter 'eps'"):
        c.scalar_values(dims, {"eps": 1e-6})


# --- contract errors: one line naming the file and the field -----------------------------------


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        ('shape = ["hidden"]', 'shape = ["hiden"]', "args[2].shape: unknown dim 'hiden'"),
        ('shape = ["hidden"]', 'shape = ["hidden +"]', "args[2].shape: cannot parse expression"),
        ('summary = "out = x * w, row by row"\n', "", "summary: required field is missing"),
        ('dtypes = ["float16", "bfloat16"]', 'dtypes = "float16"', "dtypes: Input should be"),
        ("[dims.tokens]\nmin = 1", "[dims.tokens]\nmin = 1\nmaximum = 2", "dims.tokens.maximum"),
        ('name = "scale_rows"\n', 'name = "scale_rows"\ncolour = "red"\n', "colour: unknown field"),
        ('dtype = "T"', 'dtype = "float8"', "args[0].dtype: unknown dtype 'float8'"),
        ('dtypes = ["float16", "bfloat16"]', 'dtypes = ["half"]', "dtypes: unknown dtype 'half'"),
        (
            "heldout = [{ tokens = 3, hidden = 72 }]",
            "heldout = [{ tokens = 3, hidden = 70 }]",
            "suites.heldout[0]: hidden=70 is not a multiple of 8",
        ),
        (
            "tuning = [{ tokens = 4, hidden = 64 }]",
            "tuning = [{ tokens = 4, hiden = 64 }]",
            "suites.tuning[0]: missing dim 'hidden'",
        ),
        (
            "edge = [{ tokens = 1, hidden = 8 }]",
            "edge = [{ tokens = 0, hidden = 8 }]",
            "suites.edge[0]: tokens=0 is below its minimum 1",
        ),
        (
            "[tolerance.bfloat16]\natol = 1e-5\nrtol = 8e-3\n",
            "",
            "tolerance: no entry for 'bfloat16', which output 'out' uses",
        ),
        ("atol = 1e-5\nrtol = 1e-3", "atol = 1e-5", "tolerance.float16.rtol: required field"),
        ("atol = 1e-5\nrtol = 1e-3", "atol = -1.0\nrtol = 1e-3", "tolerance.float16.atol:"),
        ('role = "output"', 'role = "result"', "args[0].role: Input should be 'input'"),
        ('role = "output"', 'role = "input"', "args: no argument has role 'output' or 'inout'"),
        ('name = "w"', 'name = "x"', "args/scalars: duplicate name 'x'"),
        (
            'value = "hidden"',
            'value = "hidden"\ndefault = 1.0',
            "scalars[0]: scalar 'hidden' needs exactly one of 'value' or 'default'",
        ),
        ('dtype = "int32"', 'dtype = "int8"', "scalars[0].dtype: Input should be"),
        (
            "values = { x =",
            "values = { out =",
            "specials[0].values: 'out' is not an input argument",
        ),
        ('bytes_moved = "2 * tokens', 'bytes_moved = "2 * tokenz', "bytes_moved: unknown name"),
        (
            'reference = "reference.py:scale_rows"',
            'reference = "reference:scale_rows"',
            "reference: String should match pattern",
        ),
    ],
)
def test_contract_error_is_one_line_naming_the_field(
    tmp_path: Path, old: str, new: str, expected: str
) -> None:
    assert contract_error(tmp_path, edited(old, new)).startswith(expected)


def test_an_input_meets_only_the_non_finite_values_its_domain_holds(tmp_path: Path) -> None:
    finite = edited('name = "x"\n', 'name = "x"\nnon_finite = []\n')
    message = contract_error(
        tmp_path, edited("values = { x = [-1000.0", "values = { x = [-inf", finite)
    )
    assert message.startswith("specials[0].values.x: -inf is outside 'x''s domain")
    minus_inf = edited('name = "x"\n', 'name = "x"\nnon_finite = ["-inf"]\n')
    (tmp_path / "lse").mkdir()
    lse = edited("values = { x = [-1000.0", "values = { x = [-inf", minus_inf)
    assert load_contract(write_op(tmp_path / "lse", lse))
    (tmp_path / "ok").mkdir()
    spec = load_contract(write_op(tmp_path / "ok", finite))
    assert [a.non_finite for a in spec.contract.args if a.name in ("x", "w")] == [
        [],
        ["nan", "inf", "-inf"],
    ]
    for name in ("float16", "bfloat16"):
        kept = scenarios.type_values(DTYPES[name], [])
        assert all(math.isfinite(v) for v in kept)
        assert set(kept) < set(scenarios.type_values(DTYPES[name])) - {math.nan}
        only = [v for v in scenarios.type_values(DTYPES[name], ["-inf"]) if not math.isfinite(v)]
        assert only == [-math.inf]
    # 2048 one-element rows of w: ~146 carry its whole_type scenario, so both NaN and inf appear
    case = make_case(spec, {"tokens": 64, "hidden": 2048}, "float16", np.random.default_rng(5))
    scenarios.apply(spec, case.arrays, "float16", np.random.default_rng(6))
    x = DTYPES["float16"].to_float64(np, case.arrays["x"])
    w = DTYPES["float16"].to_float64(np, case.arrays["w"])
    assert np.isfinite(x).all() and (np.abs(x) == 65504.0).any()  # the largest finite stays
    assert np.isnan(w).any() and np.isinf(w).any()  # an input of the default domain meets both


def test_misspelt_dim_fixture_gives_exactly_one_line() -> None:
    folder = FIXTURES / "misspelt_dim"
    with pytest.raises(ContractError) as info:
        load_contract(folder)
    assert str(info.value) == f"{folder / CONTRACT_FILE}: args[2].shape: unknown dim 'hiden'"


def test_invalid_toml_names_the_file(tmp_path: Path) -> None:
    message = contract_error(tmp_path, BASE + "\n[[[\n")
    assert message.startswith("invalid TOML:") and "line" in message


def test_several_errors_report_the_first_and_count_the_rest(tmp_path: Path) -> None:
    text = edited('summary = "out = x * w, row by row"\n', "", edited('name = "w"\n', ""))
    assert re.fullmatch(
        r".*: required field is missing \(and \d+ more\)", contract_error(tmp_path, text)
    )


def test_missing_contract_file(tmp_path: Path) -> None:
    with pytest.raises(ContractError, match=r"contract\.toml: not found"):
        load_contract(tmp_path)


def test_missing_reference_file_and_function(tmp_path: Path) -> None:
    spec = load_contract(write_op(tmp_path, reference=None))
    with pytest.raises(ContractError, match=r"contract\.toml: reference: file 'reference\.py' not"):
        _ = spec.reference
    folder = write_op(tmp_path, reference="def other(xp, inputs, params):\n    return {}\n")
    with pytest.raises(ContractError, match=r"reference\.py defines no function 'scale_rows'"):
        _ = load_contract(folder).reference


# --- implementation headers ---------------------------------------------------------------------


def load_header(tmp_path: Path, source: str = HEADER) -> Implementation:
    spec = load_contract(write_op(tmp_path))
    path = spec.folder / "candidate.cu"
    path.write_text(source)
    return load_implementation(path, spec.contract)


def header_error(tmp_path: Path, source: str) -> str:
    with pytest.raises(ContractError) as info:
        load_header(tmp_path, source)
    message = str(info.value)
    assert "\n" not in message
    path = str(tmp_path / "scale_rows" / "candidate.cu")
    assert message.startswith(path)
    return message.removeprefix(path)


def test_header_parses(tmp_path: Path) -> None:
    impl = load_header(tmp_path)
    header = impl.header
    assert impl.name == "candidate"
    assert header.kernel_name == "scale_rows"
    assert header.tunables == {"BLOCK": [128, 256]}
    assert header.default_tunables() == {"BLOCK": 128}
    assert list(header.configurations()) == [{"BLOCK": 128}, {"BLOCK": 256}]
    assert header.entry_for(DTYPES["bfloat16"], {"BLOCK": 256}) == "scale_rows<__nv_bfloat16, 256>"
    dims = {"tokens": 5, "hidden": 64}
    assert header.launch(dims, DTYPES["float16"], {}) == ((5, 1, 1), (128, 1, 1), 512)
    assert header.launch(dims, DTYPES["float16"], {"BLOCK": 256})[1] == (256, 1, 1)
    assert header.unmet_requirement(dims, DTYPES["float16"], {}) is None


def test_header_stops_at_the_first_code_line(tmp_path: Path) -> None:
    late = HEADER + "// astra: colour = red\n"
    assert load_header(tmp_path, late).header.entry == "scale_rows<T, BLOCK>"


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        (
            "// astra: description",
            "// astra: colour = red\n// astra: description",
            ":2: header: unknown key 'colour', expected one of ['operation', 'entry', ",
        ),
        (
            "// astra: tunable BLOCK = 128, 256",
            "// astra: tunable BLOCK = a, b",
            ":7: header.tunable: expected 'NAME = v1, v2, ...' with whole-number values, "
            "got 'BLOCK = a, b'",
        ),
        (
            "// astra: tunable BLOCK = 128, 256",
            "// astra: tunable block = 128",
            ":7: header.tunable: expected 'NAME = v1, v2, ...'",
        ),
        (
            "// astra: tunable BLOCK = 128, 256",
            "// astra: tunable BLOCK =",
            ":7: header.tunable: expected 'NAME = v1, v2, ...'",
        ),
        (
            "// astra: tunable BLOCK = 128, 256",
            "\n".join(
                ["// astra: tunable BLOCK = 128, 256"]
                + [f"// astra: tunable T{i} = 1, 2, 3, 4, 5, 6, 7, 8" for i in range(5)]
            ),
            ": header.tunables: 65536 combinations of tunable values, at most 4096",
        ),
        (
            "// astra: grid = (tokens, 1)",
            "// astra: grid = (tokenz, 1)",
            ": header.grid: unknown name 'tokenz'",
        ),
        (
            "// astra: block = BLOCK",
            "// astra: block = THREADS",
            ": header.block: unknown name 'THREADS'",
        ),
        (
            "// astra: smem = BLOCK * 4",
            "// astra: smem = BLOCK.bit_length()",
            ": header.smem: only ['blocks_per_sm', 'ceil_div', 'gcd', 'log2', 'max', 'min', "
            "'round_up', 'select'] may be called",
        ),
        (
            "// astra: requires = hidden % 8 == 0",
            "// astra: requires = hiden % 8 == 0",
            ": header.requires: unknown name 'hiden'",
        ),
        (
            "// astra: grid = (tokens, 1)",
            "// astra: grid (tokens, 1)",
            ":4: header.grid: expected 'grid = ...'",
        ),
        (
            "// astra: block = BLOCK",
            "// astra: block = BLOCK\n// astra: std = c++23",
            ": header.std: std: expected one of ['c++17', 'c++20'], got 'c++23'",
        ),
        (
            "// astra: block = BLOCK",
            "// astra: block = BLOCK\n// astra: block = 64",
            ":6: header.block: given twice",
        ),
        (
            "// astra: entry = scale_rows<T, BLOCK>\n",
            "",
            ": header.entry: required field is missing",
        ),
        (
            "// astra: entry = scale_rows<T, BLOCK>",
            "// astra: entry = scale rows",
            ": header.entry: expected a kernel name or name<args>, got 'scale rows'",
        ),
        (
            "// astra: entry = scale_rows<T, BLOCK>",
            "// astra: entry = scale_rows<T, 1.5>",
            ": header.entry: bad template argument '1.5'",
        ),
        (
            "// astra: entry = scale_rows<T, BLOCK>",
            "// astra: entry = scale_rows<T, BLOCK + 1>",
            ": header.entry: bad template argument 'BLOCK + 1'",
        ),
    ],
)
def test_header_error_is_one_line_naming_file_line_and_field(
    tmp_path: Path, old: str, new: str, expected: str
) -> None:
    assert header_error(tmp_path, edited(old, new, HEADER)).startswith(expected)


def test_header_template_literals_are_accepted(tmp_path: Path) -> None:
    source = edited(
        "scale_rows<T, BLOCK>", "scale_rows<T, 64, true, -1, cuda::std::size_t>", HEADER
    )
    header = load_header(tmp_path, source).header
    assert header.entry_for(DTYPES["float16"], {}) == (
        "scale_rows<__half, 64, true, -1, cuda::std::size_t>"
    )


def test_unmet_requirement_is_reported(tmp_path: Path) -> None:
    source = edited("requires = hidden % 8 == 0", "requires = hidden % 64 == 0", HEADER)
    header = load_header(tmp_path, source).header
    dims = {"tokens": 1, "hidden": 72}
    assert header.unmet_requirement(dims, DTYPES["float16"], {}) == "hidden % 64 == 0"


def test_missing_implementation_file(tmp_path: Path) -> None:
    spec = load_contract(write_op(tmp_path))
    with pytest.raises(ContractError, match=r"nothere\.cu: not found"):
        load_implementation(spec.folder / "nothere.cu", spec.contract)


# --- resolve -------------------------------------------------------------------------------------


def _resolved(target: str | Path) -> tuple[OperationSpec, Implementation]:
    spec, impl = resolve(target)
    assert spec.folder.resolve() == impl.path.resolve().parent
    return spec, impl


def test_resolve_by_operation_name_means_production() -> None:
    spec, impl = _resolved("merge_attn_states_lse")
    assert spec.name == "merge_attn_states_lse" and impl.name == "production"


def test_resolve_by_op_slash_impl() -> None:
    spec, impl = _resolved("fused_add_rmsnorm/naive")
    assert spec.name == "fused_add_rmsnorm" and impl.name == "naive"


def test_resolve_by_path_and_by_folder() -> None:
    path = kernels_root() / "silu_and_mul" / "naive.cu"
    spec, impl = _resolved(path)
    assert spec.name == "silu_and_mul" and impl.path == path
    spec, impl = _resolved(kernels_root() / "silu_and_mul")
    assert impl.name == "production"


def test_resolve_a_file_outside_kernels_uses_the_contract_beside_it(tmp_path: Path) -> None:
    folder = write_op(tmp_path)
    (folder / "mine.cu").write_text(HEADER)
    spec, impl = _resolved(folder / "mine.cu")
    assert spec.name == "scale_rows" and impl.header.kernel_name == "scale_rows"


def test_resolve_unknown_operation_lists_the_known_ones() -> None:
    with pytest.raises(ContractError) as info:
        resolve("silu_and_mull")
    assert str(info.value).startswith(
        f"silu_and_mull: no such kernel file or operation (operations: {', '.join(OPS)}; searched "
    )


def test_resolve_unknown_implementation_and_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ContractError, match=r"silu_and_mul/fastest\.cu: not found"):
        resolve("silu_and_mul/fastest")
    with pytest.raises(ContractError, match=r"gone\.cu: implementation file not found"):
        resolve(tmp_path / "gone.cu")


def test_resolve_a_file_whose_contract_is_bad_names_the_contract() -> None:
    with pytest.raises(ContractError, match=r"misspelt_dim/contract\.toml: args\[2\]\.shape"):
        resolve(FIXTURES / "misspelt_dim" / "kernel.cu")


def test_an_init_bound_names_dims_and_lowers_the_draw_per_shape(tmp_path: Path) -> None:
    text = BASE.replace(
        'name = "w"\ndtype = "T"\nshape = ["hidden"]\nrole = "input"',
        'name = "w"\ndtype = "T"\nshape = ["hidden"]\nrole = "input"\n'
        'init = { dist = "uniform", low = 0.0, high = 1000.0, below = "tokens" }',
    )
    (tmp_path / "ok").mkdir()
    (tmp_path / "bad").mkdir()
    spec = load_contract(write_op(tmp_path / "ok", text))
    init = next(a for a in spec.contract.args if a.name == "w").init
    assert init.high_at({"tokens": 7, "hidden": 8}) == 6.0
    assert init.high_at({"tokens": 5000, "hidden": 8}) == 1000.0
    message = contract_error(tmp_path / "bad", text.replace('below = "tokens"', 'below = "rows"'))
    assert "args.w.init.below" in message and "'rows'" in message


def test_a_bound_value_may_read_the_elements_bytes(tmp_path: Path) -> None:
    """SGLang passes ``hidden_size / (kMaxVecBytes / sizeof(DType))``: a bound parameter's
    value reads ``elem_bytes`` as the launch geometry does, evaluated per element type."""
    from astra_graph.harness.cases import Case
    from astra_graph.harness.launch import _by_value

    source = HEADER.replace(
        "// astra: requires",
        "// astra: params = out, x, w, hidden // (16 // elem_bytes), gain\n// astra: requires",
    )
    source = source.replace("hidden // (16", "vecs: int32 = hidden // (16", 1)
    impl = load_header(tmp_path, source)
    (vecs,) = [b for b in impl.bindings if b.kind == "expr"]
    for dtype, count in (("float16", 512), ("float32", 1024)):
        case = Case({"tokens": 2, "hidden": 4096}, dtype, {}, {})
        assert int(_by_value(vecs, case)) == count
    assert "unknown dim 'elem_byte'" in header_error(
        tmp_path, source.replace("// elem_bytes", "// elem_byte")
    )
