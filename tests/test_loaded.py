"""The agent layer's loader reads a file once per version: unchanged files are not parsed again,
an edited contract or kernel is."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from astra_graph.kernel import header, loaded
from astra_graph.kernel.catalog import kernels_root

OP = kernels_root() / "silu_and_mul"


@pytest.fixture
def op_copy(tmp_path: Path) -> Path:
    folder = tmp_path / "silu_and_mul"
    shutil.copytree(OP, folder)
    return folder


def bump(path: Path, text: str) -> None:
    """Rewrite ``path`` with ``text`` and a later modification time than it had."""
    before = path.stat().st_mtime_ns
    path.write_text(text)
    os.utime(path, ns=(before + 10**9, before + 10**9))


def test_an_unchanged_kernel_is_parsed_once(op_copy: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    parses: list[str] = []
    parse = header.parse_header_lines

    def counting(source: str, where: str) -> dict[str, object]:
        parses.append(where)
        return parse(source, where)

    monkeypatch.setattr(header, "parse_header_lines", counting)
    kernel = op_copy / "naive.cu"
    spec, first = loaded.kernel(kernel)
    again_spec, again = loaded.kernel(kernel)
    assert again is first and again_spec is spec
    assert parses == [str(kernel)]


def test_an_edited_file_is_read_again(op_copy: Path) -> None:
    kernel = op_copy / "naive.cu"
    spec, first = loaded.kernel(kernel)
    bump(kernel, first.source.replace("// astra:", "// astra: requires = d % 2 == 0\n// astra:", 1))
    _, edited = loaded.kernel(kernel)
    assert edited is not first and "d % 2 == 0" in edited.header.requires

    contract = op_copy / "contract.toml"
    text = contract.read_text()
    bump(contract, text.replace(f'name = "{spec.name}"', 'name = "renamed_op"', 1))
    assert loaded.spec_of(kernel).name == "renamed_op"


def test_a_written_candidate_is_not_parsed_again(
    op_copy: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec, impl = loaded.kernel(op_copy / "naive.cu")
    target = op_copy / "candidate.cu"
    target.write_text(impl.source)
    written = impl.model_copy(update={"path": target})
    loaded.remember(spec, written)
    monkeypatch.setattr(header, "parse_header_lines", None)  # any parse would fail
    assert loaded.implementation(spec, target) is written
