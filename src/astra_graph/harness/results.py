"""Data models shared by the harness, the agents, the CLI and the reports.

Only Pydantic here: the harness imports this module and never LangGraph. The graph's state
(``astra_graph.loop.state``) is built from these models.
"""

from __future__ import annotations

from typing import Literal

from pydantic import AliasChoices, BaseModel, Field, field_validator

RejectReason = Literal[
    "compile_error",
    "interface_mismatch",
    "launch_error",
    "unwritten_output",
    "mismatch",
    "input_mutated",
    "out_of_bounds",
    "nondeterministic",
    "impossible_time",
    "timeout",
    "crashed",
    "domain",
    "timing_replay",
    "carried_state",
]
TimingMode = Literal["device", "per-call"]
SpeedCall = Literal["faster", "slower", "tie"]


class Evidence(BaseModel):
    """Where a rejection was seen: the case and its worst element."""

    op: str
    dims: dict[str, int] = {}
    dtype: str | None = None
    suite: str | None = None
    arg: str | None = None
    index: list[int] | None = None
    got: float | None = None
    expected: float | None = None
    error: float | None = None
    """Absolute error of the worst element."""
    allowed: float | None = None
    """What the tolerance allowed at that element."""
    detail: str = ""
    seed: int | None = None
    """The plan's seed (shapes of the domain sample), drawn from OS entropy per check and never
    shown to agents: with it a rejection at a random domain shape can be replayed."""


class Verdict(BaseModel):
    """``accepted``, or one rejection reason with its evidence."""

    accepted: bool
    reason: RejectReason | None = None
    message: str = ""
    """One line, for people and prompts."""
    evidence: Evidence | None = None
    cases_checked: int = 0
    """(shape, dtype, scenario) cases that passed before the verdict."""
    suites: list[str] = []
    worst_error_ratio: float | None = None
    """Worst element's error over its tolerance, across accepted cases (1.0 = at the limit)."""
    log: str = ""
    """Compiler log (compile_error) or worker output (crashed), else empty."""
    kernel_domain: list[str] = []
    """Where the user allows partial kernels: the candidate's ``requires`` clauses narrower than
    the contract's domain (the kernel's own domain; outside it the baseline must be
    dispatched). Empty: the candidate covers the whole domain."""
    notes: list[str] = []
    """What the check did not run and why (domain shapes beyond the free GPU memory), and the
    seconds its domain cases took."""

    @classmethod
    def reject(
        cls, reason: RejectReason, message: str, evidence: Evidence | None = None, log: str = ""
    ) -> Verdict:
        return cls(accepted=False, reason=reason, message=message, evidence=evidence, log=log)


class ResourceReport(BaseModel):
    registers: int
    static_smem_bytes: int
    dynamic_smem_bytes: int = 0
    local_bytes: int = 0
    spill_bytes: int = 0
    threads_per_block: int = 0
    occupancy: float | None = None
    """Fraction of the SM's warp slots filled (0-1): the CUDA driver's occupancy calculator on
    the loaded kernel, else the arithmetic of ``kernel/occupancy.py`` (``occupancy_detail``)."""
    occupancy_limit: str = ""
    """What limits the occupancy: registers, shared memory, threads or blocks."""
    occupancy_detail: str = ""
    """Empty when the driver's calculator and the arithmetic agree; else why the number is the
    arithmetic's, or how the two differ, or why the block cannot launch."""


class Measurement(BaseModel):
    """Kernel time over repeated samples, in microseconds."""

    median_us: float
    spread_us: float
    """Interquartile range of the samples."""
    rel_std_err: float
    """Relative standard error of the median."""
    samples: int
    method: str
    """How it was measured, e.g. ``graph node+l2flush``, ``graph x64, each copy once``,
    ``per-call``."""


class ShapeTiming(BaseModel):
    label: str
    dims: dict[str, int]
    dtype: str
    bytes_moved: int
    candidate: Measurement
    baseline: Measurement | None = None
    speedup: float | None = None
    """baseline time / candidate time."""
    speedup_err: float | None = None
    """One standard error of the speedup, from the two medians' errors."""
    call: SpeedCall | None = None
    """``tie`` when the difference is inside the noise."""
    achieved_gbps: float
    roofline_pct: float
    """Achieved bandwidth over the roof (``roof_gbps``), in percent."""
    impossible: bool = False
    """The candidate's time implies more than the margin over the roof (device mode)."""
    roof_gbps: float | None = None
    """The device's achievable bandwidth for this shape's read:write mix (None in reports made
    before it existed, whose roof was the copy bandwidth)."""
    copy_floor: Measurement | None = Field(
        default=None, validation_alias=AliasChoices("copy_floor", "latency_floor")
    )
    """The same-bytes copy floor: a minimal kernel moving this shape's bytes, timed in the same
    rounds (device mode). Reports before issue 25 stored it as ``latency_floor``."""
    launch_floor: Measurement | None = None
    """The launch-and-latency floor: an empty kernel on the copy floor's grid, timed the same way
    (device mode; None in reports before issue 25)."""
    bandwidth_floor_us: float | None = None
    """The bytes over the roof (``roof_gbps``): the bandwidth floor."""
    bound: Literal["bandwidth", "copy", "launch"] | None = None
    """The floor the shape is near (``roofline.limit_of``)."""
    limit: str = ""
    """That floor and the distance to each, in words: "bandwidth-bound at X% of the bandwidth
    roof ...", "near the same-bytes copy floor: ..." or "near the launch floor: ..."."""

    @field_validator("bound", mode="before")
    @classmethod
    def _old_bound(cls, value: object) -> object:
        # reports before issue 25 called the copy floor a latency floor
        return "copy" if value == "latency" else value


class GpuInfo(BaseModel):
    """The GPU a report was measured on, as the agents are told about it."""

    name: str
    compute_capability: str
    """``major.minor``, e.g. ``9.0``."""
    sm_count: int
    l2_bytes: int


class ClockReport(BaseModel):
    """The GPU's SM clock while a BenchReport was timed (``harness.clock``): its range, the
    rounds of samples discarded because the GPU throttled or changed its clock, and every
    such event; or why the clock could not be read (then no sample was discarded)."""

    readable: bool
    unreadable_because: str | None = None
    sm_mhz_min: int | None = None
    sm_mhz_max: int | None = None
    rounds_discarded: int = 0
    events: list[str] = []


class BenchReport(BaseModel):
    op: str
    mode: TimingMode
    device: str
    gpu: GpuInfo | None = None
    """The device's architecture facts; None in reports written before they were recorded."""
    candidate: str
    baseline: str | None = None
    copy_bandwidth_gbps: float
    shapes: list[ShapeTiming]
    geomean_speedup: float | None = None
    geomean_speedup_err: float | None = None
    resources: dict[str, ResourceReport] = {}
    """Keyed by ``candidate`` / ``baseline``, for the first dtype's instantiation."""
    rejection: Verdict | None = None
    """Set when timing found the candidate invalid: ``impossible_time`` (faster than the memory
    allows), ``timing_replay`` (outputs of the timed runs differ from the reference, or between
    samples on the same inputs), ``input_mutated`` or ``carried_state`` (a module variable kept
    something from the timed launches)."""
    notes: list[str] = []
    """What the reader should know: shapes skipped, tools missing, partly warm data."""
    seconds: float = 0.0
    """Wall time of the timing run in the worker (inputs, references, sampling, re-checks)."""
    clock: ClockReport | None = None
    """The SM clock while timing; None in reports written before it was recorded."""


class Evaluation(BaseModel):
    """One candidate, verified and (if accepted) timed against the baseline."""

    candidate: str
    verdict: Verdict
    bench: BenchReport | None = None
    seconds: float = Field(0.0, description="wall time of the whole evaluation")


class DispatchEntry(BaseModel):
    """The tunable setting chosen for one shape bucket, and what it gained there."""

    bucket: str
    """``<phase>/<row class>``, e.g. ``decode/small`` (see
    ``astra_graph.harness.tuning.bucket_of``)."""
    tunables: dict[str, int]
    shapes: list[str]
    """Labels of the shapes the choice was timed on."""
    speedup_vs_default: float
    speedup_err: float | None = None
    verified: bool
    """Passed the full verification (tuning, held-out and edge suites) with this setting."""


class TuningReport(BaseModel):
    """What a tunable sweep did: the dispatch table, and what it tried and skipped."""

    implementation: str
    default_tunables: dict[str, int]
    dispatch: list[DispatchEntry] = []
    tried: int = 0
    skipped: list[str] = []
    """One line per configuration or bucket not tried or not kept, with the reason."""
    seconds: float = 0.0
