"""Check every kernel under a folder against its operation's production kernel, one line each.

``python benchmarks/check_kernels.py tests/fixtures/correct_kernels`` (a folder per operation
inside) on a GPU host: one evaluator for all of them; exit 1 when any is rejected. The
correct-but-different kernels must all be accepted; this is how their acceptance is measured
beside the GPU tests (benchmarks/verification_on_device.sh).
"""

from __future__ import annotations

import sys
from pathlib import Path

from astra_graph.harness.evaluator import Evaluator
from astra_graph.kernel.catalog import resolve


def main(argv: list[str]) -> int:
    root = Path(argv[0] if argv else "tests/fixtures/correct_kernels")
    paths = sorted(root.glob("*/*.cu"))
    rejected = 0
    with Evaluator(deadline_s=240) as evaluator:
        for path in paths:
            spec, production = resolve(path.parent.name)
            verdict = evaluator.check(spec, production.path, path)
            rejected += not verdict.accepted
            status = "accepted" if verdict.accepted else f"REJECTED {verdict.reason}"
            print(f"{path.parent.name}/{path.name}: {status}: {verdict.message}", flush=True)
            if verdict.evidence is not None:
                print(f"  evidence: {verdict.evidence.model_dump_json(exclude_defaults=True)}")
    print(f"{len(paths) - rejected} of {len(paths)} accepted")
    return 1 if rejected else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
