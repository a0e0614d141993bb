"""The element types a template launcher's callers instantiate it with, as the import reads them.

vLLM's merge_attn_states launcher is ``template <typename scalar_t>``, with no dispatch of its
own: its caller's ``DISPATCH_BY_SCALAR_DTYPE`` passes ``uint16_t`` for half, and its kernel's
half path is written for that type. Drafted with ``c10::Half`` the half and bfloat16 paths did
not compile, so the import kept float32 alone (and the merge anchor timed nothing).
tests/fixtures/framework/csrc/caller_types.cu was written for these tests in that style.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from astra_graph.cli import main
from astra_graph.framework.flatten import flatten
from astra_graph.framework.importer import import_file
from astra_graph.framework.instantiations import caller_element_types
from astra_graph.framework.parse import parse_source
from astra_graph.kernel.contract import load_contract

pytestmark = pytest.mark.usefixtures("plots_not_drawn", "default_search_path")

CALLERS = Path(__file__).resolve().parent / "fixtures" / "framework" / "csrc" / "caller_types.cu"


def _types(source: str, launcher: str) -> dict[str, str]:
    return caller_element_types(source, [launcher], parse_source(source).macros)[launcher]


def test_a_dispatch_macro_handed_a_calling_macro_gives_the_callers_types() -> None:
    text = flatten(CALLERS, []).text
    assert _types(text, "scale_bits_launcher") == {
        "float32": "float",
        "float16": "uint16_t",
        "bfloat16": "__nv_bfloat16",
    }
    # calls under if / else if, at::kFloat spelled the short way
    assert _types(text, "scale_bits_direct_launcher") == {"float32": "float", "float16": "uint16_t"}


CALLER = """
template <typename scalar_t> void launch(torch::Tensor& x, int n) {{ k<scalar_t><<<1, 1>>>(n); }}
void call(torch::Tensor& x, torch::Tensor& cache, int n) {{
{body}
}}
"""


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (
            "if (x.scalar_type() == at::ScalarType::Half) launch<__half>(x, n);",
            {"float16": "__half"},
        ),
        ("if (at::kHalf == x.scalar_type()) launch<uint16_t>(x, n);", {"float16": "uint16_t"}),
        # an else branch names no type: which dtype reaches it is not read
        (
            "if (x.scalar_type() == at::kHalf) launch<uint16_t>(x, n); else launch<float>(x, n);",
            {},
        ),
        # one dtype, two types: no answer
        (
            "if (x.scalar_type() == at::kHalf) { launch<uint16_t>(x, n); launch<__half>(x, n); }",
            {},
        ),
        # a negated test, a test of two types at once, another tensor's type, a ?: between
        ("if (!(x.scalar_type() == at::kHalf)) launch<float>(x, n);", {}),
        (
            "if (x.scalar_type() == at::kHalf || x.scalar_type() == at::kBFloat16) "
            "launch<uint16_t>(x, n);",
            {},
        ),
        ("if (cache.scalar_type() == at::kHalf) launch<uint8_t>(x, n);", {}),
        ("if (x.scalar_type() == at::kHalf) n > 0 ? launch<float>(x, n) : void();", {}),
        # a call under no test, or a type no operation holds
        ("launch<float>(x, n);", {}),
        ("if (x.scalar_type() == at::ScalarType::Char) launch<int8_t>(x, n);", {}),
    ],
)
def test_only_calls_each_in_one_scalar_type_test_of_their_tensor_are_read(
    body: str, expected: dict[str, str]
) -> None:
    assert _types(CALLER.format(body=body), "launch") == expected


def test_a_macro_definition_is_no_call() -> None:
    """Only calls in function bodies count: a #define that hands the calling macro to the
    dispatch macro is not a caller, and neither is a call outside a function."""
    source = (
        "#define DISPATCH(t, fn) { if (t == at::kHalf) { fn(uint16_t); } }\n"
        "#define CALL(T) launch<T>(x, n);\n"
        "#define WRAP(t) DISPATCH(t, CALL)\n" + CALLER.format(body="int unused = 0;")
    )
    assert _types(source, "launch") == {}


@pytest.mark.usefixtures("needs_nvrtc")
def test_the_half_path_written_for_its_bits_imports_in_every_dtype(tmp_path: Path) -> None:
    """Both launchers import with every dtype their callers name, the entry spelling the
    caller's type per dtype; drafted with c10::Half, the half path found no overload of
    from_bits_float and only float32 came in."""
    report = import_file(CALLERS, [], tmp_path)
    assert not report.compile_error
    found = {r.launcher: r for r in report.launchers}
    assert found["scale_bits_launcher"].dtypes == ["float32", "float16", "bfloat16"]
    assert sorted(found["scale_bits_direct_launcher"].dtypes) == ["float16", "float32"]
    folder = tmp_path / "scale_bits_launcher"
    assert set(load_contract(folder).contract.dtypes) == {"float32", "float16", "bfloat16"}
    header = (folder / "production.cu").read_text()
    assert "entry = fw::scale_bits_kernel<astra_caller_t<T, uint16_t, __nv_bfloat16, float>>" in (
        header
    )
    assert main(["validate", str(folder)]) == 0
