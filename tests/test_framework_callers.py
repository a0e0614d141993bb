"""``astra import`` of header launchers of raw pointers, followed to their bindings (CPU).

The fixture tests/fixtures/framework/header_only was written for these tests in the layout of a
header-only kernel library with bindings beside it: ``include/fw/rows.cuh`` holds kernels and
launchers that take ``T*`` and sizes, value-dispatch macros (a vector width from ``gcd``, a head
size), a host-only error class, a device macro and a glibc type name; ``csrc/rows_binding.cu``
calls them with ``TensorView`` data pointers under a DLPack-style dtype dispatch whose bf16 case
is defined empty when its feature is off, and checks the tensors' shapes.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from astra_graph.cli import main
from astra_graph.framework.callers import (
    Callers,
    CallSite,
    caller_types,
    checked_dtypes,
    checked_shapes,
    compose,
    fact_equalities,
    fixed_dispatch_type,
    shape_checker,
    size_conditions,
)
from astra_graph.framework.device import device_source
from astra_graph.framework.flatten import flatten
from astra_graph.framework.importer import LauncherResult, import_file
from astra_graph.framework.launchers import RAW_ROOT_NOTE, analyse, device_constants
from astra_graph.framework.parse import (
    Launch,
    Launcher,
    Macro,
    Param,
    TemplateParam,
    expand_macros,
    parse_source,
)
from astra_graph.framework.values import value_variants
from astra_graph.kernel import expr
from astra_graph.kernel.catalog import set_search_dirs
from astra_graph.kernel.contract import load_contract
from astra_graph.kernel.header import load_implementation

pytestmark = pytest.mark.usefixtures("plots_not_drawn")  # conftest.py says why

BASE = Path(__file__).resolve().parent / "fixtures" / "framework" / "header_only"
HEADER = BASE / "include" / "fw" / "rows.cuh"
FOLDERS = [BASE / "include", BASE / "csrc"]
BESIDE = BASE.parent / "csrc" / "filtered_rows.cuh"
"""A JIT-style header whose bindings call its raw-pointer launcher in the header itself."""
ROUTED = BASE.parent / "csrc" / "routed_rows.cuh"
"""Its twin with group ids, one per ``step`` rows, that no binding checks."""


@pytest.fixture(autouse=True)
def _default_search_path() -> Iterator[None]:
    set_search_dirs(None)
    yield
    set_search_dirs(None)


def _results(out: Path, folders: list[Path]) -> dict[str, LauncherResult]:
    report = import_file(HEADER, folders, out)
    assert not report.compile_error, report.compile_error
    return {r.launcher: r for r in report.launchers}


@pytest.mark.usefixtures("needs_nvrtc")
def test_a_raw_pointer_launcher_takes_shapes_and_dtypes_from_its_binding(tmp_path: Path) -> None:
    results = _results(tmp_path, FOLDERS)
    row = results["RowScale"]
    assert row.imported, row.reason
    # the dispatch's cases are CUDA's own types (the empty #else case is not the definition)
    assert row.dtypes == ["float16", "bfloat16"]
    assert any("caller row_scale (rows_binding.cu:" in n for n in row.notes)
    folder = tmp_path / "row_scale"
    contract = load_contract(folder).contract
    shapes = {a.name: a.shape for a in contract.args}
    # weight is 1-D by the binding's CHECK_DIM and size check, not the first tensor's shape
    assert shapes == {"out": ["rows", "d"], "in": ["rows", "d"], "weight": ["d"]}
    header = load_implementation(folder / "production.cu", contract).header
    # CUDA's types themselves (no c10 stand-in), and VEC folded to the width serving sizes take
    assert header.entry == "fw::row_scale_kernel<8, T>"
    assert any("gcd(16 // elem_bytes, (d))" in r and "== (8)" in r for r in header.requires)
    assert "(d) <= 16384" in header.requires  # the binding's FW_ICHECK(d <= 16384)
    # the binding's local `grid` is not the launcher's `dim3 grid(rows)`
    assert header.grid.replace(" ", "") == "(rows)"
    assert main(["validate", str(folder)]) == 0


@pytest.mark.usefixtures("needs_nvrtc")
def test_a_head_size_dispatch_is_followed_one_build_per_case(
    tmp_path: Path,
) -> None:
    """The launcher's ``FW_DISPATCH_HEAD(head_dim, HEAD, ...)`` (cases 64 and 128) switches on
    the head size itself: the import follows it as the framework runs it, one build per case
    (``HEAD`` a specialization on head_dim, the launch requiring one of the cases), where it
    used to fix the case the serving shapes take and check the kernel at head size 128 alone."""
    head = _results(tmp_path, FOLDERS)["HeadScale"]
    assert head.imported, head.reason
    assert head.dtypes == ["bfloat16"]  # the binding's dtype check, within the dispatch's
    assert any("HEAD follows head_dim: one build per case (64, 128)" in n for n in head.notes)
    folder = tmp_path / "head_scale"
    contract = load_contract(folder).contract
    assert {a.name: a.shape for a in contract.args} == {
        "x": ["tokens", "heads", "head_dim"],
        "scale": ["tokens", "heads"],
    }
    suites = [*contract.suites.tuning, *contract.suites.heldout]
    assert suites and {shape["head_dim"] for shape in suites} == {64, 128}
    header = load_implementation(folder / "production.cu", contract).header
    assert header.entry == "fw::head_scale_kernel<ASTRA_SIZE_HEAD, T>"
    assert header.specializations == {"ASTRA_SIZE_HEAD": "head_dim"}
    # `dim3 block(threads_x, 4)` is both sizes, not the last one alone, at each head size
    for head_dim in (64, 128):
        assert expr.evaluate_dims3(header.block, {"head_dim": head_dim}) == (head_dim // 4, 4, 1)
    assert main(["validate", str(folder)]) == 0


@pytest.mark.usefixtures("needs_nvrtc")
def test_what_no_binding_says_is_refused_with_its_reason(tmp_path: Path) -> None:
    results = _results(tmp_path, FOLDERS)
    copy = results["CopyRows"]
    assert not copy.imported
    assert "tensor 'out': neither the launcher asks its sizes nor does its caller" in copy.reason
    strided = results["StridedCopy"]
    assert not strided.imported
    assert "tensor 'out': the launcher asks only its strides and its caller" in strided.reason
    # a tensor sized by the launch (`x.size(0)`) is no rank read from strides, whatever its name
    doubled = results["DoubleVector"]
    assert doubled.imported, doubled.reason
    internal = results["ScaleInternal"]
    assert not internal.imported
    assert "raw pointer" in internal.reason and "no caller" in internal.reason
    # without the bindings' folder nothing is guessed: a launcher is imported directly only
    # where the kernel's own row-major indices shape each raw pointer
    # (test_framework_raw_launchers.py); every other keeps a reason naming its raw pointer
    alone = _results(tmp_path / "alone", [BASE / "include"])
    assert {n for n, r in alone.items() if r.imported} == {"StridedCopy", "DoubleVector"}
    assert all("raw pointer" in r.reason for r in alone.values() if not r.imported)


def _site(*checks: tuple[str, tuple[str, ...]]) -> CallSite:
    return CallSite(
        file=Path("b.cu"),
        function="f",
        params=(),
        args=(),
        template_args=(),
        locals={"n": "a.size(0)", "d": "a.size(1)"},
        conditions=(),
        dispatch=(),
        line=1,
        checks=checks,
    )


def test_the_callers_checks_shape_the_tensors_it_passes() -> None:
    checks = (
        ("CHECK_DIM", ("1", "w")),
        ("CHECK_EQ", ("w.size(0)", "d")),
        ("CHECK_DIM", ("2", "b")),
        ("CHECK_SHAPE", ("a", "b")),
        ("CHECK_DIM", ("3", "unsized")),
        # no CHECK_DIM: the axes its checks name (a launch reading o.stride(0) alone read one)
        ("CHECK_EQ", ("o.size(1)", "d")),
        ("CHECK_EQ", ("o.size(0)", "a.size(0)")),
    )
    shapes = checked_shapes(_site(*checks), {"a": ["n", "d"]})
    # not `unsized`: no check ties its axes
    assert shapes == {"a": ["n", "d"], "w": ["d"], "b": ["n", "d"], "o": ["n", "d"]}
    # checks that make the two axes of `a` one: neither dim is taken for anything
    clash = (("CHECK_DIM", ("1", "w")), ("CHECK_EQ", ("w.size(0)", "n")), *checks[1:2])
    assert checked_shapes(_site(*clash), {"a": ["n", "d"]}) == {}


def test_a_check_in_another_branch_says_nothing_of_the_call(tmp_path: Path) -> None:
    binding = tmp_path / "b.cu"
    binding.write_text(
        "void f(TensorView x, TensorView w) {\n"
        "  if (x.ndim() == 2) {\n"
        "    CHECK_EQ(x.size(1), w.size(0));\n"
        "    Launch(static_cast<float*>(x.data_ptr()), x.size(0));\n"
        "  } else {\n"
        "    CHECK_EQ(x.size(2), w.size(0));\n"
        "    Launch(static_cast<float*>(x.data_ptr()), x.size(0));\n"
        "  }\n"
        "}\n"
    )
    header = parse_source(
        "template <typename T> __global__ void k(T* x, int n) {}\n"
        "template <typename T> void Launch(T* x, int n) { k<T><<<n, 1>>>(x, n); }\n"
    )
    sites = Callers([tmp_path]).calls(header.launchers[0])
    assert [s.checks for s in sites] == [
        (("CHECK_EQ", ("x.size(1)", "w.size(0)")),),
        (("CHECK_EQ", ("x.size(2)", "w.size(0)")),),
    ]


def test_value_dispatch_macros_are_read_from_their_bodies() -> None:
    macros = parse_source(flatten(HEADER, FOLDERS).text).macros
    launch = Launch(
        kernel="k",
        template_args=("VEC", "T"),
        grid="1",
        block="1",
        smem="0",
        stream="0",
        args=(),
        dispatch=(("FW_DISPATCH_VEC", ("vec", "VEC", "{}")), ("OTHER", ("x",))),
        line=1,
    )
    variants = value_variants(launch, {**macros, "OTHER": Macro("OTHER", ("x",), "x")})
    assert [v.locals["VEC"] for v, _ in variants] == ["8", "4", "2", "1"]
    assert variants[1][0].conditions == (("(vec) == (4)", True),)
    assert variants[1][0].dispatch == (("OTHER", ("x",)),)  # not a value dispatch: kept


def test_device_code_keeps_macro_headed_functions_and_drops_host_classes() -> None:
    text = device_source(flatten(HEADER, FOLDERS).text).text
    assert "class Error" not in text  # derives from std::exception: host code
    assert "FW_INLINE float load(__half x)" in text  # FW_INLINE says __device__
    assert "typedef unsigned short ushort;" in text


def test_a_local_set_through_its_address_is_not_its_initialiser() -> None:
    source = parse_source(
        "__global__ void k(float* x) {}\n"
        "void Launch(float* x) {\n"
        "  int sms = 0;\n"
        "  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);\n"
        "  int blocks = 0;\n"
        "  cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, k, 128, 0);\n"
        "  k<<<sms * blocks, 128>>>(x);\n"
        "}\n"
    )
    found = source.launchers[0].launches[0].locals
    assert found["sms"] == "multiProcessorCount"
    assert "cudaOccupancyMaxActiveBlocksPerMultiprocessor" in found["blocks"]


def test_the_callers_size_and_dtype_checks_are_read() -> None:
    site = _site(
        ("TVM_FFI_ICHECK", ("d % 8 == 0",)),
        ("TVM_FFI_ICHECK_LE", ("d", "16384")),
        ("TVM_FFI_ICHECK", ("x.dtype() == dl_float16 || x.dtype() == dl_bfloat16",)),
        ("TVM_FFI_ICHECK", ("ok",)),
        ("CHECK_INPUT", ("x",)),
    )
    assert size_conditions(site) == ["d % 8 == 0", "(d) <= (16384)"]
    assert checked_dtypes(site, {"x"}) == {"float16", "bfloat16"}
    assert checked_dtypes(site, {"y"}) is None  # a check of another tensor says nothing
    narrower = _site(*site.checks, ("TVM_FFI_ICHECK_EQ", ("x.dtype()", "dl_bfloat16")))
    assert checked_dtypes(narrower, {"x"}) == {"bfloat16"}


@pytest.mark.usefixtures("needs_nvrtc")
def test_a_launcher_is_followed_to_its_callers_in_its_own_header(tmp_path: Path) -> None:
    """No include folder holds a binding: the header's own ``run`` calls ``launch`` with
    nullptr for its raw ``keep`` pointer, so the launch under ``keep == nullptr`` comes in
    through it; the one under ``keep != nullptr`` is dead through ``run`` and reached through
    ``run_filtered``, whose ``keep`` no check shapes and the kernel reads past the bound of its
    rows (``keep[2 * row]``): that caller's reason, not dead code."""
    report = import_file(BESIDE, [], tmp_path)
    assert not report.compile_error, report.compile_error
    filtered, plain = report.launchers
    assert plain.imported, plain.reason
    assert "shapes and dtypes from launch's caller run (filtered_rows.cuh:61)" in plain.notes
    assert not filtered.imported and filtered.applicable
    assert filtered.reason.startswith("through run_filtered (filtered_rows.cuh:67): tensor 'keep'")


def test_a_callers_template_arguments_and_defaults_set_the_launchers_flags() -> None:
    """``launch(...)`` takes ``kInPlace``'s default (false), ``launch<true>(...)`` sets it:
    the pointer chosen by ``kInPlace ? nullptr : out.data_ptr()`` is read at each caller, and
    ``keep != nullptr`` folds where the caller passes nullptr or a tensor's data_ptr()."""
    flat = flatten(BESIDE, [])
    source = parse_source(flat.text)
    (launcher,) = source.launchers
    sites = {site.function: site for site in Callers([], flat.files).calls(launcher)}
    assert sorted(sites) == ["run", "run_filtered", "run_in_place"]
    filtered_launch = launcher.launches[0]
    composed = {
        name: compose(launcher, filtered_launch, site, source.macros)
        for name, site in sites.items()
    }
    assert "false ? nullptr : out.data_ptr()" in composed["run"][1].locals["params"]
    assert "true ? nullptr : out.data_ptr()" in composed["run_in_place"][1].locals["params"]
    h100 = device_constants("sm_90", (13, 0))

    def dead(name: str) -> str:
        host, launch = composed[name]
        reshape = shape_checker(sites[name])
        return analyse(
            host,
            launch,
            source.kernels,
            source.macros,
            h100,
            source.constants,
            source.structs,
            reshape,
        ).dead

    assert dead("run") == "nullptr != nullptr"
    with pytest.raises(ValueError, match="tensor 'keep'"):
        dead("run_filtered")  # live (data_ptr() is not null), and keep is shaped nowhere


@pytest.mark.usefixtures("needs_nvrtc")
def test_an_unchecked_struct_field_takes_the_extent_of_its_reads(tmp_path: Path) -> None:
    """routed_rows.cuh, as SGLang's filtered activation: no binding checks ``ids``, and the
    kernel reads ``params.ids[row / params.step]`` only after ``if (row >= params.rows)
    return;``, ``rows`` the matcher's ``num_tokens``: ``ids`` has ``num_tokens`` elements,
    enough at any ``step`` of at least 1 (the dim's least). The kernel that hands the whole
    struct to a device function, which reads the ids out of sight, keeps its caller's reason."""
    report = import_file(ROUTED, [], tmp_path)
    assert not report.compile_error, report.compile_error
    plain, helper = report.launchers
    assert plain.imported, plain.reason
    contract = load_contract(tmp_path / "launch").contract
    assert {a.name: a.shape for a in contract.args} == {
        "input": ["num_tokens", "(output_width * 2)"],
        "out": ["num_tokens", "output_width"],
        "ids": ["num_tokens"],
    }
    ids = next(a for a in contract.args if a.name == "ids")
    assert (ids.dtype, ids.role) == ("int32", "input")
    assert contract.dims["step"].min == 1
    assert "ids: extent read from the kernel: out's axis 0" in " ".join(plain.notes)
    assert main(["validate", str(tmp_path / "launch")]) == 0
    assert not helper.imported and helper.applicable
    assert helper.reason.startswith("through run_helper (routed_rows.cuh:")
    assert "tensor 'ids': neither the launcher asks its sizes" in helper.reason


@pytest.mark.usefixtures("needs_nvrtc")
def test_an_unchecked_tensor_the_kernel_only_reads_takes_its_extent(tmp_path: Path) -> None:
    """GatherRows' binding checks neither ``pos_ids`` nor ``scale``: the kernel reads
    ``pos_ids[idx]`` only under ``idx < n`` (``n`` passed ``out.size(0)``) and ``scale[0]``
    alone, so each has one axis, ``n`` and 1; both are inputs though their parameters are not
    const; ``pos_ids``' index dispatch (int32 or int64) is imported at int32, and the element
    dispatch alone gives the operation's types."""
    gather = _results(tmp_path, FOLDERS)["GatherRows"]
    assert gather.imported, gather.reason
    assert gather.dtypes == ["float16", "bfloat16"]
    contract = load_contract(tmp_path / "gather_rows").contract
    args = {a.name: a for a in contract.args}
    assert {name: a.shape for name, a in args.items()} == {
        "out": ["n", "d"],
        "table": ["table_rows", "d"],
        "pos_ids": ["n"],
        "scale": ["1"],
    }
    assert (args["pos_ids"].dtype, args["pos_ids"].role) == ("int32", "input")
    assert (args["scale"].dtype, args["scale"].role) == ("float32", "input")
    # the ids are valid rows of the table they index, every one of them (not only the first
    # n, the rows of out, which they do not index)
    assert args["pos_ids"].init is not None and args["pos_ids"].init.below == "table_rows"
    header = load_implementation(tmp_path / "gather_rows" / "production.cu", contract).header
    assert header.entry == "fw::gather_rows_kernel<T, int32_t>"
    assert main(["validate", str(tmp_path / "gather_rows")]) == 0


def test_a_dispatch_of_no_element_type_is_imported_at_one_fixed_type() -> None:
    """An index dispatch (int32, int64) is imported at int32 and an FP8 one (e5m2, e4m3) at
    e4m3, whatever their order; a dispatch of element types stays the element's."""
    macros = parse_source(flatten(BASE / "csrc" / "rows_binding.cu", FOLDERS).text).macros
    args = ("x.dtype()", "c_t", "[&] { return true; }")
    assert fixed_dispatch_type("FW_DISPATCH_INDEX_TYPES", args, macros) == "int32_t"
    assert fixed_dispatch_type("FW_DISPATCH_FP8_TYPES", args, macros) == "__nv_fp8_e4m3"
    assert fixed_dispatch_type("FW_DISPATCH_HALF_TYPES", args, macros) is None


@pytest.mark.usefixtures("needs_nvrtc")
def test_an_output_reached_where_an_input_is_has_its_shape(tmp_path: Path) -> None:
    """MergeRows' binding checks ``a`` and ``b``, not ``out``: the kernel reaches ``out`` at
    exactly the offsets it reaches ``a`` (and writes it), so ``out`` has ``a``'s shape. Its
    float32 instantiation takes 8-byte vectors of 2 elements, 2048 threads a block at 32 heads
    of 128: the oracle runs at float16, the most precise type that launches, and says so."""
    merge = _results(tmp_path, FOLDERS)["MergeRows"]
    assert merge.imported, merge.reason
    contract = load_contract(tmp_path / "merge_rows").contract
    shape = ["tokens", "heads", "head_dim"]
    assert {a.name: a.shape for a in contract.args} == {"a": shape, "out": shape, "b": shape}
    assert "out: extent read from the kernel: a's shape, reached exactly where a is" in merge.notes
    assert any(n.startswith("oracle at float16: no float32 instantiation") for n in merge.notes)
    reference = (tmp_path / "merge_rows" / "reference.py").read_text()
    assert 'ORACLE_DTYPE = "float16"' in reference
    # its block is (head_dim / vec, heads): the least head_dim is one vector, not an empty block
    # (the domain's least shape, head_dim 1, gave 0 threads on the H100 at 63c90b4)
    assert contract.dims["head_dim"].min == 4 and contract.dims["heads"].min == 1
    assert main(["validate", str(tmp_path / "merge_rows")]) == 0


@pytest.mark.usefixtures("needs_nvrtc")
def test_no_float32_oracle_where_the_entry_is_folded_at_the_dispatched_width(
    tmp_path: Path,
) -> None:
    """MergeRows with 16-byte vectors (``vec = 16 / sizeof(T)``): the float32 block fits
    (32 x 32 threads at 32 heads of 128), but the entry is folded at 16 bits
    (``merge_rows_kernel<8, T>``), 8 floats a thread where the framework's float32 launch takes
    4, so the oracle runs at float16."""
    copy = tmp_path / "header_only"
    shutil.copytree(BASE, copy)
    header = copy / "include" / "fw" / "rows.cuh"
    text = header.read_text()
    assert "constexpr uint32_t vec = 8 / sizeof(T);" in text
    header.write_text(text.replace("vec = 8 / sizeof(T);", "vec = 16 / sizeof(T);"))
    report = import_file(header, [copy / "include", copy / "csrc"], tmp_path / "out")
    merge = {r.launcher: r for r in report.launchers}["MergeRows"]
    assert merge.imported, merge.reason
    contract = load_contract(tmp_path / "out" / "merge_rows").contract
    assert load_implementation(
        tmp_path / "out" / "merge_rows" / "production.cu", contract
    ).header.entry.startswith("fw::merge_rows_kernel<8, ")
    reference = (tmp_path / "out" / "merge_rows" / "reference.py").read_text()
    assert 'ORACLE_DTYPE = "float16"' in reference


@pytest.mark.usefixtures("needs_nvrtc")
def test_a_shape_the_callers_checks_give_is_not_replaced_by_an_extent(tmp_path: Path) -> None:
    """MergeRows with a binding that checks ``out`` as 2-D (``[tokens, width]``): the checks'
    shape stands, though the kernel reaches ``out`` where it reaches ``a`` (3-D)."""
    copy = tmp_path / "header_only"
    shutil.copytree(BASE, copy)
    binding = copy / "csrc" / "rows_binding.cu"
    text = binding.read_text()
    checks = "  FW_ICHECK_EQ(b.size(2), head_dim);\n"
    assert checks in text
    binding.write_text(
        text.replace(
            checks,
            checks + "  CHECK_DIM(2, out);\n  FW_ICHECK_EQ(out.size(0), tokens);\n"
            "  unsigned int width = out.size(1);\n",
        )
    )
    header = copy / "include" / "fw" / "rows.cuh"
    report = import_file(header, [copy / "include", copy / "csrc"], tmp_path / "out")
    merge = {r.launcher: r for r in report.launchers}["MergeRows"]
    assert merge.imported, merge.reason
    contract = load_contract(tmp_path / "out" / "merge_rows").contract
    assert {a.name: a.shape for a in contract.args}["out"] == ["tokens", "width"]


@pytest.mark.usefixtures("needs_nvrtc")
def test_an_export_sends_shapes_the_original_cannot_launch_to_the_framework(
    tmp_path: Path,
) -> None:
    """MergeRows' block is (head_dim / vec, heads): the checks verify a candidate only where
    that launches, so the exported package's requirements carry the original's limits and a
    call beyond them goes to the framework's op (which raises there), not to the candidate."""
    from astra_graph.export.dispatch_source import _original_launches
    from astra_graph.kernel import expr

    _results(tmp_path, FOLDERS)
    spec = load_contract(tmp_path / "merge_rows")
    clauses = _original_launches(spec, "sm_90")
    assert any("<= 1024" in c and "heads" in c and "*" in c for c in clauses), clauses

    def launches(dims: dict[str, int]) -> bool:
        env = {**dims, "elem_bytes": 2}
        return all(expr.evaluate(c, env) for c in clauses)

    assert launches({"tokens": 7, "heads": 32, "head_dim": 128})  # 32 x 32 threads
    assert not launches({"tokens": 3, "heads": 69, "head_dim": 419})  # 104 x 69: 7176
    assert not launches({"tokens": 3, "heads": 1, "head_dim": 2})  # an empty block


RELAYED = BASE.parent / "csrc" / "relayed_rows.cuh"
"""A JIT-style header whose raw-pointer launcher is called, through a dtype macro, by a relay
of raw pointers, which the struct's ``run`` calls with its tensors."""


@pytest.mark.usefixtures("needs_nvrtc")
def test_a_relay_of_raw_pointers_is_followed_to_the_caller_that_passes_tensors(
    tmp_path: Path,
) -> None:
    """``launch_kernel`` is called only inside ``RELAY_DTYPE``'s body, which
    ``dispatch_by_dtype`` (raw pointers too) invokes: the macro is expanded where it is called,
    the relay followed to ``run``, whose ``RuntimeCheck`` equalities shape ``out`` and the
    optional ``bias`` (taken as given); the macro's calls ``launch_kernel<float, kNegate>`` and
    ``<half, kNegate>`` give the operation's element types, the index tensor's int64 none.
    ``launch_copy``'s relay has no caller with tensors: it is imported directly, its raw
    pointers shaped by the kernel's own row-major indices (rows by the grid, ``width`` by the
    loop's bound)."""
    report = import_file(RELAYED, [], tmp_path)
    assert not report.compile_error, report.compile_error
    results = {r.launcher: r for r in report.launchers}
    gather = results["launch_kernel"]
    assert gather.imported, gather.reason
    # one call per element type, the same arguments: the types the calls instantiate
    assert sorted(gather.dtypes) == ["float16", "float32"]
    where = "relayed_rows.cuh"
    assert f"shapes and dtypes from launch_kernel's caller dispatch_by_dtype ({where}:60)" in (
        gather.notes
    )
    assert f"shapes and dtypes from dispatch_by_dtype's caller run ({where}:81)" in gather.notes
    assert f"other calls not imported: run ({where}:85, <false>)" in gather.notes
    contract = load_contract(tmp_path / "launch_kernel").contract
    args = {a.name: a for a in contract.args}
    assert {name: a.shape for name, a in args.items()} == {
        "idx": ["rows"],
        "bias": ["rows", "width"],
        "table": ["table_0", "width"],
        "out": ["rows", "width"],
    }
    assert args["idx"].dtype == "int64"
    # the indices pick rows of the table, every one of them
    assert args["idx"].init is not None and args["idx"].init.below == "table_0"
    header = load_implementation(tmp_path / "launch_kernel" / "production.cu", contract).header
    # the calls' own types per dtype; run's first call negates
    assert header.entry == "relay::gather_rows_kernel<astra_caller_t<T, half, T, float>, true>"
    assert main(["validate", str(tmp_path / "launch_kernel")]) == 0
    copy = results["launch_copy"]
    assert copy.imported, copy.reason
    assert RAW_ROOT_NOTE in copy.notes
    copied = load_contract(tmp_path / "launch_copy").contract
    assert {a.name: a.shape for a in copied.args} == {
        "out_ptr": ["rows", "width"],
        "in_ptr": ["rows", "width"],
    }


def test_only_what_a_check_asserts_on_every_path_shapes_a_tensor() -> None:
    """An ``&&`` chain's equalities, and those an absent optional tensor's test guards (the
    tensor is taken as given); nothing of a check under an ``if`` (``!(c) || ...``) or behind
    another disjunction."""
    optional = Param(
        "Optional<TensorView> bias", "bias", "Optional TensorView", False, False, False
    )
    site = replace(_site(), params=(optional,))
    assert fact_equalities("a.size(0) == n && (b.size(1) == d)", site) == [
        ("a.size(0)", "n"),
        ("b.size(1)", "d"),
    ]
    assert fact_equalities("!bias.has_value() || bias.value().size(0) == n", site) == [
        ("bias.value().size(0)", "n")
    ]
    assert fact_equalities("!(x.ndim() == 1) || (a.size(0) == n)", site) == []
    assert fact_equalities("!other.has_value() || a.size(0) == n", site) == []
    assert fact_equalities("a.size(0) == n || a.size(0) == 1", site) == []
    guarded = replace(
        site, facts=("x.ndim() == 1", "!bias.has_value() || bias.value().size(0) == x.size(0)")
    )
    assert checked_shapes(guarded, {"x": ["n"]}) == {"x": ["n"], "bias": ["n"]}


def test_a_callers_other_checks_are_conditions_where_they_compare() -> None:
    """A check read as a launcher's takes its first argument: a comparison is a condition, the
    first argument of a two-argument check (``CHECK_EQ(a, b)`` read as ``a``) is not."""
    site = replace(
        _site(),
        facts=("a.size(0)", "d % 8 == 0", "!(n == 1) || (d <= 1024)", "x.dtype() == dl_float16"),
    )
    assert size_conditions(site) == ["d % 8 == 0", "!(n == 1) || (d <= 1024)"]


def test_a_macro_that_calls_a_launcher_is_expanded_on_its_line() -> None:
    """The expansion keeps every later line's number: a caller's line is reported."""
    macros = {"CALL": Macro("CALL", ("T", "__VA_ARGS__"), "if (1) {\n  f<T>(__VA_ARGS__);\n}")}
    source = "void g(int x) {\n  CALL(kWide, x, 2);\n  h(x);\n}\n"
    expanded = expand_macros(source, macros, one_line=True)
    assert "f<kWide>(x, 2);" in expanded
    assert expanded.splitlines()[2] == "  h(x);"


def test_calls_that_differ_only_in_the_element_type_are_one_operations_types() -> None:
    """Calls of one caller with the same arguments, differing in the launcher's own type
    parameter alone, each a type that names its dtype: the operation's types; a type that
    names none (``uint16_t``), or calls that differ in anything else, are no such set."""
    template = (TemplateParam("scalar_t", "type"), TemplateParam("kFlag", "flag"))
    launcher = Launcher("launch", (), (), 1, template, own_template=2)

    def call(*targs: str, args: tuple[str, ...] = ("x",), test: str = "t == 1") -> CallSite:
        return replace(
            _site(), args=args, template_args=targs, conditions=(("ok", True), (test, True))
        )

    first = call("float", "kFlag")
    calls = [first, call("half", "kFlag", test="t == 2"), call("nv_bfloat16", "true")]
    found = caller_types(launcher, first, calls)
    assert found is not None
    assert found.types == (("float16", "half"), ("float32", "float"))
    assert found.conditions == (("ok", True),)  # each call's own dtype test is dropped
    assert caller_types(launcher, first, [first, call("uint16_t", "kFlag")]) is None
    assert caller_types(launcher, first, [first, call("half", "kFlag", args=("y",))]) is None
    assert caller_types(launcher, first, [first]) is None


def test_a_relays_own_pointer_parameter_passes_its_type_on(tmp_path: Path) -> None:
    """``Relay(T const* x, ...)`` calling ``Launch(x, ...)``: the launcher's ``T`` is the
    relay's own, left for the relay's callers to deduce (no explicit argument, no cast)."""
    relay = tmp_path / "relay.cu"
    relay.write_text(
        "template <typename T> void Relay(T const* x, int n) { Launch(x, n); }\n"
        "void f(TensorView x) { Relay(static_cast<float const*>(x.data_ptr()), x.size(0)); }\n"
    )
    header = parse_source(
        "template <typename T> __global__ void k(T const* x, int n) {}\n"
        "template <typename S> void Launch(S const* x, int n) { k<S><<<n, 1>>>(x, n); }\n"
    )
    launcher = header.launchers[0]
    (site,) = Callers([tmp_path]).calls(launcher)
    host, composed = compose(launcher, launcher.launches[0], site, {})
    assert composed.template_args == ("T",)  # the relay's T, not deduced here
    assert [p.name for p in host.params] == ["x", "n"]


_TWO_LEVELS = """
template <typename T, typename W>
__global__ void weighted_kernel(const T* in, const W* w, T* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = in[i] * static_cast<T>(w[i]);
}

template <bool kFast, typename T, typename W>
void launch_weighted(T const* in, W const* w, T* out, int n) {
  weighted_kernel<T, W><<<(n + 127) / 128, 128>>>(in, w, out, n);
}

template <typename T, typename W>
void dispatch_weighted(T const* in, W const* w, T* out, int n, bool fast) {
  if (fast) {
    launch_weighted<true>(in, w, out, n);
  } else {
    launch_weighted<false>(in, w, out, n);
  }
}
"""


def test_a_template_type_is_deduced_from_the_callers_own_pointer_parameter(
    tmp_path: Path,
) -> None:
    """FlashInfer's ``dispatch_layernorm_type`` passes its own ``Tw const* gemma`` on to
    ``dispatch_layernorm_type_square_method<true>(..., gemma, ...)``: ``Tw`` is the caller's
    ``Tw`` (the explicit ``<true>`` binds the leading flag, not ``T``); the caller passes raw
    pointers in turn and is followed to its own callers, of which there are none here: the
    launcher is then imported directly, each pointer shaped ``[n]`` by the kernel's guard."""
    header = tmp_path / "weighted.cuh"
    header.write_text(_TWO_LEVELS)
    flat = flatten(header, [])
    source = parse_source(flat.text)
    launcher = next(x for x in source.launchers if x.name == "launch_weighted")
    sites = Callers([], flat.files).calls(launcher)
    assert [s.function for s in sites] == ["dispatch_weighted", "dispatch_weighted"]
    _, composed = compose(launcher, launcher.launches[0], sites[0], source.macros)
    assert composed.template_args == ("T", "W")
    report = import_file(header, [], tmp_path / "out")
    (result,) = (r for r in report.launchers if r.launcher == "launch_weighted")
    assert result.imported, result.reason
    assert RAW_ROOT_NOTE in result.notes
    contract = load_contract(tmp_path / "out" / "launch_weighted").contract
    assert {a.name: a.shape for a in contract.args} == {"in": ["n"], "w": ["n"], "out": ["n"]}
