"""Best-of-K over a GPU pool: wall time per round for K = 1, 2, 4 candidates on 1 and 2 GPUs.

    python benchmarks/scale.py [--ks 1,2,4] [--gpu-counts 1,2] [--rounds 2] [--out FILE]

Each configuration is a real ``optimize()`` run of ``silu_and_mul/naive.cu`` through the agent
graph with the real harness (compile, verify, time on the GPU) and the scripted OpenAI-compatible
server of the tests (``tests/fake_openai.py``) in place of a model. Every round the planner
returns K plans and the coder one real kernel per branch, the first K of four distinct correct
kernels (``CANDIDATES``: production.cu and three of ``tests/fixtures/correct_kernels``), so each
of the K is accepted and pays a full verification and a timing against the baseline, as K
good ideas of a model would. Production.cu is far ahead of the other three (a row spread over
many blocks against one block per row), so which one is carried is not a toss-up of the noise.
Each gets a line naming the run and round appended, so every candidate is new to the compile
cache, as a model's would be. The pools are warmed first (CUDA context, CuPy's own kernels for
the rounds' checks and timings and for the tuner's full verification), so one-time start-up is
not counted. The runs alternate between GPU counts (K=4 first), so drift of the machine falls
on both alike.

Per round it reports ``evaluate_s``, the wall time from the end of planning to the end of the
join (the K coding branches: code extraction, local compile check, verification, timing: the
part best-of-K spreads over the GPUs), and ``round_s``, the whole round: it adds the carried
candidate's tunable sweep (production.cu every round: 11 settings x 3 buckets, each timed
against the default, then each bucket's pick verified, then the dispatch table timed), which
the tuner also spreads over the pool. The sweep's budget (``--tune-budget-s``) is large enough
that every setting is timed on either GPU count, so both do the same work; the JSON says how
many were timed per round. The verdicts (which candidate, accepted or why not, which one was
carried) must be the same whichever the GPU count; the script says whether they are and exits 1
if not. Faster-or-not and the dispatch tables are timing outcomes and reported beside them.

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
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from astra_graph.harness.pool import GpuPool, Slot, local_pool, visible_gpus
from astra_graph.harness.tuning import config_label
from astra_graph.kernel.catalog import kernels_root
from astra_graph.kernel.contract import load_contract
from astra_graph.llm.settings import LLMSettings
from astra_graph.loop.agents.testing import VISIBLE_SUITES
from astra_graph.run.runner import optimize
from astra_graph.store.provenance import git_commit

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))  # the scripted server is the tests' own imitation

from fake_openai import FakeOpenAI, structured, text  # noqa: E402

RESULTS = Path(__file__).parent / "results"
OP = kernels_root() / "silu_and_mul"
CORRECT = REPO / "tests" / "fixtures" / "correct_kernels" / "silu_and_mul"
CANDIDATES = {
    # (row chunks, rows) grid, VECS 16-byte vectors per thread; tunable (BLOCK, VECS)
    "production": OP / "production.cu",
    # one block per row sized to it, 16-byte vectors, exp2f sigmoid
    "exp2 sigmoid": CORRECT / "exp2_form.cu",
    # 64 threads per row, four 16-byte vectors in flight per thread
    "unrolled ilp": CORRECT / "unrolled_ilp.cu",
    # one warp per row, 4-byte loads
    "warp per row": CORRECT / "warp_per_row.cu",
}
DEFAULT_TUNE_BUDGET_S = 60.0
"""Every setting of production.cu's sweep fits (about 5 s on one H200), so 1 and 2 GPUs do the
same work: a budget that ran out would buy more timings on more GPUs, not a shorter round."""


def warm(pool: GpuPool) -> float:
    """Start every slot's worker and take each scripted candidate through a check and a timing
    on every slot at once (CUDA context, CuPy's own kernels for each verdict's path); seconds.

    The runs then time candidates that are new to the compile cache, as a model's would be,
    on workers that are past their one-time start-up."""
    spec = load_contract(OP)
    production = CANDIDATES["production"]
    setting = {"BLOCK": 64, "VECS": 4}

    def exercise(slot: Slot) -> None:
        for path in CANDIDATES.values():
            verdict = slot.evaluator.check(spec, OP / "naive.cu", path, suites=VISIBLE_SUITES)
            if verdict.accepted:
                slot.evaluator.bench(spec, path, against=OP / "naive.cu")
        # the tuner's calls: a setting timed against the default, its full verification
        slot.evaluator.bench(spec, production, against=production, tunables=setting)
        slot.evaluator.check(spec, OP / "naive.cu", production, tunables=setting)

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
        sweeps = {r.round: r.tuning.report for r in result.rounds if r.tuning is not None}
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
            sweep = sweeps.get(record.round)
            rows.append(
                {
                    "round": record.round,
                    "evaluate_s": joined_at[i] - planned_at[i],
                    "round_s": tuned_at[i + 1] - tuned_at[i],
                    "tuning_s": sweep.seconds if sweep else None,
                    "settings_timed": sweep.tried if sweep else 0,
                    "dispatch": {e.bucket: config_label(e.tunables) for e in sweep.dispatch}
                    if sweep
                    else {},
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


def same_rounds(runs: list[dict[str, Any]], field: str) -> bool:
    """Whether a round-level field is the same per round in every run."""
    seen = [[r[field] for r in run["rounds"]] for run in runs]
    return all(v == seen[0] for v in seen)


def summarize(ks: list[int], runs: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], bool]:
    """Per K: median evaluate and round seconds per GPU count, ratios, and the comparisons."""
    table = []
    identical = True
    counts = sorted({r["gpus"] for r in runs})
    for k in ks:
        mine = {r["gpus"]: r for r in runs if r["k"] == k}
        if not mine:
            continue
        row: dict[str, Any] = {"k": k}
        for count in counts:
            if count in mine:
                for key in ("evaluate_s", "round_s", "tuning_s"):
                    row[f"{key}_{count}gpu"] = statistics.median(
                        x[key] or 0.0 for x in mine[count]["rounds"]
                    )
        if len(mine) > 1:
            # verdicts and the carried candidate must agree; "faster" and the dispatch tables
            # are timing outcomes (a tie can fall either side of the noise), reported beside
            row["same_verdicts"] = same(list(mine.values()), "verdict", "carried")
            row["same_faster"] = same(list(mine.values()), "faster")
            row["same_settings_timed"] = same_rounds(list(mine.values()), "settings_timed")
            row["same_dispatch"] = same_rounds(list(mine.values()), "dispatch")
            identical = identical and row["same_verdicts"]
        if 1 in mine and 2 in mine:
            row["evaluate_ratio_2_to_1"] = row["evaluate_s_2gpu"] / row["evaluate_s_1gpu"]
            row["round_ratio_2_to_1"] = row["round_s_2gpu"] / row["round_s_1gpu"]
        table.append(row)
    return table, identical


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ks", default="1,2,4", help="candidates per round to measure")
    parser.add_argument("--gpu-counts", default="1,2", help="pool sizes to measure")
    parser.add_argument("--rounds", type=int, default=3, help="rounds per run")
    parser.add_argument(
        "--tune-budget-s",
        type=float,
        default=DEFAULT_TUNE_BUDGET_S,
        help="each tunable sweep's budget",
    )
    parser.add_argument("--out", type=Path, help="result file (default under benchmarks/results)")
    args = parser.parse_args()
    ks = [int(k) for k in args.ks.split(",")]
    if max(ks) > len(CANDIDATES):
        parser.error(f"--ks: at most {len(CANDIDATES)} candidates are scripted")
    visible = visible_gpus()
    counts = [int(g) for g in args.gpu_counts.split(",")]
    skipped = [f"{c} GPU(s): only {len(visible)} visible" for c in counts if c > len(visible)]
    counts = [c for c in counts if c <= len(visible)]
    runs: list[dict[str, Any]] = []
    today = dt.date.today().isoformat()
    out: Path | None = args.out
    payload: dict[str, Any] = {}
    with ExitStack() as stack:
        pools = {c: stack.enter_context(local_pool(visible[:c])) for c in counts}
        for count, pool in pools.items():
            print(f"{count} GPU(s): pool warm in {warm(pool):.1f} s", flush=True)
        for k in sorted(ks, key=lambda k: -k):  # the largest K first
            for count, pool in pools.items():
                before = [s.calls for s in pool.slots]
                run = one_run(pool, k, args.rounds, f"g{count}k{k}", args.tune_budget_s)
                calls = [s.calls - b for s, b in zip(pool.slots, before, strict=True)]
                run.update(gpus=count, k=k, calls_per_gpu=calls)
                runs.append(run)
                rounds = run["rounds"]
                evaluate = ", ".join(f"{r['evaluate_s']:.2f}" for r in rounds)
                whole = ", ".join(f"{r['round_s']:.2f}" for r in rounds)
                print(
                    f"  {count} GPU(s) K={k}: evaluate {evaluate} s, whole round {whole} s, "
                    f"settings timed {[r['settings_timed'] for r in rounds]}, "
                    f"calls per GPU {calls}",
                    flush=True,
                )
                # written after every run, so a run cut short still leaves what it measured
                device = next((r["device"] for r in runs if r["device"]), None)
                table, identical = summarize(ks, runs)
                tag = (device or "unknown").split()[-1].lower()
                out = args.out or RESULTS / f"scale-{tag}x{len(visible)}-{today}.json"
                payload = {
                    "benchmark": "scale",
                    "device": device,
                    "gpus_visible": len(visible),
                    "date": today,
                    "commit": git_commit(),
                    "host_cpus": os.cpu_count(),
                    "rounds": args.rounds,
                    "tune_budget_s": args.tune_budget_s,
                    "candidates": {
                        name: str(path.relative_to(REPO)) for name, path in CANDIDATES.items()
                    },
                    "table": table,
                    "runs": runs,
                    "skipped": skipped,
                    "identical_verdicts": identical,
                }
                out.parent.mkdir(parents=True, exist_ok=True)
                out.write_text(json.dumps(payload, indent=2) + "\n")
    table, identical = summarize(ks, runs)
    print(
        "\n| K | evaluate s/round, 1 GPU | 2 GPUs | 2 / 1 | whole round s, 1 GPU | 2 GPUs "
        "| 2 / 1 | same verdicts | same faster | same settings timed |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---|---|---|")
    keys = (
        "evaluate_s_1gpu",
        "evaluate_s_2gpu",
        "evaluate_ratio_2_to_1",
        "round_s_1gpu",
        "round_s_2gpu",
        "round_ratio_2_to_1",
    )
    flags = ("same_verdicts", "same_faster", "same_settings_timed")
    for row in table:
        cells = [f"{row[key]:.2f}" if key in row else "-" for key in keys]
        cells += [str(row.get(flag, "-")) for flag in flags]
        print(f"| {row['k']} | " + " | ".join(cells) + " |")
    for note in skipped:
        print(f"skipped: {note}")
    print(f"identical verdicts across GPU counts: {identical}; results: {out}")
    return 0 if identical else 1


if __name__ == "__main__":
    sys.exit(main())
