"""Fuzzing what a user or a model hands us (issue 26, item 5): contracts and headers cut short,
missing lines, binary and non-UTF-8 files, and model replies cut at every byte boundary.

Each case must end the way bad input is documented to end: ``astra validate`` and ``astra
kernels`` return 0, 1 or 2 with at most one line on stderr and never raise (an escaping
exception would be a traceback for the user); the reply readers return a value or a
:class:`~astra_graph.llm.replies.ReplyProblem`, never raise. Every case is generated from the
shipped ``silu_and_mul`` files and recorded replies, deterministically (no random seed to
chase). The count of cases run is printed (``pytest -s``) and checked against its floor, so
that a generator that silently produced nothing fails.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from astra_graph.cli import main
from astra_graph.kernel.catalog import kernels_root, set_search_dirs
from astra_graph.llm.replies import RawReply, ReplyProblem, read_code, read_structured
from astra_graph.loop.plans import Plan
from kernel_sources import VECTORIZED, fenced

SILU = kernels_root() / "silu_and_mul"
CUT_STEP = 23
"""Contracts are cut every this many bytes (a prime, so cuts land at every column offset of the
file's lines over its length): about 60 cuts of the 1.4 kB contract."""
HEADER_CUT_STEP = 5
"""Header lines are cut every this many characters after ``// astra:`` (a cut inside every
key, at ``=`` and inside the value, for the 20-60 character lines of the header)."""
MIN_INPUT_CASES = 150
MIN_REPLY_CASES = 1000

PLAN_REPLY = json.dumps(
    {
        "summary": "vectorize the loads",
        "changes": [{"change": "16-byte loads", "why": "5% of roofline", "expected_effect": "2x"}],
    }
)
CODE_REPLY = "Here is the faster kernel.\n\n" + fenced(VECTORIZED) + "\nIt loads 16 bytes at once."


@pytest.fixture(autouse=True)
def _reset_search_path() -> Iterator[None]:
    yield
    set_search_dirs(None)


def _contract_variants(text: bytes) -> Iterator[tuple[str, bytes]]:
    for cut in range(0, len(text), CUT_STEP):
        yield f"cut at byte {cut}", text[:cut]
    lines = text.splitlines(keepends=True)
    for i in range(len(lines)):
        yield f"line {i + 1} deleted", b"".join(lines[:i] + lines[i + 1 :])
    yield "binary", bytes(range(256)) * 4
    yield "latin-1", text.decode().replace("silu", "s\xefl\xfc").encode("latin-1")
    yield "utf-16", text.decode().encode("utf-16")
    yield "empty", b""
    yield "a NUL in the middle", text[: len(text) // 2] + b"\x00" + text[len(text) // 2 :]


def _header_variants(text: bytes) -> Iterator[tuple[str, bytes]]:
    lines = text.splitlines(keepends=True)
    header = [i for i, line in enumerate(lines) if line.startswith(b"// astra:")]
    for i in header:
        line = lines[i]
        for cut in range(len(b"// astra:"), len(line), HEADER_CUT_STEP):
            cut_line = [*lines[:i], line[:cut], b"\n", *lines[i + 1 :]]
            yield f"header line {i + 1} cut at {cut}", b"".join(cut_line)
        yield f"header line {i + 1} deleted", b"".join(lines[:i] + lines[i + 1 :])
        yield f"header line {i + 1} twice", b"".join([*lines[: i + 1], line, *lines[i + 1 :]])
    yield "binary", b"\xff\xfe\x00\x01" * 64
    yield "latin-1 header", text.replace(b"// astra: block", b"// astra: bl\xf6ck")


def _one_line_or_quiet(err: str, case: str) -> None:
    assert "Traceback" not in err, f"{case}: {err}"
    assert len(err.strip().splitlines()) <= 1, f"{case}: {err}"


def test_malformed_contracts_and_headers_end_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cases = 0
    folder = tmp_path / "ops" / "silu_and_mul"
    contract = (SILU / "contract.toml").read_bytes()
    for case, content in _contract_variants(contract):
        shutil.rmtree(folder, ignore_errors=True)
        shutil.copytree(SILU, folder)
        (folder / "contract.toml").write_bytes(content)
        code = main(["validate", str(folder), "--no-compile"])
        assert code in (0, 1, 2), case
        _one_line_or_quiet(capsys.readouterr().err, case)
        code = main(["kernels", "--path", str(folder.parent)])
        assert code in (0, 1), case  # a broken operation never hides the others
        out, err = capsys.readouterr()
        assert "fused_add_rmsnorm" in out, case
        _one_line_or_quiet(err, case)
        cases += 1
    naive = (SILU / "naive.cu").read_bytes()
    for case, content in _header_variants(naive):
        shutil.rmtree(folder, ignore_errors=True)
        shutil.copytree(SILU, folder)
        (folder / "naive.cu").write_bytes(content)
        code = main(["validate", str(folder), "--no-compile"])
        assert code in (0, 1, 2), case
        _one_line_or_quiet(capsys.readouterr().err, case)
        cases += 1
    print(f"fuzz: {cases} malformed contracts and headers, each one line or quiet")
    assert cases >= MIN_INPUT_CASES


def test_replies_cut_at_every_byte_are_read_or_refused_never_raise() -> None:
    cases, plans, codes = 0, 0, 0
    for reply in (PLAN_REPLY, f"```json\n{PLAN_REPLY}\n```", f"<think>hm</think>{PLAN_REPLY}"):
        data = reply.encode()
        for cut in range(len(data) + 1):
            text = data[:cut].decode(errors="replace")  # a cut inside a character, as sent
            for finish in ("stop", "length"):
                parsed = read_structured(RawReply(text, finish), Plan)
                assert isinstance(parsed, (Plan, ReplyProblem))
                plans += isinstance(parsed, Plan)
                cases += 1
    data = CODE_REPLY.encode()
    for cut in range(len(data) + 1):
        text = data[:cut].decode(errors="replace")
        for finish in ("stop", "length"):
            code = read_code(RawReply(text, finish))
            codes += not isinstance(code, ReplyProblem)
            cases += 1
    print(f"fuzz: {cases} cut replies read; {plans} gave a plan, {codes} gave code")
    assert cases >= MIN_REPLY_CASES
    assert plans >= 3 * 2  # every whole reply still reads
