"""``optimize()``: run the agent graph on one kernel and keep everything in a run directory.

The run directory (layout in docs/RUNS.md) holds ``run.json``, rewritten after every node, the
round files the nodes write, and ``checkpoint.sqlite`` (LangGraph's SqliteSaver, thread id = run
id). ``optimize(..., resume=run_dir)`` continues a killed or failed run from its last completed
node; finished rounds are not repeated.

Ctrl-C or SIGTERM (:func:`interruptible`) cancels the model request and the evaluation in
flight (each ends within a second, the evaluation's worker killed), saves ``run.json`` as
``interrupted`` with where it stopped (:class:`~astra_graph.loop.state.StoppedAt`) and raises
:class:`RunInterrupted`. The checkpoint holds every finished step, so ``resume`` re-runs only
the interrupted node: the request is sent again, nothing finished is redone.

One rule picks the evaluator wherever a run starts (the CLI, ``optimize()`` from Python,
Studio, the notebook): :func:`astra_graph.harness.backends.open_pool`, one worker per visible
GPU, or Ray actors with ``ASTRA_BACKEND=ray``. :func:`check_arguments` is the one check of
optimize's arguments, for this function and ``astra optimize`` alike.

A run with external agents (model ``external``, see :mod:`astra_graph.llm.external`) stops at an
agent's request with status ``waiting`` after writing the request files; ``optimize(None,
resume=run_dir, answer=text)`` records the answer beside the request, then continues the run
with ``Command(resume=...)`` until the next request or the end. A run killed after that finds
the recorded answer and does not ask again.
"""

from __future__ import annotations

import contextvars
import signal
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from types import FrameType
from typing import Any, cast, get_args

import structlog
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph.state import CompiledStateGraph
from langgraph.types import Command
from pydantic import BaseModel, ValidationError

from astra_graph.harness import results as models_module
from astra_graph.harness.protocol import EvaluatorLike
from astra_graph.harness.results import TimingMode
from astra_graph.harness.worker import allow_jobs, cancel_jobs
from astra_graph.kernel.catalog import Target, resolve
from astra_graph.llm import external
from astra_graph.llm import usage as usage_module
from astra_graph.llm.client import LLM
from astra_graph.llm.errors import every_call_failed
from astra_graph.llm.preflight import EndpointError, preflight
from astra_graph.llm.settings import DEFAULT_MODEL, LLMSettings, endpoint_problem
from astra_graph.llm.usage import AgentName
from astra_graph.loop import graph, single_graph
from astra_graph.loop import plans as plans_module
from astra_graph.loop import records as records_module
from astra_graph.loop import state as state_module
from astra_graph.loop.context import Context
from astra_graph.loop.graph import recursion_limit
from astra_graph.loop.progress import progress_event
from astra_graph.loop.result import result_from_state
from astra_graph.loop.state import (
    AgentMode,
    OptimizationResult,
    RunInput,
    RunOutput,
    State,
    StoppedAt,
)
from astra_graph.store.rundir import CHECKPOINT, RUN_JSON, new_run_dir, utc_now, write_model

log = structlog.get_logger(__name__)

ProgressCallback = Callable[[dict[str, Any]], None]

AGENT_MODES: tuple[AgentMode, ...] = get_args(AgentMode)
TIMING_MODES: tuple[TimingMode, ...] = get_args(TimingMode)
GRAPHS: dict[AgentMode, CompiledStateGraph[State, Context, RunInput, RunOutput]] = {
    "multi": graph.graph,
    "single": single_graph.graph,
    "offline": graph.offline,
}
"""The graph each mode runs, by name (each compiled once, without a checkpointer)."""
AGENTS_BY_MODE: dict[str, tuple[AgentName, ...]] = {
    "multi": ("testing", "planning", "coding"),
    "single": ("single",),
    "offline": (),
}


class ConfigurationError(ValueError):
    """Bad arguments to optimize(): no model endpoint, a run directory that cannot be resumed."""


class RunFailed(RuntimeError):
    """The run stopped on an error; its directory keeps every completed step for a resume."""

    def __init__(self, run_dir: Path, error: str) -> None:
        self.run_dir = run_dir
        super().__init__(f"{run_dir}: run stopped: {error}")


def read_result(run_dir: Path) -> OptimizationResult:
    """The ``run.json`` of a run directory; ConfigurationError if it is missing or invalid."""
    path = run_dir / RUN_JSON
    if not path.is_file():
        raise ConfigurationError(f"{path}: not found (is {run_dir} a run directory?)")
    try:
        return OptimizationResult.model_validate_json(path.read_text())
    except ValidationError as exc:
        raise ConfigurationError(
            f"{path}: not a valid run.json: {exc.errors()[0]['msg']}"
        ) from None


def checkpoint_serializer() -> JsonPlusSerializer:
    """The checkpoint serializer, allowed to rebuild exactly our state's models and no others."""
    allowed = [
        (cls.__module__, cls.__name__)
        for module in (state_module, records_module, plans_module, usage_module, models_module)
        for cls in vars(module).values()
        if isinstance(cls, type)
        and issubclass(cls, BaseModel)
        and cls.__module__ == module.__name__
    ]
    return JsonPlusSerializer(allowed_msgpack_modules=allowed)


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or "no message"
    return f"{type(exc).__name__}: {text[:400]}"


def _write_report(run_dir: Path, *, charts: bool = True) -> None:
    """Write the run's report (``charts``: with its charts); a failure there is logged and
    loses nothing."""
    from astra_graph.report import write_report

    try:
        write_report(run_dir, charts=charts)
    except Exception as exc:  # the run is already saved; a report problem is only logged
        log.warning("report_failed", run_dir=str(run_dir), error=_one_line(exc))


class RunInterrupted(KeyboardInterrupt):
    """Ctrl-C or SIGTERM stopped the run; ``run.json`` says ``interrupted`` and where.

    A KeyboardInterrupt, as Python's own Ctrl-C is, so that a caller's ``except Exception``
    does not take it for a failed run."""

    def __init__(self, run_dir: Path, stopped_at: StoppedAt) -> None:
        self.run_dir = run_dir
        self.stopped_at = stopped_at
        super().__init__(f"{run_dir}: interrupted at {stopped_at.describe()}")


def check_arguments(
    *,
    kernel_path: str | Path | Target | None,
    resume: str | Path | None,
    answer: str | None,
    rounds: int,
    max_repairs: int,
    candidates: int,
    agents: str,
    timing_mode: str,
    settings: LLMSettings,
    tune_budget_s: float | None = None,
) -> None:
    """The one check of optimize's arguments (``astra optimize`` calls it too): raise
    ConfigurationError naming the argument (and its flag) and what was expected."""
    problems = [
        (rounds < 0, f"rounds (--rounds): expected 0 or more, got {rounds}"),
        (max_repairs < 0, f"max_repairs (--max-repairs): expected 0 or more, got {max_repairs}"),
        (candidates < 1, f"candidates (--candidates): expected 1 or more, got {candidates}"),
        (
            settings.max_retries < 0,
            f"max_retries (--retries): expected 0 or more, got {settings.max_retries}",
        ),
        (
            settings.timeout_s <= 0,
            f"timeout_s (--llm-timeout): expected more than 0 seconds, got {settings.timeout_s}",
        ),
        (
            settings.max_output_tokens is not None and settings.max_output_tokens < 1,
            "max_output_tokens (--max-output-tokens): expected 1 or more, "
            f"got {settings.max_output_tokens}",
        ),
        (
            tune_budget_s is not None and tune_budget_s <= 0,
            f"tune_budget_s (--tune-budget): expected more than 0 seconds, got {tune_budget_s}",
        ),
        (
            agents not in AGENT_MODES,
            f"agents: expected one of {list(AGENT_MODES)}, got {agents!r}",
        ),
        (
            timing_mode not in TIMING_MODES,
            f"timing_mode (--mode): expected one of {list(TIMING_MODES)}, got {timing_mode!r}",
        ),
        (
            resume is None and kernel_path is None,
            "kernel_path (KERNEL): required unless resume (--resume RUN_DIR) is given",
        ),
        (
            answer is not None and resume is None,
            "answer: only for a waiting run (give resume=RUN_DIR)",
        ),
    ]
    for wrong, message in problems:
        if wrong:
            raise ConfigurationError(message)


SIGNALS = (signal.SIGINT, signal.SIGTERM)
"""What interrupts a run: Ctrl-C, and ``kill``'s default (a scheduler ending a job)."""


@contextmanager
def interruptible(cancel: Callable[[], None]) -> Iterator[None]:
    """While inside, SIGINT and SIGTERM call ``cancel()`` (which stops the model request and
    the evaluation in flight, in whatever thread) and raise KeyboardInterrupt naming the
    signal in the main thread. Later signals are ignored until the block ends, so that the
    interrupted run's ``run.json`` and report are written whole. Outside the main thread (a
    Python caller's own thread) signals cannot be caught, and nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: FrameType | None) -> None:
        for each in SIGNALS:
            signal.signal(each, signal.SIG_IGN)
        cancel()
        raise KeyboardInterrupt(signal.Signals(signum).name)

    previous = {each: signal.signal(each, handler) for each in SIGNALS}
    try:
        yield
    finally:
        for each, handling in previous.items():
            signal.signal(each, handling)


DRIVE_POLL_S = 0.1
"""How often the main thread's wait for the drive thread wakes. ``join`` without a timeout is
also interrupted by a signal on POSIX; the poll only keeps that from resting on one platform
detail. It costs nothing measurable (ten wake-ups a second)."""
DRIVE_UNWIND_S = 0.3
"""How long a stop waits for the drive thread to unwind after the handler cancelled its
request and jobs. A cancelled model request or job ends within CANCEL_POLL_S (0.1 s) plus
the checkpoint write; 0.002-0.16 s measured as stream_end_s on the H100 (2348fb0). A thread
still inside a C call (a 5 s NVRTC compile) would take seconds: the stop goes on without it,
since the checkpoint already holds every finished step and the run is due to stop in 1 s."""


_live_runs: set[_Run] = set()
"""The runs in progress in this process (several at once under ``optimize_many``)."""


def cancel_runs() -> None:
    """Cancel the model requests and evaluations of every run in progress in this process; each
    stops at once, saved ``interrupted`` (``astra optimize K1 K2`` calls this on Ctrl-C: its
    runs are in threads, which signals never reach). Safe from a signal handler."""
    for run in list(_live_runs):
        run.llm.cancel()
    cancel_jobs()


def default_evaluator() -> EvaluatorLike:
    """The evaluator of a run given none: the same pool as ``astra optimize`` and Studio
    (:func:`astra_graph.harness.backends.open_pool`: a worker per visible GPU, or Ray with
    ``ASTRA_BACKEND=ray``). HarnessUnavailable, before anything is written, without a GPU."""
    from astra_graph.harness.backends import open_pool
    from astra_graph.harness.pool import PoolConfigError

    try:
        pool = open_pool()
    except PoolConfigError as exc:
        raise ConfigurationError(str(exc)) from None
    try:
        first = pool.slots[0].evaluator
        require = getattr(first, "require_gpu", None)
        if callable(require):
            require()
    except BaseException:
        pool.close()
        raise
    return pool


@dataclass
class _Start:
    """What preparation settled: the run's settings and mode, and the run it resumes."""

    settings: LLMSettings
    agents: AgentMode
    rounds: int
    candidates: int
    target: Target | None
    previous: OptimizationResult | None


def _prepare(
    kernel_path: str | Path | Target | None,
    resume: str | Path | None,
    settings: LLMSettings,
    agents: AgentMode,
    rounds: int,
    candidates: int,
) -> _Start:
    """Resolve the kernel (once) or read the run to resume, settle the mode, and check the
    model endpoint; nothing is written here."""
    target = None
    if resume is None and kernel_path is not None:  # the one place a kernel is resolved
        target = kernel_path if isinstance(kernel_path, tuple) else resolve(kernel_path)
    previous = read_result(Path(resume).resolve()) if resume is not None else None
    if previous is not None and previous.models:
        # a resumed run keeps the model (or external answers) each of its agents started with
        settings = replace(settings, agent_models={**settings.agent_models, **previous.models})
    no_endpoint = endpoint_problem(
        settings, AGENTS_BY_MODE[previous.agents if previous is not None else agents]
    )
    if previous is not None and no_endpoint and previous.agents != "offline":
        raise ConfigurationError(f"resuming a {previous.agents!r} run: {no_endpoint}")
    if agents == "offline" or no_endpoint:
        agents, rounds = "offline", 0
    if candidates > 1 and agents == "single":
        raise ConfigurationError(
            "candidates: best-of-K rounds need the multi-agent graph (K plans from the planner)"
        )
    if candidates > 1 and external.EXTERNAL in (
        settings.model_for("planning"),
        settings.model_for("coding"),
    ):
        raise ConfigurationError(
            "candidates: best-of-K rounds need model endpoints for planning and coding "
            "(external agents answer one request at a time)"
        )
    mode = previous.agents if previous is not None else agents
    if mode != "offline" and not no_endpoint:  # the endpoint must answer before the run starts
        try:
            preflight(settings, AGENTS_BY_MODE[mode])
        except EndpointError as exc:
            raise ConfigurationError(str(exc)) from None
    if previous is not None:
        agents, rounds = previous.agents, previous.rounds_requested
        candidates = previous.candidates_per_round
    return _Start(settings, agents, rounds, candidates, target, previous)


def _place(start: _Start, runs_dir: str | Path | None, resume: str | Path | None) -> State:
    """The run's initial state, in a new run directory (or the resumed run's)."""
    if resume is not None and start.previous is not None:
        run_dir = Path(resume).resolve()
        kernel, started_at = start.previous.kernel, start.previous.started_at
    else:
        assert start.target is not None
        spec, impl = start.target
        root = Path(runs_dir or "runs").resolve()
        try:
            run_dir = new_run_dir(root, spec.name).resolve()
        except OSError as exc:
            raise ConfigurationError(
                f"runs_dir: cannot create a run directory in {root}: {exc}"
            ) from None
        kernel, started_at = str(impl.path.resolve()), utc_now()
    return State(
        kernel=kernel,
        run_dir=str(run_dir),
        rounds=start.rounds,
        max_repairs=0,  # set by the caller, which knows the resumed run's own
        candidates=start.candidates,
        agents=start.agents,
        models={agent: start.settings.model_for(agent) for agent in AGENTS_BY_MODE[start.agents]},
        started_at=started_at,
    )


def _start_evaluator_and_place(
    start: _Start,
    runs_dir: str | Path | None,
    resume: str | Path | None,
    evaluator: EvaluatorLike | None,
) -> tuple[EvaluatorLike, EvaluatorLike | None, State]:
    """The evaluator (the given one, else :func:`default_evaluator` started here), the one this
    call owns and must close (None when given), and the placed initial state. The default
    evaluator starts before the run directory is placed, as before; if placing fails it is
    closed here, since no ``ExitStack`` owns it yet."""
    owned = None  # the evaluator this call starts (and closes), if none was given
    if evaluator is None:
        owned = evaluator = default_evaluator()
    try:
        initial = _place(start, runs_dir, resume)
    except BaseException:
        if owned is not None:
            owned.close()
        raise
    return evaluator, owned, initial


def optimize(
    kernel_path: str | Path | Target | None,
    rounds: int = 5,
    model: str = DEFAULT_MODEL,
    base_url: str | None = None,
    *,
    agents: AgentMode = "multi",
    agent_models: Mapping[str, str] | None = None,
    max_repairs: int = 2,
    candidates: int = 1,
    tune_budget_s: float | None = None,
    runs_dir: str | Path | None = None,
    resume: str | Path | None = None,
    timing_mode: TimingMode = "device",
    evaluator: EvaluatorLike | None = None,
    llm_settings: LLMSettings | None = None,
    on_progress: ProgressCallback | None = None,
    answer: str | None = None,
) -> OptimizationResult:
    """Make ``kernel_path`` faster in ``rounds`` rounds of the agent loop; prove it or keep it.

    ``kernel_path`` is a ``.cu`` file or ``op/impl`` (as ``astra compile`` takes), or the
    pair :func:`astra_graph.kernel.catalog.resolve` gave for one (``astra optimize`` resolves
    first).
    ``model`` and ``base_url`` choose the chat model (any OpenAI-compatible server);
    ``agent_models`` gives some agents another model; ``llm_settings`` replaces all three
    (timeouts, retries). The evaluator defaults to :func:`default_evaluator`, the pool that
    ``astra optimize`` uses.
    ``candidates`` is K, candidates per round (K plans, verified and timed at once: a
    ``harness.pool.GpuPool`` evaluator spreads them over GPUs); ``tune_budget_s`` bounds each
    tunable sweep (default: the Context's).
    ``resume`` continues the run in that directory; ``kernel_path`` may then be None.
    With no model endpoint (no API key, no ``base_url``) the run is ``offline``: the contract's
    suites, the baseline's profile, per-bucket tuning and finalize, with no agent rounds.
    The model ``external`` for an agent makes its requests interrupts: the run returns with
    status ``waiting``; ``answer`` (with ``resume``) is the reply to the request it waits for.
    The model endpoint is checked first (:func:`astra_graph.llm.preflight.preflight`), before any
    run directory exists. A run in which no LLM call gave a usable reply ends ``failed`` with the
    last failure as its error.
    Every precondition (arguments, kernel, endpoint, a GPU for the default evaluator) is
    checked before anything is written. Raises ConfigurationError (bad arguments, an endpoint
    that cannot serve the run), ContractError (bad kernel), HarnessUnavailable (no GPU),
    RunFailed, or RunInterrupted (Ctrl-C or SIGTERM, in the main thread).
    """
    settings = llm_settings or LLMSettings(
        model=model, base_url=base_url, agent_models=dict(agent_models or {})
    )
    check_arguments(
        kernel_path=kernel_path,
        resume=resume,
        answer=answer,
        rounds=rounds,
        max_repairs=max_repairs,
        candidates=candidates,
        agents=agents,
        timing_mode=timing_mode,
        settings=settings,
        tune_budget_s=tune_budget_s,
    )
    start = _prepare(kernel_path, resume, settings, agents, rounds, candidates)
    evaluator, owned, initial = _start_evaluator_and_place(start, runs_dir, resume, evaluator)
    initial.max_repairs = max_repairs
    with ExitStack() as stack:
        closed = _StopTimes()
        stack.callback(closed.log_closed)  # last out: after everything below has closed
        if owned is not None:
            stack.callback(owned.close)
        run = _Run(stack, initial, start.settings, evaluator, timing_mode, on_progress, closed)
        if tune_budget_s is not None:
            run.context.tune_budget_s = tune_budget_s
        try:
            result = run.go(answer)
        except OSError as exc:  # run.json could not be written (a full disk, say)
            raise RunFailed(Path(initial.run_dir), _one_line(exc)) from exc
    _write_report(Path(initial.run_dir))
    return result


class _StopTimes:
    """When an interrupt's parts ended, logged (``interrupt_stop``, ``interrupt_closed``) so that
    a slow stop names its slow part (``benchmarks/interrupt_resume.py`` prints them). Times are
    ``time.monotonic()``, one clock for every process of the host."""

    def __init__(self) -> None:
        self.signalled: float | None = None
        self.recorded: float | None = None

    def log_stop(self, stream_ended: float, saved: float, reported: float) -> None:
        """The run stopped: the graph's stream ended, ``run.json`` and the report written."""
        self.recorded = reported
        log.info(
            "interrupt_stop",
            signalled_mono=self.signalled,
            stream_end_s=round(stream_ended - (self.signalled or stream_ended), 3),
            run_json_s=round(saved - stream_ended, 3),
            report_s=round(reported - saved, 3),
            reported_mono=reported,
        )

    def log_closed(self) -> None:
        """The run's model client, checkpoint and own evaluator are closed."""
        if self.recorded is not None:
            now = time.monotonic()
            log.info("interrupt_closed", close_s=round(now - self.recorded, 3), closed_mono=now)


class _Run:
    """One run's graph, checkpoint and run directory: resume it, drive it, save it."""

    def __init__(
        self,
        stack: ExitStack,
        initial: State,
        settings: LLMSettings,
        evaluator: EvaluatorLike,
        timing_mode: TimingMode,
        on_progress: ProgressCallback | None,
        stop_times: _StopTimes,
    ) -> None:
        self.initial = initial
        self.stop_times = stop_times
        self.run_dir = Path(initial.run_dir)
        self.on_progress = on_progress
        connection = sqlite3.connect(self.run_dir / CHECKPOINT, check_same_thread=False)
        stack.callback(connection.close)
        saver = SqliteSaver(connection, serde=checkpoint_serializer())
        # the mode's graph, compiled with this run's saver (LangGraph attaches it at compile time)
        mode = GRAPHS[initial.agents]
        self.graph = mode.builder.compile(checkpointer=saver, name=mode.name)
        self.config: dict[str, Any] = {
            "configurable": {"thread_id": self.run_dir.name},
            "recursion_limit": recursion_limit(initial.rounds, initial.max_repairs),
        }
        self.llm = LLM(settings)
        stack.callback(self.llm.close)
        _live_runs.add(self)
        stack.callback(_live_runs.discard, self)
        self.context = Context(evaluator=evaluator, llm=self.llm, timing_mode=timing_mode)
        self.last_event: dict[str, Any] = {}
        """The latest progress event: the round and candidate an interrupt stopped in."""

    def save(self, state: State, **fields: Any) -> OptimizationResult:
        result = state.result if state.result is not None else result_from_state(state, **fields)
        result = result.model_copy(update={"external": external.load_exchanges(self.run_dir)})
        write_model(self.run_dir / RUN_JSON, result)
        return result

    def notify(self, event: dict[str, Any]) -> None:
        self.last_event = event
        if self.on_progress is not None:
            self.on_progress(event)

    def current(self) -> State:
        values = self.graph.get_state(self.config).values
        return values if isinstance(values, State) else State.model_validate(values)

    def ask_outside(self) -> OptimizationResult | None:
        """At an external agent's request: write its files, save the run as waiting."""
        snapshot = self.graph.get_state(self.config)
        if not snapshot.interrupts:
            return None
        state = self.current()
        external.record_questions(self.run_dir, snapshot.interrupts, state.completed_rounds)
        return self.save(state, status="waiting")

    def go(self, answer: str | None) -> OptimizationResult:
        """Resume (or start) the run, drive it to its end or next stop, and save it."""
        snapshot = self.graph.get_state(self.config)
        if snapshot.values:  # resuming: the run's own repair cap sets its step limit
            state = self.current()
            self.config["recursion_limit"] = recursion_limit(state.rounds, state.max_repairs)
            self.llm.remember_methods(state.usage)
            # Finished means finalize's result, not an empty ``next``: a step whose every task
            # wrote its result before the stop (the consumer stopped between a branch's end
            # and the step's commit) shows no next node, yet the stream applies those writes
            # and goes on. Reading that as "finished" printed an unchecked 1.3x (issue 26).
            if state.result is not None and not snapshot.next:
                if answer is not None:
                    raise ConfigurationError(
                        f"{self.run_dir}: the run has finished; it waits for nothing"
                    )
                return self.save(state)  # already finished
        inputs = self._inputs(snapshot, answer)
        if isinstance(inputs, OptimizationResult):
            return inputs
        state = self.current() if snapshot.values else self.initial
        waiting = self._drive(inputs, state)
        result = waiting if waiting is not None else self.save(self.current())
        all_failed = every_call_failed(result.usage) if result.status == "finished" else None
        if all_failed is not None:  # a run whose agents never got an answer has failed
            result = result.model_copy(update={"status": "failed", "error": all_failed})
            write_model(self.run_dir / RUN_JSON, result)
        return result

    def _inputs(self, snapshot: Any, answer: str | None) -> Any:
        """What the graph is streamed with: the initial state, None (a resume), a Command
        with the external answers; or the saved result of a run still waiting for one."""
        if not snapshot.values:
            self.save(self.initial)
            return self.initial.model_dump(include=set(RunInput.model_fields))
        if not snapshot.interrupts:
            if answer is not None:
                raise ConfigurationError(f"{self.run_dir}: not waiting for an answer")
            return None
        pending = external.record_questions(
            self.run_dir, snapshot.interrupts, self.current().completed_rounds
        )
        if answer is not None:
            unanswered = external.waiting_for(pending)
            if unanswered is None:
                raise ConfigurationError(
                    f"{self.run_dir}: its request already has an answer; "
                    "continue with astra optimize --resume"
                )
            try:
                external.record_answer(unanswered, answer)
            except external.ExternalError as exc:
                raise ConfigurationError(str(exc)) from None
        answers = external.answers_for(self.run_dir, [i.id for i in snapshot.interrupts])
        if not answers:
            waiting = self.ask_outside()
            assert waiting is not None
            return waiting
        return Command(resume=answers)

    def _cancel(self) -> None:
        """Stop the model request and the evaluations in flight (from the signal handler)."""
        self.stop_times.signalled = time.monotonic()
        self.llm.cancel()
        cancel_jobs()

    def _drive(self, inputs: Any, state: State) -> OptimizationResult | None:
        """Stream the graph, saving ``run.json`` after every step; the waiting result if an
        external agent asked, else None. An interrupt or an error is saved before it leaves."""
        # Jobs are refused from a Ctrl-C until the run has stopped; then accepted again, so
        # that the process can go on evaluating. Several runs in threads share the refusal:
        # their caller (astra optimize K1 K2) lifts it once all have stopped.
        own_signals = threading.current_thread() is threading.main_thread()
        if own_signals:
            allow_jobs()
        try:
            with interruptible(self._cancel):
                if own_signals:
                    self._stream_beside(inputs, state)
                else:
                    self._stream(inputs, state)
            return self.ask_outside()
        except KeyboardInterrupt as exc:
            stream_ended = time.monotonic()
            stopped = self._stopped_at(str(exc) if str(exc) in SIGNAL_NAMES else "SIGINT")
            error = f"interrupted at {stopped.describe()}"
            saved = self._record_stop(state, status="interrupted", error=error, stopped_at=stopped)
            self.stop_times.log_stop(stream_ended, saved, time.monotonic())
            raise RunInterrupted(self.run_dir, stopped) from None
        except Exception as exc:
            error = _one_line(exc)
            self._record_stop(state, status="failed", error=error)
            raise RunFailed(self.run_dir, error) from exc
        finally:
            if own_signals:
                allow_jobs()

    def _stream_beside(self, inputs: Any, state: State) -> None:
        """Stream the graph on a drive thread while this (main) thread waits for it.

        Python runs a signal handler only in the main thread, between bytecodes: node code
        on the main thread inside one long C call (an NVRTC compile through ctypes, a CuPy
        call) held the handler back for seconds (4.8 s on the H100, issue 26). The main
        thread here only waits in ``join``, which a signal interrupts at once; the handler
        cancels the request and jobs, and KeyboardInterrupt leaves this wait. The drive
        thread then has DRIVE_UNWIND_S to unwind; one still inside a C call is left behind
        (a daemon: it holds nothing the stop writes, and ``astra`` ends with ``os._exit``),
        and jobs stay refused until it ends, so that it starts no new evaluation."""
        failure: list[BaseException] = []
        finished = threading.Event()  # set by the drive thread as its very last act
        abandoned = threading.Event()  # the stop went on without it

        def drive() -> None:
            try:
                self._stream(inputs, state)
            except BaseException as exc:  # handed to the main thread, which re-raises it
                failure.append(exc)
            finally:
                finished.set()
                if abandoned.is_set():
                    allow_jobs()  # the stop lifted nothing while this thread could still run

        # the caller's context (structlog's bound run id) goes with the graph into the thread
        context = contextvars.copy_context()
        thread = threading.Thread(
            target=context.run, args=(drive,), name=f"drive-{self.run_dir.name}", daemon=True
        )
        thread.start()
        try:
            while thread.is_alive():
                thread.join(DRIVE_POLL_S)
        except KeyboardInterrupt:
            if not finished.wait(DRIVE_UNWIND_S):
                abandoned.set()
                log.warning("drive_thread_left", run_dir=str(self.run_dir), waited_s=DRIVE_UNWIND_S)
            raise
        if failure:
            raise failure[0]

    def _record_stop(self, state: State, **fields: Any) -> float:
        """Save a stopped run's ``run.json`` and report, as far as the disk allows: a full disk
        (the likely reason it stopped) must not replace the run's one line with a traceback;
        the checkpoint still holds every finished step for a resume. Returns when ``run.json``
        was written (``time.monotonic()``)."""
        try:
            self.save(self.current() if self._saved() else state, **fields)
        except OSError as exc:
            log.warning("run_json_not_saved", run_dir=str(self.run_dir), error=_one_line(exc))
            return time.monotonic()
        saved = time.monotonic()
        # a stopped run's report says why and where; an interrupted one's without charts, which
        # take seconds to draw (the stop is due within one) and are drawn when it finishes
        _write_report(self.run_dir, charts=fields.get("status") != "interrupted")
        return saved

    def _saved(self) -> bool:
        return bool(self.graph.get_state(self.config).values)

    def _stream(self, inputs: Any, state: State) -> None:
        finished: list[tuple[str, Any]] = []  # nodes of the current step, told once it is saved
        # "values" hands over the whole state after each step (no checkpoint re-read);
        # "updates" names the nodes that ran and what they returned; "custom" is progress.
        for part in self.graph.stream(
            inputs,
            self.config,
            context=self.context,
            stream_mode=["values", "updates", "custom"],
            subgraphs=True,  # the agents' messages from inside the candidate branches
            durability="sync",  # a resume starts from the step run.json last showed
        ):
            # several modes with subgraphs: (namespace, mode, chunk) triples
            namespace, stream, chunk = cast(tuple[tuple[str, ...], str, Any], part)
            if stream == "custom":
                self.notify(chunk)
            elif namespace:  # a step inside a branch: its record arrives with the branch
                if stream == "updates":
                    self.save(state)  # keeps the branch's external answers in run.json
            elif stream == "updates":
                finished += [(n, u) for n, u in chunk.items() if n != "__interrupt__"]
            else:  # the state after a step of the graph itself
                state = chunk if isinstance(chunk, State) else State.model_validate(chunk)
                self.save(state)
                for node, update in finished:
                    self.notify(progress_event(node, state, update))
                finished.clear()

    def _stopped_at(self, signal_name: str) -> StoppedAt:
        """Where the run stopped: the checkpoint's next node (inside a candidate branch, the
        branch's own next node), and the round and candidate of the latest progress event."""
        snapshot = self.graph.get_state(self.config, subgraphs=True)
        event = self.last_event
        # no next node: the step's tasks had all written (see go()); the latest event's agent
        # then names what was running
        node = "/".join(snapshot.next) or str(event.get("node") or event.get("agent") or "start")
        for task in snapshot.tasks:
            inner = task.state
            if task.name == node and inner is not None and getattr(inner, "next", None):
                node = f"{node}/{'/'.join(inner.next)}"
                break
        branch = event.get("branch")
        return StoppedAt(
            node=node,
            round=int(event.get("round") or 0),
            candidate=int(branch) if isinstance(branch, int) else None,
            signal=signal_name,
        )


SIGNAL_NAMES = frozenset(each.name for each in SIGNALS)
