"""``astra optimize KERNEL...``: run the agent loop on one kernel or several, with live progress.

Evaluations go to a pool with one worker per GPU (``--gpus``; ``--backend ray`` or
``ASTRA_BACKEND=ray`` for a Ray cluster). ``--candidates K`` makes every round best-of-K.
Several kernels (or a folder of operations) run at once over the pool, one run directory each,
and end with a summary table (also kept as ``runs/summary-<stamp>.json`` and ``.md``).

Progress (each agent's step and each finished node: round, agent, verdict, best speedup so
far) goes through structlog: a console rendering on a terminal, JSON lines otherwise. With
``--json`` the final OptimizationResult is printed as JSON on stdout and progress goes to
stderr. With no model endpoint the run is offline (the contract's suites, the baseline's
profile, per-bucket tuning, finalize) and says in one line how to enable the agent rounds.
``--agents external`` makes every agent's request an interrupt answered outside (one agent:
``--agent-model planning=external``): the run stops at the first request with status
``waiting`` and one line saying where the request is and how to answer (``astra reply``).
Ctrl-C or SIGTERM stops a run within a second: the model request and the evaluation in flight
are cancelled, ``run.json`` and the report say ``interrupted`` and where, and ``--resume``
continues there.
Exit codes: 0 a faster kernel was found and proven on the held-out suite, an offline run
finished, or the run waits for an external answer; 1 the run finished without beating the
baseline or stopped on an error (resume it with ``--resume``); 2 bad input or no GPU; 130
interrupted (resume it with ``--resume``).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any, get_args

import structlog

from astra_graph.commands import INTERRUPTED, UsageError
from astra_graph.commands.run_output import configure_logging, show_outcome
from astra_graph.harness.backends import open_pool
from astra_graph.harness.compile import gpu_arch
from astra_graph.harness.pool import (
    BACKEND_ENV,
    BACKENDS,
    GpuPool,
    PoolConfigError,
    backend_choice,
)
from astra_graph.harness.worker import allow_jobs
from astra_graph.kernel.catalog import resolve
from astra_graph.llm.external import EXTERNAL
from astra_graph.llm.settings import DEFAULT_MODEL, LLMSettings, endpoint_problem
from astra_graph.llm.usage import AgentName
from astra_graph.loop.state import AgentMode
from astra_graph.run.many import (
    Summary,
    expand_kernels,
    optimize_many,
    summary_table,
    write_summary,
)
from astra_graph.run.runner import (
    AGENTS_BY_MODE,
    ConfigurationError,
    RunFailed,
    RunInterrupted,
    cancel_runs,
    check_arguments,
    interruptible,
    optimize,
)
from astra_graph.store.rundir import utc_now


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "kernels",
        nargs="*",
        metavar="KERNEL",
        help="a .cu file, op/impl or a folder of operations; several run at once over the GPUs "
        "(omit with --resume)",
    )
    p.add_argument("--rounds", type=int, default=5, help="optimization rounds R (default 5)")
    p.add_argument("--model", default=DEFAULT_MODEL, help=f"chat model (default {DEFAULT_MODEL})")
    p.add_argument(
        "--agent-model",
        action="append",
        default=[],
        metavar="AGENT=MODEL",
        help="another model for one agent (testing, planning, coding, single); repeatable; "
        f"MODEL {EXTERNAL!r}: that agent's requests are answered outside (astra reply)",
    )
    p.add_argument("--base-url", help="an OpenAI-compatible server (vLLM, SGLang, Ollama, ...)")
    p.add_argument("--resume", metavar="RUN_DIR", help="continue a stopped run")
    p.add_argument(
        "--agents",
        choices=["multi", "single", EXTERNAL],
        default="multi",
        help="multi: testing, planning, coding agents (default); single: one agent does all; "
        f"{EXTERNAL}: the multi agents' requests are answered outside (astra reply)",
    )
    p.add_argument("--max-repairs", type=int, default=2, help="repairs per round (default 2)")
    p.add_argument(
        "--candidates",
        type=int,
        default=1,
        metavar="K",
        help="best-of-K: K plans per round, their candidates verified and timed at once, the "
        "best by the selection rule carried forward (default 1)",
    )
    p.add_argument(
        "--gpus",
        help="GPUs of this host to evaluate on: 'all' (default) or indices such as 0,1; one "
        "worker per GPU",
    )
    p.add_argument(
        "--backend",
        choices=list(BACKENDS),
        help=f"where evaluations run: local GPUs (default) or a Ray cluster; or {BACKEND_ENV}",
    )
    p.add_argument("--runs-dir", default="runs", help="where run directories go (default runs/)")
    p.add_argument(
        "--tune-budget",
        type=float,
        metavar="SECONDS",
        help="time budget of each tunable sweep (default 60)",
    )
    p.add_argument("--mode", choices=["device", "per-call"], default="device", help="timing mode")
    p.add_argument(
        "--retries", type=int, default=3, help="LLM retries on connection errors, 429 and 5xx"
    )
    p.add_argument(
        "--llm-timeout",
        type=float,
        default=600.0,
        help="seconds per LLM request, its retries and Retry-After waits included (default 600)",
    )
    p.add_argument(
        "--max-output-tokens",
        type=int,
        help="output-token limit of each LLM reply, reasoning included (default: the server's)",
    )
    p.add_argument(
        "--reasoning-effort",
        choices=["minimal", "low", "medium", "high"],
        help="for reasoning models (o-series, gpt-5*)",
    )
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.set_defaults(run=run)


def _agent_models(items: list[str]) -> dict[str, str]:
    agents = get_args(AgentName)
    models = {}
    for item in items:
        agent, sep, model = item.partition("=")
        if not sep or agent not in agents or not model:
            raise UsageError(
                f"--agent-model: expected AGENT=MODEL with AGENT in {agents}, got {item!r}"
            )
        models[agent] = model
    return models


def run(args: argparse.Namespace) -> int:
    """``astra optimize``: check everything, open the evaluation pool, then run one kernel (or
    resume one run) through :func:`optimize`, or several through ``astra_graph.run.many``; the
    exit status is the outcome's (1 a failed run, :data:`INTERRUPTED` an interrupted one)."""
    if args.kernels and args.resume is not None:
        raise UsageError("--resume: continues one run; give no KERNEL with it")
    agents: AgentMode = "multi" if args.agents == EXTERNAL else args.agents
    settings = _llm_settings(args)
    kernels = expand_kernels(args.kernels)
    _check(args, kernels, agents, settings)
    offline = endpoint_problem(settings, AGENTS_BY_MODE[agents])
    # a bad kernel is bad input (exit 2) before any pool or process starts; a lone kernel is
    # handed to optimize() resolved, so that it is resolved once
    targets = [resolve(kernel) for kernel in kernels]
    if len(kernels) > 1 and args.agents == EXTERNAL:
        raise UsageError(f"--agents {EXTERNAL}: answers one run at a time; give one KERNEL")
    pool = _pool(args)
    if offline and args.resume is None:
        print(
            f"astra optimize: {offline}; agent rounds need one. Running the offline steps: "
            "contract suites, baseline profile, per-bucket tuning, finalize.",
            file=sys.stderr,
        )
    configure_logging(sys.stderr if args.json else sys.stdout)
    log = structlog.get_logger("astra.optimize")

    options: dict[str, Any] = {
        "rounds": args.rounds,
        "agents": agents,
        "max_repairs": args.max_repairs,
        "candidates": args.candidates,
        "runs_dir": args.runs_dir,
        "timing_mode": args.mode,
        "llm_settings": settings,
        "tune_budget_s": args.tune_budget,
    }
    with pool:
        log.info("evaluation_pool", pool=pool.describe())
        if len(kernels) > 1:
            return _run_many(args, kernels, pool, options, log)

        def show(event: dict[str, Any]) -> None:
            fields = dict(event)
            log.info(fields.pop("event", "progress"), **fields)

        try:
            result = optimize(
                targets[0] if targets else None,
                resume=args.resume,
                evaluator=pool,
                on_progress=show,
                **options,
            )
        except ConfigurationError as exc:
            raise UsageError(str(exc)) from None
        except RunFailed as exc:
            print(f"astra optimize: {exc}; continue with --resume {exc.run_dir}", file=sys.stderr)
            return 1
        except RunInterrupted as exc:
            print(f"astra optimize: {exc}; continue with --resume {exc.run_dir}", file=sys.stderr)
            return INTERRUPTED
    return show_outcome(result, args.json)


def _llm_settings(args: argparse.Namespace) -> LLMSettings:
    """The chat settings the flags give; ``--agents external`` makes every agent's model the
    external one (its requests become interrupts)."""
    return LLMSettings(
        model=EXTERNAL if args.agents == EXTERNAL else args.model,
        base_url=args.base_url,
        agent_models=_agent_models(args.agent_model),
        max_retries=args.retries,
        timeout_s=args.llm_timeout,
        max_output_tokens=args.max_output_tokens,
        reasoning_effort=args.reasoning_effort,
    )


def _check(
    args: argparse.Namespace, kernels: list[str], agents: AgentMode, settings: LLMSettings
) -> None:
    """The same check as optimize() from Python, before any pool or process starts; a bad
    argument is a UsageError (exit 2)."""
    try:
        check_arguments(
            kernel_path=kernels[0] if kernels else None,
            resume=args.resume,
            answer=None,
            rounds=args.rounds,
            max_repairs=args.max_repairs,
            candidates=args.candidates,
            agents=agents,
            timing_mode=args.mode,
            settings=settings,
            tune_budget_s=args.tune_budget,
        )
    except ConfigurationError as exc:
        raise UsageError(str(exc)) from None


def _pool(args: argparse.Namespace) -> GpuPool:
    """The evaluation pool, by the rule every entry point uses (``harness.pool.open_pool``);
    no GPU (local backend) or a bad --gpus/--backend is bad input."""
    try:
        backend = backend_choice(args.backend)
        if backend == "local" and gpu_arch() is None:
            raise UsageError(
                "no CUDA GPU found: the harness needs one to verify and time candidates"
            )
        return open_pool(backend, args.gpus)
    except PoolConfigError as exc:
        raise UsageError(str(exc)) from None


def _run_many(
    args: argparse.Namespace, kernels: list[str], pool: GpuPool, options: dict[str, Any], log: Any
) -> int:
    """Several kernels at once over the pool; the summary table last (exit 0 only if every
    run found a faster kernel or was offline)."""

    def show(kernel: str, event: dict[str, Any]) -> None:
        fields = dict(event)
        log.info(fields.pop("event", "progress"), kernel=kernel, **fields)

    started, clock = utc_now(), time.monotonic()
    allow_jobs()
    try:
        with interruptible(cancel_runs):  # the runs are in threads: cancel them all from here
            runs = optimize_many(kernels, evaluator=pool, on_progress=show, **options)
    except ConfigurationError as exc:
        raise UsageError(str(exc)) from None
    except KeyboardInterrupt:
        print(
            "astra optimize: interrupted; each run directory says where it stopped "
            "(continue one with --resume RUN_DIR)",
            file=sys.stderr,
        )
        return INTERRUPTED
    finally:
        allow_jobs()
    summary = Summary(
        started_at=started, seconds=time.monotonic() - clock, pool=pool.describe(), runs=runs
    )
    saved = write_summary(summary, Path(args.runs_dir))
    if args.json:
        print(summary.model_dump_json(indent=2))
    else:
        print(f"{summary_table(runs)}\n\nsummary: {saved}")
    return 0 if all(r.outcome in ("improved", "offline") for r in runs) else 1
