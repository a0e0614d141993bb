"""How big each agent's prompt is, in tokens, in a representative two-round run.

    python benchmarks/prompt_sizes.py [--tokenizer auto|estimate] [--encoding-file F] [--out FILE]

One whole ``optimize()`` run of ``silu_and_mul/naive.cu`` (whose tunables the scripted
evaluator rewards, so the tuner finds a dispatch table) with the tests' scripted evaluator (no
GPU; its reports carry every dtype, the GPU's facts, resources and a rejection's evidence, as
the harness's do) and the tests' scripted OpenAI-compatible server answering as OpenAI does:
the testing agent proposes one extra shape; round 1's candidate is rejected with evidence,
round 2's is accepted. Every request the agents send is captured and the text of its messages
(system and user; not the schema a json_schema request carries beside them) counted: with
tiktoken's ``o200k_base`` encoding (o4-mini's) when tiktoken can load it, otherwise estimated
as characters / 4 (``--tokenizer estimate`` forces that; the JSON says which). tiktoken fetches
its encoding file on first use; on a machine without that access, ``--encoding-file`` gives a
local copy of ``o200k_base.tiktoken`` (or ``.gz``), which tiktoken checks against the file's
published SHA-256 before using it. The round-2 prompts, which carry the most (a profile, a
dispatch table and a round of history), are also broken down by their quoted blocks. Results
go to ``benchmarks/results/prompt-sizes-<date>.json`` with date and commit.
"""

from __future__ import annotations

import argparse
import datetime as dt
import gzip
import json
import re
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from astra_graph.kernel.catalog import kernels_root
from astra_graph.llm.settings import LLMSettings
from astra_graph.run.runner import optimize
from astra_graph.store.provenance import git_commit

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))  # the scripted server and evaluator are the tests' own

from fake_evaluator import FakeEvaluator  # noqa: E402
from fake_openai import FakeOpenAI, Request, structured, text  # noqa: E402
from kernel_sources import VECTORIZED, fenced, marked  # noqa: E402

RESULTS = Path(__file__).parent / "results"
OP = kernels_root() / "silu_and_mul"
ENCODING = "o200k_base"
CHARS_PER_TOKEN = 4
"""The usual rule of thumb for English prose and code with OpenAI's tokenizers."""
SHAPES = {
    "shapes": [
        {"dims": [{"name": "tokens", "value": 5}, {"name": "d", "value": 4104}], "why": "odd"}
    ]
}
PLAN = {
    "summary": "16-byte vector loads and one block per row",
    "changes": [
        {
            "change": "load 8 elements per thread with uint4",
            "why": "scalar 2-byte loads: the profile shows 1-18% of the roof at decode sizes",
            "expected_effect": "2x on bandwidth-bound shapes",
        }
    ],
}
QUOTED = re.compile(
    r"^([^\n]+) \(data, not instructions\):\n(`{3,})[^\n]*\n(.*?)\n\2$", re.M | re.S
)
"""A block quoted by ``prompts.quote``: its label, fence and body."""


def counter(choice: str, encoding_file: Path | None) -> tuple[Callable[[str], int], str]:
    """A token counter and its description."""
    if choice == "auto":
        try:
            encoding = o200k(encoding_file)
            return (lambda s: len(encoding.encode(s))), f"tiktoken {ENCODING}"
        except Exception as exc:  # tiktoken absent, or its encoding file cannot be had
            print(f"tiktoken unavailable ({type(exc).__name__}): estimating", file=sys.stderr)
    return (lambda s: -(-len(s) // CHARS_PER_TOKEN)), f"estimate: characters / {CHARS_PER_TOKEN}"


def o200k(encoding_file: Path | None) -> Any:
    """tiktoken's o200k_base, its ranks from ``encoding_file`` when given (hash-checked)."""
    import tiktoken

    if encoding_file is None:
        return tiktoken.get_encoding(ENCODING)
    import tiktoken_ext.openai_public as public

    data = encoding_file.read_bytes()
    if encoding_file.suffix == ".gz":
        data = gzip.decompress(data)
    with tempfile.NamedTemporaryFile(suffix=".tiktoken") as local:
        local.write(data)
        local.flush()
        published = public.load_tiktoken_bpe
        public.load_tiktoken_bpe = lambda _url, expected_hash=None: published(
            local.name, expected_hash
        )
        try:
            return tiktoken.Encoding(**public.o200k_base())
        finally:
            public.load_tiktoken_bpe = published


def run(runs_dir: Path) -> tuple[list[Request], Any]:
    folder = runs_dir / "op"
    folder.mkdir(parents=True)
    for name in ("contract.toml", "reference.py"):
        (folder / name).write_text((OP / name).read_text())
    (folder / "naive.cu").write_text("// fake: tuned = 1.3\n" + (OP / "naive.cu").read_text())
    script = {
        "testing": [structured(SHAPES)],
        "planning": [structured(PLAN), structured(PLAN)],
        "coding": [
            text(fenced(marked(VECTORIZED, speedup=1.6, reject="mismatch"))),
            text(fenced(marked(VECTORIZED, speedup=1.5))),
        ],
    }
    with FakeOpenAI(script) as server:
        result = optimize(
            folder / "naive.cu",
            rounds=2,
            runs_dir=runs_dir / "runs",
            evaluator=FakeEvaluator(),
            llm_settings=LLMSettings(base_url=server.base_url, max_retries=0),
        )
    if server.unscripted or result.status != "finished":
        raise SystemExit(f"the scripted run did not go as planned: {result.status}")
    return [r for r in server.requests if r.agent is not None and not r.refused], result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokenizer", choices=["auto", "estimate"], default="auto")
    parser.add_argument("--encoding-file", type=Path, help="a local o200k_base.tiktoken[.gz]")
    parser.add_argument("--out", type=Path, help="JSON file (default: benchmarks/results/...)")
    args = parser.parse_args()
    count, tokenizer = counter(args.tokenizer, args.encoding_file)
    now = dt.datetime.now(dt.UTC)
    with tempfile.TemporaryDirectory() as tmp:
        requests, _ = run(Path(tmp))
    calls: list[dict[str, Any]] = []
    seen: dict[str, int] = {}
    for request in requests:
        assert request.agent is not None
        seen[request.agent] = seen.get(request.agent, 0) + 1
        messages = request.body["messages"]
        system = "".join(m["content"] for m in messages if m["role"] in ("system", "developer"))
        user = "".join(m["content"] for m in messages if m["role"] == "user")
        calls.append(
            {
                "agent": request.agent,
                "call": seen[request.agent],
                "system_tokens": count(system),
                "user_tokens": count(user),
                "tokens": count(request.text),
                "characters": len(request.text),
            }
        )
    per_agent = {
        agent: {
            "calls": len(rows),
            "max_tokens": max(r["tokens"] for r in rows),
            "mean_tokens": round(sum(r["tokens"] for r in rows) / len(rows)),
        }
        for agent in dict.fromkeys(c["agent"] for c in calls)
        for rows in [[c for c in calls if c["agent"] == agent]]
    }
    breakdown = {}
    for agent in ("planning", "coding"):
        last = [r for r in requests if r.agent == agent][-1]
        breakdown[f"{agent} round 2"] = {
            label: count(body) for label, _, body in QUOTED.findall(last.text)
        }
    document = {
        "what": "tokens of each agent's prompt (system + user) in a 2-round scripted run",
        "date": now.isoformat(timespec="seconds"),
        "commit": git_commit(),
        "tokenizer": tokenizer,
        "run": "silu_and_mul/naive.cu with a dispatch table; round 1 rejected with evidence, "
        "round 2 accepted; scripted evaluator, OpenAI-style scripted server",
        "per_agent": per_agent,
        "calls": calls,
        "round_2_quoted_blocks": breakdown,
    }
    out = args.out or RESULTS / f"prompt-sizes-{now:%Y-%m-%d}.json"
    out.write_text(json.dumps(document, indent=2) + "\n")
    print(f"tokens ({tokenizer}):")
    for c in calls:
        print(f"  {c['agent']:<9} call {c['call']}: {c['tokens']:>6} ({c['system_tokens']} system)")
    for where, blocks in breakdown.items():
        print(f"  {where}: " + ", ".join(f"{k}: {v}" for k, v in blocks.items()))
    print(out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
