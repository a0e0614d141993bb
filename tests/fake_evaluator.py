"""A stand-in for the harness's Evaluator, scripted by comments in the candidate's source.

``// fake: speedup = 1.4`` sets the candidate's measured speedup over the baseline (default
1.0); ``// fake: reject = mismatch`` makes the visible-suite check reject it with that reason;
``// fake: heldout = reject`` makes the held-out check reject it; ``// fake: timing =
impossible`` makes timing reject it and ``// fake: timing = crash`` makes the worker die while
timing it; ``// fake: tuned = 1.3`` multiplies the speedup by 1.3 whenever tunables are given
(the sweep's settings and the dispatch table, never the defaults alone). ``fail`` injects an
exception into chosen calls, as a broken harness would. ``delays_s`` makes calls slow: for
``check``, ``bench`` (the baseline's, no ``against``), ``measure`` (a candidate's, timed
against the baseline) and ``tune`` (either, with tunables), the first such call sleeps that
long in a real harness worker process (``harness.worker.Worker``), so that an interrupted
evaluation is cancelled as the harness's is, its child process killed; for ``sanitize`` a real
``sleep`` subprocess stands in for compute-sanitizer, run as the harness runs its tools
(``harness.deep.run_tool``).

Its reports have what the real harness's have, so prompts and reports built from them can be
checked: a timing row per shape and dtype (each shape's limit from the same-bytes copy floor of
:data:`COPY_FLOOR_US` and the roof), the GPU's facts, resources, and a rejection's evidence
(shape, dtype, suite, scenario, element, got, expected).
"""

from __future__ import annotations

import ctypes
import math
import re
import signal
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from astra_graph.harness.deep import SanitizerReport, SanitizerResult, run_tool
from astra_graph.harness.protocol import EvaluatorLike
from astra_graph.harness.results import (
    BenchReport,
    Evidence,
    GpuInfo,
    Measurement,
    ResourceReport,
    ShapeTiming,
    TimingMode,
    Verdict,
)
from astra_graph.harness.roofline import limit_of
from astra_graph.harness.worker import Worker, WorkerCrashed
from astra_graph.kernel.contract import OperationSpec

MARK = re.compile(r"//\s*fake:\s*(\w+)\s*=\s*([\w.\-]+)")
BASE_US = 20.0
ROOF_GBPS = 3000.0
COPY_FLOOR_US = 4.0
FAKE_GPU = GpuInfo(name="fake GPU", compute_capability="9.0", sm_count=132, l2_bytes=50 * 2**20)
FAKE_RESOURCES = ResourceReport(
    registers=40, static_smem_bytes=0, threads_per_block=256, occupancy=0.75
)


def measurement(median_us: float) -> Measurement:
    return Measurement(
        median_us=median_us, spread_us=0.1, rel_std_err=0.001, samples=50, method="fake"
    )


def evidence(op: OperationSpec, reason: str) -> Evidence:
    """Where a scripted rejection was seen: the first tuning shape, the last element of the
    first output, in the contract's first special-values scenario (if it has one)."""
    c = op.contract
    dims = c.suite("tuning")[0]
    output = next(a for a in c.args if a.role != "input")
    scenario = f" [scenario {c.specials[0].name}]" if c.specials else ""
    return Evidence(
        op=op.name,
        dims=dims,
        dtype=c.dtypes[-1],
        suite="tuning",
        arg=output.name,
        index=[dims[str(size)] - 1 for size in output.shape if str(size) in dims],
        got=1.5,
        expected=0.25,
        error=1.25,
        allowed=0.001,
        detail=f"fake {reason}{scenario}",
    )


def marks(path: Path) -> dict[str, str]:
    return dict(MARK.findall(path.read_text()))


@dataclass
class FakeEvaluator(EvaluatorLike):
    fail: Callable[[str, Path], bool] | None = None
    """``fail(method, candidate)`` true: raise instead of answering."""
    checks: list[dict[str, Any]] = field(default_factory=list)
    benches: list[dict[str, Any]] = field(default_factory=list)
    sanitized: list[dict[str, Any]] = field(default_factory=list)
    delays_s: dict[str, float] = field(default_factory=dict)
    """Seconds the first ``check``, ``bench`` or ``tune`` call takes (see the module)."""
    in_c: frozenset[str] = frozenset()
    """Kinds whose slow call blocks the calling thread in one C call (libc ``sleep`` through
    ctypes, SIGINT and SIGTERM blocked in that thread so that no EINTR cuts it short), as an
    NVRTC compile does: no Python bytecode runs in that thread until it returns."""
    worker: Worker | None = None
    """The worker a slow call sleeps in (started by the first one)."""
    on_slow: Callable[[str], None] | None = None
    """Told the kind of each slow call as it starts (a test waits for it to signal the run)."""

    def __enter__(self) -> FakeEvaluator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop the worker a slow call started, if any."""
        if self.worker is not None:
            self.worker.close()

    def _wait(self, kind: str) -> None:
        """Sleep in a worker process (a ``sleep`` tool for ``sanitize``) for the delay ``kind``
        has, once."""
        delay = self.delays_s.pop(kind, None)
        if delay is not None and kind == "sanitize":
            if self.on_slow is not None:
                self.on_slow(kind)
            run_tool(["sleep", str(delay)], timeout=delay + 60)
        elif delay is not None and kind in self.in_c:
            if self.on_slow is not None:
                self.on_slow(kind)
            stops = {signal.SIGINT, signal.SIGTERM}
            before = signal.pthread_sigmask(signal.SIG_BLOCK, stops)
            try:
                ctypes.CDLL(None).sleep(int(delay))
            finally:
                signal.pthread_sigmask(signal.SIG_SETMASK, before)
        elif delay is not None:
            self.worker = self.worker or Worker()
            self.worker.start()
            if self.on_slow is not None:
                self.on_slow(kind)
            self.worker.call("time:sleep", delay, deadline_s=delay + 60)

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
        self._wait("check" if not tunables else "tune")
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
            reason = found["reject"]
            return Verdict.reject(reason, f"fake {reason}", evidence(op, reason))  # type: ignore[arg-type]  # a test marks any reason; pydantic validates it
        return Verdict(accepted=True, suites=list(suites), cases_checked=3)

    def sanitize(
        self, op: OperationSpec, candidate: Path, *, tunables: Mapping[str, int] | None = None
    ) -> SanitizerReport:
        """Both tools pass, except the one a ``// fake: sanitize = <tool>`` mark names."""
        self._wait("sanitize")
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
        self._wait("tune" if tunables else "measure" if against else "bench")
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
        for dtype in dtypes or op.contract.dtypes[:1]:  # the harness's default: the first
            for dims in timed:
                moved = op.contract.bytes_for(dims, dtype)
                time_us = BASE_US / (speedup or 1.0)
                limit = limit_of(time_us, moved, ROOF_GBPS, COPY_FLOOR_US)
                rows.append(
                    ShapeTiming(
                        label=op.contract.label(dims),
                        dims=dims,
                        dtype=dtype,
                        bytes_moved=moved,
                        candidate=measurement(time_us),
                        baseline=measurement(BASE_US) if against else None,
                        speedup=speedup,
                        speedup_err=0.002 if against else None,
                        call=None,
                        achieved_gbps=moved / time_us / 1e3,
                        roofline_pct=100 * moved / time_us / 1e3 / ROOF_GBPS,
                        roof_gbps=ROOF_GBPS,
                        copy_floor=measurement(COPY_FLOOR_US),
                        bound=limit.bound,
                        limit=limit.text,
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
            device=FAKE_GPU.name,
            gpu=FAKE_GPU,
            candidate=str(candidate),
            baseline=str(against) if against else None,
            copy_bandwidth_gbps=ROOF_GBPS,
            shapes=rows,
            resources={"candidate": FAKE_RESOURCES}
            | ({"baseline": FAKE_RESOURCES} if against else {}),
            geomean_speedup=geomean,
            geomean_speedup_err=0.002 if against else None,
            rejection=Verdict.reject("impossible_time", "fake: faster than the bandwidth floor")
            if found.get("timing") == "impossible"
            else None,
        )
