"""The import's reading of a template value that follows a size (SGLang's ``D.set_value(kDim)``)
and of the sizes such a kernel builds at, on the CPU, without a framework release.

The whole path runs against SGLang 0.5.23's rmsnorm.cuh in tests/test_anchors_vllm.py (where the
release is fetched) and on the H100 in benchmarks/frameworks.py; these tests hold its parts.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from astra_graph.framework import draft, importer
from astra_graph.framework.launchers import fixed_size


def test_a_symbolic_size_fixed_to_a_template_value_names_that_size() -> None:
    checks = ("N.unwrap() > 0", "D.unwrap() == (kDim)", "S.unwrap() == (kOther)")
    assert fixed_size(checks, "kDim") == "D.unwrap()"
    assert fixed_size(checks, "kOther") == "S.unwrap()"
    assert fixed_size(checks, "kUsePDL") is None
    assert fixed_size(("D.unwrap() == (kDim + 1)",), "kDim") is None  # not the value itself


def _analysis(requires: list[str], dims: list[str]) -> Any:
    return SimpleNamespace(requires=requires, dims=dims)


def test_a_requirement_listing_sizes_confines_that_dim() -> None:
    listed = "hidden == 512 or hidden == 1024 or hidden == 4096"
    assert draft._allowed(_analysis([listed], ["tokens", "hidden"])) == {
        "hidden": (512, 1024, 4096)
    }
    # one term, two dims, or a term that is no equality: not a list of sizes
    for other in ("hidden == 512", "hidden == 512 or tokens == 4", "hidden == 512 or hidden > 9"):
        assert draft._allowed(_analysis([other], ["tokens", "hidden"])) == {}
    assert draft._nearest((4096, 14336), (512, 1024, 4096, 8192)) == (4096, 8192)
    assert draft._nearest((5120,), (64, 128, 256)) == (256,)


class _Compiler:
    """A device compiler whose entries fail where ``refuses`` says (a static_assert)."""

    def __init__(self, refuses: Any) -> None:
        self.refuses = refuses
        self.programs: list[list[str]] = []

    def first_error(self, entries: list[str]) -> str | None:
        self.programs.append(entries)
        bad = [e for e in entries if self.refuses(e)]
        return f"static assertion failed ({bad[0]})" if bad else None


def _specialized(dtypes: tuple[str, ...] = ("float16", "bfloat16")) -> Any:
    return SimpleNamespace(
        entry="ns::norm<ASTRA_SIZE_KDIM, false, T>",
        dtypes=dtypes,
        specializations={"ASTRA_SIZE_KDIM": "hidden_size"},
        built_at={},
        followed={},
        requires=[],
        notes=[],
    )


def _size(entry: str) -> int:
    return int(entry.split("<", 1)[1].split(",", 1)[0])


def test_the_sizes_a_specialized_kernel_builds_at_become_its_requirement() -> None:
    analysis = _specialized()
    result = SimpleNamespace(reason="", dtypes=[])
    compiler = _Compiler(lambda e: _size(e) % 256 or _size(e) > 8192)
    assert importer._admitted_sizes(result, analysis, compiler)  # type: ignore[arg-type]
    admitted = [v for v in importer.SPECIALIZED_SIZES if v % 256 == 0 and v <= 8192]
    assert analysis.requires == [" or ".join(f"hidden_size == {v}" for v in admitted)]
    assert analysis.built_at == {"ASTRA_SIZE_KDIM": admitted[0]}
    assert "builds at" in analysis.notes[0] and "12288" in analysis.notes[0]


def test_a_specialized_kernel_that_builds_everywhere_is_not_narrowed() -> None:
    analysis = _specialized()
    result = SimpleNamespace(reason="", dtypes=[])
    assert importer._admitted_sizes(result, analysis, _Compiler(lambda e: False))  # type: ignore[arg-type]
    assert analysis.requires == [] and analysis.built_at == {"ASTRA_SIZE_KDIM": 8}


def test_an_element_type_that_fails_at_an_admitted_size_is_left_out() -> None:
    analysis = _specialized(("float32", "float16", "bfloat16"))
    result = SimpleNamespace(reason="", dtypes=[])
    compiler = _Compiler(lambda e: _size(e) != 4096 or e.endswith(", float>"))
    assert importer._admitted_sizes(result, analysis, compiler)  # type: ignore[arg-type]
    assert analysis.dtypes == ("float16", "bfloat16") and result.dtypes == ["float16", "bfloat16"]
    assert analysis.requires == ["hidden_size == 4096"]


def test_a_specialized_kernel_that_builds_nowhere_is_refused_with_the_sizes() -> None:
    analysis = _specialized()
    result = SimpleNamespace(reason="", dtypes=[])
    assert not importer._admitted_sizes(result, analysis, _Compiler(lambda e: True))  # type: ignore[arg-type]
    assert result.reason.startswith("its instantiation builds at none of the sizes")
    assert "(NVRTC at 8: static assertion failed (ns::norm<8, false, __half>))" in result.reason


def _followed(dtypes: tuple[str, ...] = ("float16", "bfloat16")) -> Any:
    """A launch following FlashInfer-style ``DISPATCH_HEAD_DIM`` cases, its vector width and
    lanes derived from the head size."""
    return SimpleNamespace(
        entry="ns::rope<ASTRA_SIZE_HEAD, ASTRA_SIZE_VEC, ASTRA_SIZE_LANES, T>",
        dtypes=dtypes,
        specializations={
            "ASTRA_SIZE_HEAD": "head_dim",
            "ASTRA_SIZE_VEC": "max(8, head_dim // 32)",
            "ASTRA_SIZE_LANES": "head_dim // max(8, head_dim // 32)",
        },
        built_at={},
        followed={"head_dim": (64, 128, 256, 512)},
        requires=[],
        notes=[],
    )


def test_each_case_a_followed_dispatch_builds_at_is_compiled_with_its_derived_values() -> None:
    """Every case is compiled with each specialization at its value there (head 512: vectors of
    16, 32 lanes); a case that does not build narrows the domain, said; the first case that
    builds is the one the import compiles at."""
    analysis = _followed()
    result = SimpleNamespace(reason="", dtypes=[])
    compiler = _Compiler(lambda e: e.startswith("ns::rope<64,"))
    assert importer._admitted_sizes(result, analysis, compiler)  # type: ignore[arg-type]
    assert any("ns::rope<512, 16, 32, __half>" in p for p in compiler.programs)
    assert analysis.built_at == {
        "ASTRA_SIZE_HEAD": 128,
        "ASTRA_SIZE_VEC": 8,
        "ASTRA_SIZE_LANES": 16,
    }
    assert analysis.requires == ["head_dim == 128 or head_dim == 256 or head_dim == 512"]
    assert "[{'head_dim': 64}] do not build" in analysis.notes[0]


def test_a_followed_dispatch_that_builds_everywhere_adds_no_requirement() -> None:
    analysis = _followed()
    result = SimpleNamespace(reason="", dtypes=[])
    assert importer._admitted_sizes(result, analysis, _Compiler(lambda e: False))  # type: ignore[arg-type]
    assert analysis.requires == [] and analysis.built_at["ASTRA_SIZE_HEAD"] == 64


def test_an_element_type_failing_at_a_followed_case_is_left_out() -> None:
    analysis = _followed()
    result = SimpleNamespace(reason="", dtypes=[])
    compiler = _Compiler(lambda e: e.startswith("ns::rope<512,") and "bfloat16" in e)
    assert importer._admitted_sizes(result, analysis, compiler)  # type: ignore[arg-type]
    assert analysis.dtypes == ("float16",) and result.dtypes == ["float16"]
    assert "bfloat16 do not build at every case" in analysis.notes[0]


def test_a_followed_dispatch_that_builds_at_no_case_is_refused() -> None:
    analysis = _followed()
    result = SimpleNamespace(reason="", dtypes=[])
    assert not importer._admitted_sizes(result, analysis, _Compiler(lambda e: True))  # type: ignore[arg-type]
    assert result.reason.startswith("its instantiation builds at none of the dispatch's cases")
    # the compiler's own first error is in the reason: a missing header or an old CCCL on the
    # host says so, where the bare refusal looked like the kernel's fault
    assert "(NVRTC at {'head_dim': 64}: static assertion failed (ns::rope<64," in result.reason


def test_a_refusal_quotes_the_compilers_cached_error_without_compiling_again(
    monkeypatch: Any,
) -> None:
    """With the import's own compiler: NVRTC's first error at the first case goes into the
    refusal on one line, and it is the answer of a compile already made, not a new one."""
    from astra_graph.framework.device import DeviceCompile

    programs: list[list[str]] = []

    def failing(source: str, entries: list[str], arch: str, std: str | None) -> DeviceCompile:
        programs.append(entries)
        log = f"imported.cu(845): error: qualified name is not allowed\n  at {entries[0]}\n"
        return DeviceCompile(False, 0.0, log, {})

    monkeypatch.setattr(importer, "compile_device", failing)
    compiler = importer._DeviceCompiler(source="", arch="sm_90")
    result = SimpleNamespace(reason="", dtypes=[])
    assert not importer._admitted_sizes(result, _followed(), compiler)  # type: ignore[arg-type]
    # one program of the four cases, then each case alone to tell whose the error is
    assert len(programs) == 5
    assert "(NVRTC at {'head_dim': 64}: imported.cu(845): error: qualified name" in result.reason
    assert "\n" not in result.reason
    # a log with no error line (a crashed compile) still gives a reason of one line
    monkeypatch.setattr(
        importer,
        "compile_device",
        lambda source, entries, arch, std: DeviceCompile(False, 0.0, "killed\n  by signal 9\n", {}),
    )
    result = SimpleNamespace(reason="", dtypes=[])
    compiler = importer._DeviceCompiler(source="", arch="sm_90")
    assert not importer._admitted_sizes(result, _specialized(), compiler)  # type: ignore[arg-type]
    assert result.reason.endswith("(NVRTC at 8: killed by signal 9)")
