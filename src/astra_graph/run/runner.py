"""``optimize()``: run the agent graph on one kernel and keep everything in a run directory.

The run directory (layout in docs/RUNS.md) holds ``run.json``, rewritten after every node, the
round files the nodes write, and ``checkpoint.sqlite`` (LangGraph's SqliteSaver, thread id = run
id). ``optimize(..., resume=run_dir)`` continues a killed or failed run from its last completed
node; finished rounds are not repeated.

A run with external agents (model ``external``, see :mod:`astra_graph.llm.external`) stops at an
agent's request with status ``waiting`` after writing the request files; ``optimize(None,
resume=run_dir, answer=text)`` records the answer beside the request, then continues the run
with ``Command(resume=...)`` until the next request or the end. A run killed after that finds
the recorded answer and does not ask again.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Mapping
from contextlib import ExitStack
from dataclasses import replace
from pathlib import Path
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
from astra_graph.kernel.catalog import resolve
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
from astra_graph.loop.state import AgentMode, OptimizationResult, RunInput, RunOutput, State
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


def _write_report(run_dir: Path) -> None:
    """Write the run's report; a failure there is logged and loses nothing."""
    from astra_graph.report import write_report  # matplotlib loads only when a report is due

    try:
        write_report(run_dir)
    except Exception as exc:  # the run is already saved; a report problem is only logged
        log.warning("report_failed", run_dir=str(run_dir), error=_one_line(exc))


def optimize(
    kernel_path: str | Path | None,
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

    ``kernel_path`` is a ``.cu`` file or ``op/impl`` (as ``astra compile`` takes). ``model`` and
    ``base_url`` choose the chat model (any OpenAI-compatible server); ``agent_models`` gives
    some agents another model; ``llm_settings`` replaces all three (timeouts, retries). The
    evaluator defaults to the harness's ``Evaluator`` (a worker process with the GPU).
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
    that cannot serve the run), ContractError (bad kernel), HarnessUnavailable (no GPU) or
    RunFailed.
    """
    # Preconditions first, in this order, and nothing is written before all of them hold:
    # arguments, the kernel (or the run to resume), the model endpoint, the GPU.
    if rounds < 0 or max_repairs < 0:
        raise ConfigurationError("rounds and max_repairs must be 0 or more")
    if agents not in AGENT_MODES:
        raise ConfigurationError(f"agents: expected one of {list(AGENT_MODES)}, got {agents!r}")
    if timing_mode not in TIMING_MODES:
        raise ConfigurationError(
            f"timing_mode: expected one of {list(TIMING_MODES)}, got {timing_mode!r}"
        )
    if resume is None and kernel_path is None:
        raise ConfigurationError("kernel_path: required unless resume is given")
    target = resolve(kernel_path) if resume is None and kernel_path is not None else None
    settings = llm_settings or LLMSettings(
        model=model, base_url=base_url, agent_models=dict(agent_models or {})
    )
    if answer is not None and resume is None:
        raise ConfigurationError("answer: only for a waiting run (give resume=RUN_DIR)")
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
    if candidates < 1:
        raise ConfigurationError("candidates: expected 1 or more candidates per round")
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
    owned = None  # the harness Evaluator this call starts (and closes), if none was given
    if evaluator is None:
        from astra_graph.harness.evaluator import Evaluator

        owned = evaluator = Evaluator()
    try:
        if owned is not None:
            owned.require_gpu()  # HarnessUnavailable: no run directory without a GPU
        if resume is not None and previous is not None:
            run_dir = Path(resume).resolve()
            agents, kernel, rounds = previous.agents, previous.kernel, previous.rounds_requested
            candidates = previous.candidates_per_round
            started_at = previous.started_at
        else:
            assert target is not None
            spec, impl = target
            root = Path(runs_dir or "runs").resolve()
            try:
                run_dir = new_run_dir(root, spec.name).resolve()
            except OSError as exc:
                raise ConfigurationError(
                    f"runs_dir: cannot create a run directory in {root}: {exc}"
                ) from None
            kernel, started_at = str(impl.path.resolve()), utc_now()
    except BaseException:
        if owned is not None:
            owned.close()
        raise
    initial = State(
        kernel=kernel,
        run_dir=str(run_dir),
        rounds=rounds,
        max_repairs=max_repairs,
        candidates=candidates,
        agents=agents,
        models={agent: settings.model_for(agent) for agent in AGENTS_BY_MODE[agents]},
        started_at=started_at,
    )

    def save(state: State, **fields: Any) -> OptimizationResult:
        result = state.result if state.result is not None else result_from_state(state, **fields)
        result = result.model_copy(update={"external": external.load_exchanges(run_dir)})
        write_model(run_dir / RUN_JSON, result)
        return result

    def notify(event: dict[str, Any]) -> None:
        if on_progress is not None:
            on_progress(event)

    with ExitStack() as stack:
        if owned is not None:
            stack.callback(owned.close)
        connection = sqlite3.connect(run_dir / CHECKPOINT, check_same_thread=False)
        stack.callback(connection.close)
        saver = SqliteSaver(connection, serde=checkpoint_serializer())
        # the mode's graph, compiled with this run's saver (LangGraph attaches it at compile time)
        compiled = GRAPHS[agents].builder.compile(checkpointer=saver, name=GRAPHS[agents].name)
        config: dict[str, Any] = {
            "configurable": {"thread_id": run_dir.name},
            "recursion_limit": recursion_limit(rounds, max_repairs),
        }
        llm = LLM(settings)
        stack.callback(llm.close)
        context = Context(evaluator=evaluator, llm=llm, timing_mode=timing_mode)
        if tune_budget_s is not None:
            context.tune_budget_s = tune_budget_s

        def as_state(values: Any) -> State:
            return values if isinstance(values, State) else State.model_validate(values)

        def current() -> State:
            return as_state(compiled.get_state(config).values)

        def ask_outside() -> OptimizationResult | None:
            """At an external agent's request: write its files, save the run as waiting."""
            snapshot = compiled.get_state(config)
            if not snapshot.interrupts:
                return None
            state = current()
            external.record_questions(run_dir, snapshot.interrupts, state.completed_rounds)
            return save(state, status="waiting")

        snapshot = compiled.get_state(config)
        if snapshot.values:  # resuming: the run's own repair cap sets its step limit
            config["recursion_limit"] = recursion_limit(rounds, current().max_repairs)
            llm.remember_methods(current().usage)
        if snapshot.values and not snapshot.next:
            if answer is not None:
                raise ConfigurationError(f"{run_dir}: the run has finished; it waits for nothing")
            return save(current())  # already finished
        given = set(RunInput.model_fields)  # the graph's input schema: what a caller sets
        inputs: Any = None if snapshot.values else initial.model_dump(include=given)
        if inputs is not None:
            save(initial)
        if snapshot.interrupts:  # waiting for an external answer
            pending = external.record_questions(
                run_dir, snapshot.interrupts, current().completed_rounds
            )
            if answer is not None:
                unanswered = external.waiting_for(pending)
                if unanswered is None:
                    raise ConfigurationError(
                        f"{run_dir}: its request already has an answer; "
                        "continue with astra optimize --resume"
                    )
                try:
                    external.record_answer(unanswered, answer)
                except external.ExternalError as exc:
                    raise ConfigurationError(str(exc)) from None
            answers = external.answers_for(run_dir, [i.id for i in snapshot.interrupts])
            if not answers:
                waiting = ask_outside()
                assert waiting is not None
                return waiting
            inputs = Command(resume=answers)
        elif answer is not None:
            raise ConfigurationError(f"{run_dir}: not waiting for an answer")
        state = current() if snapshot.values else initial
        waiting = None
        finished: list[tuple[str, Any]] = []  # nodes of the current step, told once it is saved
        try:
            # "values" hands over the whole state after each step (no checkpoint re-read);
            # "updates" names the nodes that ran and what they returned; "custom" is progress.
            for part in compiled.stream(
                inputs,
                config,
                context=context,
                stream_mode=["values", "updates", "custom"],
                subgraphs=True,  # the agents' messages from inside the candidate branches
                durability="sync",  # a resume starts from the step run.json last showed
            ):
                # several modes with subgraphs: (namespace, mode, chunk) triples
                namespace, stream, chunk = cast(tuple[tuple[str, ...], str, Any], part)
                if stream == "custom":
                    notify(chunk)
                elif namespace:  # a step inside a branch: its record arrives with the branch
                    if stream == "updates":
                        save(state)  # keeps the branch's external answers in run.json
                elif stream == "updates":
                    finished += [(n, u) for n, u in chunk.items() if n != "__interrupt__"]
                else:  # the state after a step of the graph itself
                    state = as_state(chunk)
                    save(state)
                    for node, update in finished:
                        notify(progress_event(node, state, update))
                    finished.clear()
            waiting = ask_outside()
        except BaseException as exc:
            error = _one_line(exc) if not isinstance(exc, KeyboardInterrupt) else "interrupted"
            save(
                current() if compiled.get_state(config).values else state,
                status="failed",
                error=error,
            )
            _write_report(run_dir)  # a stopped run still gets a report that says so
            if isinstance(exc, Exception):
                raise RunFailed(run_dir, error) from exc
            raise
        result = waiting if waiting is not None else save(state)
        all_failed = every_call_failed(result.usage) if result.status == "finished" else None
        if all_failed is not None:  # a run whose agents never got an answer has failed
            result = result.model_copy(update={"status": "failed", "error": all_failed})
            write_model(run_dir / RUN_JSON, result)
    _write_report(run_dir)
    return result
