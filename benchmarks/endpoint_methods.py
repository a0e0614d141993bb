"""Which structured-output method each imitated server ends up with, read from ``run.json``.

    python benchmarks/endpoint_methods.py [--out FILE]

For every mode of the tests' scripted OpenAI-compatible server (``tests/fake_openai.py``:
OpenAI, JSON mode only, plain text with JSON in prose or in a fence, ``<think>`` inline,
``reasoning_content``, llama.cpp), one whole ``optimize()`` run of ``silu_and_mul/naive.cu``
with the scripted evaluator (no GPU): the real ``ChatOpenAI`` finds the method on the testing
agent's first call and keeps it. The script reads back, from the run's ``run.json``, the method
each structured call used, the methods the server refused first, and whether every round got
its plan and code; it exits 1 if a round did not. Results go to
``benchmarks/results/endpoint-methods-<date>.json`` with date and commit, and a Markdown table
is printed.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

from astra_graph.kernel.catalog import kernels_root
from astra_graph.llm.settings import LLMSettings
from astra_graph.run.runner import optimize
from astra_graph.store.provenance import git_commit

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))  # the scripted server and evaluator are the tests' own

from fake_evaluator import FakeEvaluator  # noqa: E402
from fake_openai import IMITATIONS, FakeOpenAI, structured, text  # noqa: E402
from kernel_sources import VECTORIZED, fenced, marked  # noqa: E402

RESULTS = Path(__file__).parent / "results"
NAIVE = kernels_root() / "silu_and_mul" / "naive.cu"
ROUNDS = 2
PLAN = {"summary": "vectorize", "changes": [{"change": "a", "why": "b", "expected_effect": "c"}]}


def one_mode(name: str, runs_dir: Path) -> dict[str, Any]:
    imitation = IMITATIONS[name]
    script = {
        "testing": [structured({"shapes": []})],
        "planning": [structured({**PLAN, "summary": f"plan {k}"}) for k in (1, 2)],
        "coding": [text(fenced(marked(VECTORIZED, speedup=s))) for s in (1.2, 1.5)],
    }
    with FakeOpenAI(script, imitation) as server:
        result = optimize(
            NAIVE,
            rounds=ROUNDS,
            runs_dir=runs_dir,
            evaluator=FakeEvaluator(),
            llm_settings=LLMSettings(
                base_url=server.base_url, model=imitation.models[0], max_retries=0
            ),
        )
    saved = json.loads((Path(result.run_dir) / "run.json").read_text())
    structured_calls = [u for u in saved["usage"] if u["agent"] != "coding"]
    methods = sorted({u["method"] for u in structured_calls})
    refused = [r.method for r in server.requests if r.refused]
    planned = [r.plan is not None and r.plan.changes for r in result.rounds]
    coded = [r.candidate_path is not None for r in result.rounds]
    return {
        "mode": name,
        "refuses": sorted(imitation.refuses),
        "writes_json": imitation.wrap,
        "method": methods[0] if len(methods) == 1 else methods,
        "refused_first": refused,
        "requests": len(server.requests),
        "every_round_planned_and_coded": all(planned) and all(coded) and len(planned) == ROUNDS,
        "status": saved["status"],
        "geomean_speedup": saved["geomean_speedup"],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="JSON file (default: benchmarks/results/...)")
    args = parser.parse_args()
    now = dt.datetime.now(dt.UTC)
    with tempfile.TemporaryDirectory() as tmp:
        rows = [one_mode(name, Path(tmp) / name) for name in IMITATIONS]
    out = args.out or RESULTS / f"endpoint-methods-{now:%Y-%m-%d}.json"
    document = {
        "what": "structured-output method each imitated server ended up with (run.json usage)",
        "date": now.isoformat(timespec="seconds"),
        "commit": git_commit(),
        "rounds": ROUNDS,
        "modes": rows,
    }
    out.write_text(json.dumps(document, indent=2) + "\n")
    print("| imitated server | refuses | JSON written as | method used | refused first |")
    print("|---|---|---|---|---|")
    for r in rows:
        refuses = ", ".join(r["refuses"]) or "-"
        first = ", ".join(r["refused_first"]) or "-"
        print(f"| {r['mode']} | {refuses} | {r['writes_json']} | {r['method']} | {first} |")
    print(f"\n{out}")
    return 0 if all(r["every_round_planned_and_coded"] for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
