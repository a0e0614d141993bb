"""How often one run loads ``contract.toml`` and parses ``.cu`` headers (issue 9, item 2).

    python benchmarks/load_counts.py [--rounds 1,2] [--json out.json]

Each figure is one ``optimize()`` run of ``silu_and_mul/naive.cu`` through the multi-agent graph
on the CPU: the scripted OpenAI-compatible server of the tests (``tests/fake_openai.py``) in
place of a model and the scripted evaluator (``tests/fake_evaluator.py``) in place of the GPU
harness, so only the agent layer's own loads are counted (the real harness's worker adds its
own per request, outside this count). Every round the coder writes one accepted candidate.

``contract.toml`` loads are calls of
:func:`astra_graph.kernel.contract.load_contract`; header parses
are calls of :func:`astra_graph.kernel.header.parse_header_lines` (every ``load_implementation`` and
every ``contract_folder_of`` that reads a header). The counters replace the two functions in
every loaded module that imported them, so calls through any import path are seen. Each run
is a process of its own, so no run finds files read by the one before.

The last line is the header parses of one candidate file on its way from the coding agent's
reply to its verdict and timing through the real ``Evaluator`` (``tests/parse_path.py``: the
worker's jobs are replaced by an in-process stand-in that rebuilds the request's
implementations as they do, since the jobs need a GPU). Issue 21 counted 5 before the parse
travelled with the candidate.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))  # the scripted server and evaluator of the tests

from astra_graph.kernel import contract, header  # noqa: E402
from astra_graph.kernel.catalog import kernels_root  # noqa: E402
from astra_graph.llm.settings import LLMSettings  # noqa: E402
from astra_graph.run.runner import optimize  # noqa: E402
from fake_evaluator import FakeEvaluator  # noqa: E402
from fake_openai import FakeOpenAI, structured, text  # noqa: E402
from kernel_sources import VECTORIZED, fenced, marked  # noqa: E402
from parse_path import parses_from_reply_to_verdict  # noqa: E402

COUNTED = {
    "contract loads": (contract, "load_contract"),
    "header parses": (header, "parse_header_lines"),
}


def install_counters(counts: Counter[str]) -> None:
    """Replace each counted function by a counting wrapper wherever a module holds it."""
    for label, (module, name) in COUNTED.items():
        original: Callable[..., Any] = getattr(module, name)

        def counting(*args: Any, _label: str = label, _f: Any = original, **kw: Any) -> Any:
            counts[_label] += 1
            return _f(*args, **kw)

        for loaded in list(sys.modules.values()):
            if loaded is not None and getattr(loaded, name, None) is original:
                setattr(loaded, name, counting)


def one_run(rounds: int, runs_dir: Path, counts: Counter[str]) -> dict[str, int]:
    change = {"change": "16-byte loads", "why": "5% of roofline", "expected_effect": "2x"}
    script = {
        "testing": [structured({"shapes": []})],
        "planning": [
            structured({"summary": f"idea {k}", "changes": [change]}) for k in range(rounds)
        ],
        "coding": [text(fenced(marked(VECTORIZED, speedup=1.2 + 0.1 * k))) for k in range(rounds)],
    }
    with FakeOpenAI(script) as server:
        counts.clear()
        optimize(
            kernels_root() / "silu_and_mul" / "naive.cu",
            rounds=rounds,
            runs_dir=runs_dir,
            evaluator=FakeEvaluator(),
            llm_settings=LLMSettings(base_url=server.base_url, max_retries=1),
        )
        return dict(counts)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", default="1,2", help="comma-separated round counts")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument("--one", type=int, help=argparse.SUPPRESS)  # a child: one run
    parser.add_argument("--path", action="store_true", help=argparse.SUPPRESS)  # a child
    args = parser.parse_args()
    if args.path:
        with tempfile.TemporaryDirectory() as tmp:
            print(json.dumps({"candidate_parses": parses_from_reply_to_verdict(Path(tmp))}))
        return
    if args.one is not None:
        counts: Counter[str] = Counter()
        install_counters(counts)
        with tempfile.TemporaryDirectory() as tmp:
            print(json.dumps(one_run(args.one, Path(tmp), counts)))
        return
    figures: dict[str, object] = {}
    for rounds in args.rounds.split(","):
        found = _child("--one", rounds)
        figures[f"{rounds} rounds"] = found
        print(f"{rounds} round(s): " + ", ".join(f"{found.get(k, 0)} {k}" for k in COUNTED))
    parses = _child("--path")["candidate_parses"]
    figures["candidate parses from reply to verdict"] = parses
    if args.json is not None:
        args.json.write_text(json.dumps(figures, indent=2) + "\n")
    print(f"one candidate from reply to verdict and timing: {parses} header parse(s)")


def _child(*flags: str) -> dict[str, int]:
    """The figures of one child process (a fresh interpreter: no file read before)."""
    out = subprocess.run(
        [sys.executable, __file__, *flags], check=True, capture_output=True, text=True
    )
    found: dict[str, int] = json.loads(out.stdout.strip().splitlines()[-1])
    return found


if __name__ == "__main__":
    main()
