"""Best-of-K over a GPU pool: wall time per round for K = 1, 2, 4 candidates on 1 and 2 GPUs.

    python benchmarks/scale.py [--ks 1,2,4] [--gpu-counts 1,2] [--rounds 2] [--out FILE]

Each configuration is a real ``optimize()`` run of ``silu_and_mul/naive.cu`` through the agent
graph with the real harness (compile, verify, time on the GPU) and the scripted OpenAI-compatible
server of the tests (``tests/fake_openai.py``) in place of a model. Every round the planner
returns K plans and the coder one real kernel per branch, from this fixed set:

    production            kernels/silu_and_mul/production.cu       accepted, faster
    baseline copy         kernels/silu_and_mul/naive.cu            accepted, a tie
    wrong math            tests/fixtures/bad_kernels/wrong_math.cu           rejected
    skips last element    tests/fixtures/bad_kernels/skips_last_element.cu   rejected

(the first K of them). Each gets a line naming the run and round appended, so every candidate
is new to the compile cache, as a model's would be. The pool of each GPU count is warmed first
(CUDA context, CuPy's own kernels for every verdict's path), so one-time start-up is not
counted.

Per round it reports ``evaluate_s``, the wall time from the end of planning to the end of the
join (the K coding branches: code extraction, local compile check, verification, timing: the
part best-of-K spreads over the GPUs), and ``round_s``, the whole round including the tunable
sweep of the carried candidate (bounded by ``--tune-budget-s``, one sweep whatever K). The
verdicts (which candidate, accepted or why not, faster or not, which one was carried) must be
the same whichever the GPU count; the script says whether they are and exits 1 if not.

Results go to ``benchmarks/results/scale-<device>-<date>.json`` with device, date and commit.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from astra_graph.agents.testing import VISIBLE_SUITES
from astra_graph.catalog import kernels_root
from astra_graph.contract import load_contract
from astra_graph.harness.pool import GpuPool, Slot, local_pool, visible_gpus
from astra_graph.llm import LLMSettings
from astra_graph.provenance import git_commit
from astra_graph.runner import optimize

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))  # the scripted server is the tests' own imitation

from fake_openai import FakeOpenAI, structured, text  # noqa: E402

RESULTS = Path(__file__).parent / "results"
OP = kernels_root() / "silu_and_mul"
BAD = REPO / "tests" / "fixtures" / "bad_kernels"
CANDIDATES = {
    "production": OP / "production.cu",
    "baseline copy": OP / "naive.cu",
    "wrong math": BAD / "wrong_math.cu",
    "skips last element": BAD / "skips_last_element.cu",
}


def warm(pool: GpuPool) -> float:
    """Start every slot's worker and take each scripted candidate through a check and a timing
    on every slot at once (CUDA context, CuPy's own kernels for each verdict's path); seconds.

    The runs then time candidates that are new to the compile cache, as a model's would be,
    on workers that are past their one-time start-up."""
    spec = load_contract(OP)

    def exercise(slot: Slot) -> None:
        for path in CANDIDATES.values():
            verdict = slot.evaluator.check(spec, OP / "naive.cu", path, suites=VISIBLE_SUITES)
            if verdict.accepted:
                slot.evaluator.bench(spec, path, against=OP / "naive.cu")

    started = time.monotonic()
    threads = [threading.Thread(target=exercise, args=(slot,)) for slot in pool.slots]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return time.monotonic() - started


def script(k: int, rounds: int, tag: str) -> tuple[dict[str, list[Any]], dict[str, str]]:
    """The scripted replies of one run, and which candidate each unique source is."""
    names = list(CANDIDATES)[:k]
    change = {"change": "c", "why": "w", "expected_effect": "e"}
    replies: dict[str, list[Any]] = {
        "testing": [structured({"shapes": []})],
        "planning": [],
        "coding": [],
    }
    known: dict[str, str] = {}
    for r in range(1, rounds + 1):
        plans = [{"summary": f"plan {name}", "changes": [change]} for name in names]
        replies["planning"].append(structured({"plans": plans} if k > 1 else plans[0]))
        for name in names:
            source = CANDIDATES[name].read_text() + f"\n// scale benchmark {tag} round {r}\n"
            known[source] = name
            replies["coding"].append(text(f"The kernel:\n\n```cuda\n{source}```\n"))
    return replies, known


def one_run(pool: GpuPool, k: int, rounds: int, tag: str, budget_s: float) -> dict[str, Any]:
    replies, known = script(k, rounds, tag)
    marks: list[tuple[float, dict[str, Any]]] = []

    def note(event: dict[str, Any]) -> None:
        if event.get("event") == "node_finished":
            marks.append((time.monotonic(), event))

    with FakeOpenAI(replies) as server, tempfile.TemporaryDirectory() as runs:
        settings = LLMSettings(base_url=server.base_url, max_retries=0)
        started = time.monotonic()
        result = optimize(
            OP / "naive.cu",
            rounds=rounds,
            candidates=k,
            max_repairs=0,
            runs_dir=runs,
            evaluator=pool,
            llm_settings=settings,
            tune_budget_s=budget_s,
            on_progress=note,
        )
        total_s = time.monotonic() - started
        if server.unscripted:
            raise RuntimeError(f"{len(server.unscripted)} requests had no scripted reply")
        rows = []
        tuned_at = [t for t, e in marks if e["node"] == "tuning"]
        planned_at = [t for t, e in marks if e["node"] == "planning"]
        joined_at = [t for t, e in marks if e["node"] == "join"]
        for i, record in enumerate(result.rounds):
            candidates = []
            for c in record.candidates:
                source = Path(c.candidate_path).read_text() if c.candidate_path else ""
                verdict = (c.verdict.reason or "accepted") if c.verdict else "none"
                candidates.append(
                    {
                        "name": known.get(source, "unknown"),
                        "verdict": verdict,
                        "faster": c.faster,
                        "speedup": c.geomean_speedup,
                        "carried": c.branch == record.chosen,
                    }
                )
            rows.append(
                {
                    "round": record.round,
                    "evaluate_s": joined_at[i] - planned_at[i],
                    "round_s": tuned_at[i + 1] - tuned_at[i],
                    "candidates": sorted(candidates, key=lambda c: c["name"]),
                }
            )
    return {
        "status": result.status,
        "total_s": total_s,
        "best_speedup": result.geomean_speedup,
        "rounds": rows,
        "device": (result.baseline.device if result.baseline else None),
    }


def outcomes(run: dict[str, Any], *fields: str) -> list[list[tuple[Any, ...]]]:
    """Per round, per candidate (by name): the given fields."""
    return [
        [tuple(c[f] for f in ("name", *fields)) for c in r["candidates"]] for r in run["rounds"]
    ]


def same(runs: list[dict[str, Any]], *fields: str) -> bool:
    seen = [outcomes(run, *fields) for run in runs]
    return all(v == seen[0] for v in seen)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ks", default="1,2,4", help="candidates per round to measure")
    parser.add_argument("--gpu-counts", default="1,2", help="pool sizes to measure")
    parser.add_argument("--rounds", type=int, default=3, help="rounds per run")
    parser.add_argument("--tune-budget-s", type=float, default=1.0, help="each tunable sweep")
    parser.add_argument("--out", type=Path, help="result file (default under benchmarks/results)")
    args = parser.parse_args()
    ks = [int(k) for k in args.ks.split(",")]
    if max(ks) > len(CANDIDATES):
        parser.error(f"--ks: at most {len(CANDIDATES)} candidates are scripted")
    visible = visible_gpus()
    runs: list[dict[str, Any]] = []
    skipped: list[str] = []
    device = None
    for count in (int(g) for g in args.gpu_counts.split(",")):
        if count > len(visible):
            skipped.append(f"{count} GPU(s): only {len(visible)} visible")
            continue
        with local_pool(visible[:count]) as pool:
            warm_s = warm(pool)
            print(f"{count} GPU(s): pool warm in {warm_s:.1f} s", flush=True)
            for k in ks:
                run = one_run(pool, k, args.rounds, f"g{count}k{k}", args.tune_budget_s)
                device = device or run["device"]
                run.update(gpus=count, k=k, calls_per_gpu=[s.calls for s in pool.slots])
                runs.append(run)
                per_round = [r["evaluate_s"] for r in run["rounds"]]
                print(
                    f"  K={k}: evaluate {statistics.median(per_round):.2f} s/round "
                    f"(rounds {', '.join(f'{s:.2f}' for s in per_round)}), "
                    f"whole round {statistics.median(r['round_s'] for r in run['rounds']):.2f} s",
                    flush=True,
                )
    table = []
    identical = True
    counts = sorted({r["gpus"] for r in runs})
    for k in ks:
        mine = {r["gpus"]: r for r in runs if r["k"] == k}
        row: dict[str, Any] = {"k": k}
        for count in counts:
            if count in mine:
                row[f"evaluate_s_{count}gpu"] = statistics.median(
                    x["evaluate_s"] for x in mine[count]["rounds"]
                )
                row[f"round_s_{count}gpu"] = statistics.median(
                    x["round_s"] for x in mine[count]["rounds"]
                )
        if len(mine) > 1:
            # verdicts and the carried candidate must agree; "faster" is a timing outcome
            # (a tie can fall either side of the noise), reported beside them
            row["same_verdicts"] = same(list(mine.values()), "verdict", "carried")
            row["same_faster"] = same(list(mine.values()), "faster")
            identical = identical and row["same_verdicts"]
        if 1 in mine and 2 in mine:
            row["ratio_2_to_1"] = row["evaluate_s_2gpu"] / row["evaluate_s_1gpu"]
        table.append(row)
    print(
        "\n| K | evaluate s/round, 1 GPU | 2 GPUs | 2 / 1 | whole round, 1 GPU | 2 GPUs "
        "| same verdicts | same faster |"
    )
    print("|---:|---:|---:|---:|---:|---:|---|---|")
    keys = ("evaluate_s_1gpu", "evaluate_s_2gpu", "ratio_2_to_1", "round_s_1gpu", "round_s_2gpu")
    for row in table:
        cells = [f"{row[key]:.2f}" if key in row else "-" for key in keys]
        flags = [str(row.get("same_verdicts", "-")), str(row.get("same_faster", "-"))]
        print(f"| {row['k']} | " + " | ".join(cells + flags) + " |")
    for note in skipped:
        print(f"skipped: {note}")
    today = dt.date.today().isoformat()
    tag = (device or "unknown").split()[-1].lower()
    out = args.out or RESULTS / f"scale-{tag}-{today}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    payload = {
        "benchmark": "scale",
        "device": device,
        "gpus_visible": len(visible),
        "date": today,
        "commit": git_commit(),
        "host_cpus": os.cpu_count(),
        "rounds": args.rounds,
        "tune_budget_s": args.tune_budget_s,
        "table": table,
        "runs": runs,
        "skipped": skipped,
        "identical_verdicts": identical,
    }
    out.write_text(json.dumps(payload, indent=2) + "\n")
    print(f"identical verdicts across GPU counts: {identical}; results: {out}")
    return 0 if identical else 1


if __name__ == "__main__":
    sys.exit(main())
