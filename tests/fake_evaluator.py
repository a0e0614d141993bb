"""A stand-in for the harness's Evaluator, scripted by comments in the candidate's source.

``// fake: speedup = 1.4`` sets the candidate's measured speedup over the baseline (default
1.0); ``// fake: reject = mismatch`` makes the visible-suite check reject it with that reason;
``// fake: heldout = reject`` makes the held-out check reject it; ``// fake: timing =
impossible`` makes timing reject it and ``// fake: timing = crash`` makes the worker die while
timing it; ``// fake: tuned = 1.3`` multiplies the speedup by 1.3 whenever tunables are given
(the sweep's settings and the dispatch table, never the defaults alone). ``fail`` injects an
exception into chosen calls, as a broken harness would.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from astra_graph.contract import OperationSpec
from astra_graph.harness.deep import SanitizerReport, SanitizerResult
from astra_graph.harness.protocol import EvaluatorLike
from astra_graph.harness.worker import WorkerCrashed
from astra_graph.models import BenchReport, Measurement, ShapeTiming, TimingMode, Verdict

MARK = re.compile(r"//\s*fake:\s*(\w+)\s*=\s*([\w.\-]+)")
BASE_US = 20.0


def marks(path: Path) -> dict[str, str]:
    return dict(MARK.findall(path.read_text()))


@dataclass
class FakeEvaluator(EvaluatorLike):
    fail: Callable[[str, Path], bool] | None = None
    """``fail(method, candidate)`` true: raise instead of answering."""
    checks: list[dict[str, Any]] = field(default_factory=list)
    benches: list[dict[str, Any]] = field(default_factory=list)
    sanitized: list[dict[str, Any]] = field(default_factory=list)

    def __enter__(self) -> FakeEvaluator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Nothing to stop: there is no worker process."""

    def require_gpu(self) -> None:
        """As ``Evaluator.require_gpu``: the fake GPU is always there."""

    def _maybe_fail(self, method: str, candidate: Path) -> None:
        if self.fail is not None and self.fail(method, candidate):
            raise RuntimeError(f"injected harness failure in {method}")

    def check(
        self,
        op: OperationSpec,
        baseline: Path,
        candidate: Path,
        *,
        suites: Sequence[str] = ("tuning", "heldout", "edge"),
        extra_shapes: Iterable[Mapping[str, int]] = (),
        tunables: Mapping[str, int] | None = None,
    ) -> Verdict:
        self._maybe_fail("check", candidate)
        self.checks.append(
            {
                "candidate": str(candidate),
                "suites": tuple(suites),
                "extra": list(extra_shapes),
                "tunables": dict(tunables or {}),
            }
        )
        found = marks(candidate)
        if "heldout" in suites and found.get("heldout") == "reject":
            return Verdict.reject("mismatch", "fake held-out mismatch")
        if "heldout" not in suites and "reject" in found:
            return Verdict.reject(found["reject"], f"fake {found['reject']}")  # type: ignore[arg-type]  # a test marks any reason; pydantic validates it
        return Verdict(accepted=True, suites=list(suites), cases_checked=3)

    def sanitize(
        self, op: OperationSpec, candidate: Path, *, tunables: Mapping[str, int] | None = None
    ) -> SanitizerReport:
        """Both tools pass, except the one a ``// fake: sanitize = <tool>`` mark names."""
        self.sanitized.append({"candidate": str(candidate), "tunables": dict(tunables or {})})
        failing = marks(candidate).get("sanitize")
        return SanitizerReport(
            results=[
                SanitizerResult(
                    tool=tool,
                    ok=tool != failing,
                    errors=int(tool == failing),
                    summary=f"{tool}: {'1 error(s): fake' if tool == failing else 'no errors'}",
                )
                for tool in ("memcheck", "racecheck")
            ]
        )

    def bench(
        self,
        op: OperationSpec,
        candidate: Path,
        *,
        against: Path | None = None,
        mode: TimingMode = "device",
        shapes: Sequence[Mapping[str, int]] | None = None,
        dtypes: Sequence[str] | None = None,
        tunables: Mapping[str, int] | None = None,
    ) -> BenchReport:
        self._maybe_fail("bench", candidate)
        timed = [dict(d) for d in shapes] if shapes is not None else op.contract.suite("tuning")
        self.benches.append(
            {
                "candidate": str(candidate),
                "against": against,
                "shapes": timed,
                "tunables": dict(tunables or {}),
            }
        )
        found = marks(candidate)
        if found.get("timing") == "crash":
            raise WorkerCrashed("the worker died (signal 11)", exitcode=-11)
        speedup = float(found.get("speedup", "1.0")) if against else None
        if speedup is not None and tunables:
            speedup *= float(found.get("tuned", "1.0"))
        rows = []
        for dims in timed:
            moved = op.contract.bytes_for(dims, "float16")
            time_us = BASE_US / (speedup or 1.0)
            rows.append(
                ShapeTiming(
                    label=op.contract.label(dims),
                    dims=dims,
                    dtype="float16",
                    bytes_moved=moved,
                    candidate=Measurement(
                        median_us=time_us,
                        spread_us=0.1,
                        rel_std_err=0.001,
                        samples=50,
                        method="fake",
                    ),
                    baseline=Measurement(
                        median_us=BASE_US,
                        spread_us=0.1,
                        rel_std_err=0.001,
                        samples=50,
                        method="fake",
                    )
                    if against
                    else None,
                    speedup=speedup,
                    speedup_err=0.002 if against else None,
                    call=None,
                    achieved_gbps=moved / time_us / 1e3,
                    roofline_pct=100 * moved / time_us / 1e3 / 3000,
                )
            )
        geomean = (
            math.prod(r.speedup for r in rows if r.speedup is not None) ** (1 / len(rows))
            if against
            else None
        )
        return BenchReport(
            op=op.name,
            mode=mode,
            device="fake GPU",
            candidate=str(candidate),
            baseline=str(against) if against else None,
            copy_bandwidth_gbps=3000.0,
            shapes=rows,
            geomean_speedup=geomean,
            geomean_speedup_err=0.002 if against else None,
            rejection=Verdict.reject("impossible_time", "fake: faster than the bandwidth floor")
            if found.get("timing") == "impossible"
            else None,
        )
