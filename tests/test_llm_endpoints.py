"""The agent loop against imitations of real servers: the real ChatOpenAI and OpenAI SDK talking
to a scripted server on 127.0.0.1 (tests/fake_openai.py), the fake evaluator for the GPU.

Each behaviour of issue 11: structured output on servers that refuse json_schema, tools or JSON
mode; JSON in fences, prose, ``<think>`` and ``reasoning_content``; 429 with Retry-After; cut-off
replies; diffs; slow replies; connection refused, 401 and an unknown model at preflight; and a
run whose every call fails ends failed, loudly.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import structlog

from astra_graph import cli
from astra_graph.kernel.catalog import kernels_root
from astra_graph.llm.client import LLM, METHODS
from astra_graph.llm.preflight import EndpointError, preflight
from astra_graph.llm.settings import LLMSettings
from astra_graph.llm.usage import Usage
from astra_graph.loop.plans import Plan, ShapeProposals
from astra_graph.loop.state import OptimizationResult
from astra_graph.run.runner import ConfigurationError, RunFailed, optimize
from fake_evaluator import FakeEvaluator
from fake_openai import (
    IMITATIONS,
    SHUTDOWN_POLL_S,
    FakeOpenAI,
    Imitation,
    Scripted,
    cut,
    error,
    hang_up,
    raw_json,
    slow,
    structured,
    text,
)
from kernel_sources import VECTORIZED, fenced, marked

pytestmark = pytest.mark.usefixtures("plots_not_drawn")  # conftest.py says why

NAIVE = kernels_root() / "silu_and_mul" / "naive.cu"
PLAN = {"summary": "vectorize", "changes": [{"change": "a", "why": "b", "expected_effect": "c"}]}
NO_SHAPES: dict[str, list[object]] = {"shapes": []}


def plan(summary: str) -> dict[str, object]:
    return {**PLAN, "summary": summary}


def candidate(speedup: float) -> Scripted:
    return text(fenced(marked(VECTORIZED, speedup=speedup)))


@pytest.fixture(autouse=True)
def _no_api_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("ASTRA_API_KEY", raising=False)


def settings(server: FakeOpenAI, **options: Any) -> LLMSettings:
    model = server.imitation.models[0]
    return LLMSettings(base_url=server.base_url, model=model, **{"max_retries": 0, **options})


def run(server: FakeOpenAI, tmp_path: Path, rounds: int, **options: object) -> OptimizationResult:
    return optimize(
        NAIVE,
        rounds=rounds,
        runs_dir=tmp_path,
        evaluator=FakeEvaluator(),
        llm_settings=settings(server, **options),
    )


EXPECTED_METHOD = {
    "openai": "json_schema",
    "json_mode_only": "json_mode",
    "prose": "text",
    "fenced": "text",
    "think": "json_mode",
    "reasoning": "json_mode",
    "llama_cpp": "function_calling",
}


@pytest.mark.parametrize("name", sorted(EXPECTED_METHOD))
def test_every_imitated_server_gives_each_round_its_plan(name: str, tmp_path: Path) -> None:
    script = {
        "testing": [structured(NO_SHAPES)],
        "planning": [structured(plan("first")), structured(plan("second"))],
        "coding": [candidate(1.2), candidate(1.5)],
    }
    with FakeOpenAI(script, IMITATIONS[name]) as server:
        result = run(server, tmp_path, rounds=2)
    assert not server.unscripted
    assert [r.plan.summary if r.plan else None for r in result.rounds] == ["first", "second"]
    assert result.best_round == 2 and result.status == "finished"
    method = EXPECTED_METHOD[name]
    assert {u.method for u in result.usage if u.agent != "coding"} == {method}
    # found once per endpoint and model: the refusals all come before the first answer
    refused = [r for r in server.requests if r.refused]
    assert all(r.at <= server.for_agent("testing")[0].at for r in refused)
    assert len(refused) == METHODS.index(method)
    saved = json.loads((Path(result.run_dir) / "run.json").read_text())
    assert saved["usage"][0]["method"] == method
    if refused:
        assert "refused: HTTP 400" in saved["usage"][0]["notes"][0]


def test_a_resumed_run_keeps_its_method_and_a_new_endpoint_is_probed_afresh(
    tmp_path: Path,
) -> None:
    script = {
        "testing": [structured(NO_SHAPES)],
        "planning": [structured(plan("first")), structured(plan("second"))],
        "coding": [candidate(1.2), candidate(1.5)],
    }

    def crash_in(round_number: int) -> FakeEvaluator:
        def fail(method: str, path: Path) -> bool:
            return method == "check" and path.parent.name == str(round_number)

        return FakeEvaluator(fail=fail)

    def refused(server: FakeOpenAI) -> int:
        return len([r for r in server.requests if r.refused])

    probes = METHODS.index("json_mode")  # json_schema, then tools, each refused once
    with FakeOpenAI(script, IMITATIONS["json_mode_only"]) as first:
        with pytest.raises(RunFailed, match="injected"):
            optimize(
                NAIVE,
                rounds=3,
                runs_dir=tmp_path,
                evaluator=crash_in(1),
                llm_settings=settings(first),
            )
        (run_dir,) = tmp_path.iterdir()
        assert refused(first) == probes
        with pytest.raises(RunFailed, match="injected"):
            optimize(None, resume=run_dir, evaluator=crash_in(2), llm_settings=settings(first))
        # round 2's planner was asked after the resume, straight in JSON mode
        assert len(first.for_agent("planning")) == 2 and refused(first) == probes

    # resumed against another endpoint: that one is probed, not assumed
    again = {"planning": [structured(plan("third"))], "coding": [candidate(1.1)]}
    with FakeOpenAI(again, IMITATIONS["json_mode_only"]) as second:
        result = optimize(
            None, resume=run_dir, evaluator=FakeEvaluator(), llm_settings=settings(second)
        )
        assert refused(second) == probes and not second.unscripted
    assert result.status == "finished"
    assert [r.plan.summary if r.plan else None for r in result.rounds] == [
        "first",
        "second",
        "third",
    ]
    assert {u.method for u in result.usage if u.agent == "planning"} == {"json_mode"}


def test_a_reply_that_fails_validation_is_asked_again_with_the_error(tmp_path: Path) -> None:
    script = {
        "testing": [structured(NO_SHAPES)],
        "planning": [raw_json({"summary": "no changes field"}), structured(plan("fixed"))],
        "coding": [candidate(1.3)],
    }
    with FakeOpenAI(script) as server:
        result = run(server, tmp_path, rounds=1)
    assert result.rounds[0].plan is not None and result.rounds[0].plan.summary == "fixed"
    reask = server.for_agent("planning")[1]
    assert "changes: Field required" in reask.text
    (usage,) = [u for u in result.usage if u.agent == "planning"]
    assert usage.requests == 2 and usage.failure is None
    assert usage.input_tokens == 240 and usage.output_tokens == 160  # both replies billed


def test_unusable_replies_count_their_billed_tokens(tmp_path: Path) -> None:
    script = {
        "testing": [text("no JSON here", 500, 50), text("still none", 600, 60)],
        "planning": [text("prose only", 700, 70), text("prose again", 800, 80)],
        "coding": [text("no code", 900, 90)] * 3,
    }
    with FakeOpenAI(script) as server:
        result = run(server, tmp_path, rounds=1)
    assert result.total_tokens == 500 + 50 + 600 + 60 + 700 + 70 + 800 + 80 + 3 * (900 + 90)
    assert all(u.failure for u in result.usage)
    # every call failed: the run says so, naming the last problem
    assert result.status == "failed" and result.error is not None
    assert "every LLM call failed" in result.error and "no CUDA source" in result.error


def test_retry_after_is_honoured(tmp_path: Path) -> None:
    script = {
        "testing": [error(429, retry_after="2"), structured(NO_SHAPES)],
        "planning": [structured(PLAN)],
        "coding": [candidate(1.3)],
    }
    with FakeOpenAI(script) as server:
        result = run(server, tmp_path, rounds=1, max_retries=2)
    first, second = server.for_agent("testing")[:2]
    assert 2.0 <= second.at - first.at < 4.0
    assert result.rounds[0].plan is not None and result.rounds[0].plan.summary == PLAN["summary"]


def test_a_persistent_429_fails_the_call_loudly(tmp_path: Path) -> None:
    busy = [error(429, retry_after="0.1")] * 3
    script = {
        "testing": [structured(NO_SHAPES)],
        "planning": busy,
        "coding": [candidate(1.3)],
    }
    with FakeOpenAI(script) as server:
        result = run(server, tmp_path, rounds=1, max_retries=2)
    assert len(server.for_agent("planning")) == 3
    (usage,) = [u for u in result.usage if u.agent == "planning"]
    assert usage.failure is not None and "HTTP 429" in usage.failure
    notes = "\n".join(result.rounds[0].notes)
    assert "planning: LLM call failed: HTTP 429" in notes
    (planned,) = result.rounds[0].candidates
    assert planned.plan is not None and "HTTP 429" in planned.plan.summary
    assert "unusable" not in planned.plan.summary  # a refused request is not a bad reply
    assert result.status == "finished"  # other calls worked
    assert "HTTP 429" in (Path(result.run_dir) / "report.md").read_text()


def test_one_limit_bounds_a_request_with_its_retries() -> None:
    script = {"planning": [slow(structured(PLAN), 3.0), slow(structured(PLAN), 3.0)]}
    with FakeOpenAI(script) as server:
        llm = LLM(settings(server, timeout_s=1.0, max_retries=3))
        started = time.monotonic()
        reply = llm.ask_structured("planning", Plan, "You are the planning agent.", "Plan.")
        elapsed = time.monotonic() - started
        llm.close()
    assert reply.value is None and reply.problem is not None
    assert "no reply within 1 s" in reply.problem and "last answer" not in reply.problem
    assert elapsed < 2.5
    # a Retry-After longer than the limit: the SDK would wait 5 s; the limit ends the call at 1 s
    busy = {"planning": [error(429, retry_after="5")] * 4}
    with FakeOpenAI(busy) as server:
        llm = LLM(settings(server, timeout_s=1.0, max_retries=3))
        started = time.monotonic()
        reply = llm.ask_structured("planning", Plan, "You are the planning agent.", "Plan.")
        elapsed = time.monotonic() - started
        llm.close()
    assert reply.problem is not None and "no reply within 1 s" in reply.problem
    assert "the server's last answer: HTTP 429 with Retry-After 5 s" in reply.problem
    assert len(server.for_agent("planning")) == 1 and elapsed < 2.5


def test_a_timeout_names_only_its_own_requests_server_answer() -> None:
    # two calls at once on one client: the planner's is refused with 429s, the tester's is slow
    script = {
        "planning": [error(429, retry_after="5")] * 4,
        "testing": [slow(structured(NO_SHAPES), 3.0)],
    }
    with FakeOpenAI(script) as server:
        llm = LLM(settings(server, timeout_s=1.0, max_retries=3))
        replies: dict[str, Any] = {}

        def ask(agent: Any, schema: Any) -> None:
            replies[agent] = llm.ask_structured(agent, schema, f"You are the {agent} agent.", "Go.")

        threads = [
            threading.Thread(target=ask, args=("planning", Plan)),
            threading.Thread(target=ask, args=("testing", ShapeProposals)),
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(10)
        llm.close()
    assert "last answer: HTTP 429 with Retry-After 5 s" in replies["planning"].problem
    assert "no reply within 1 s" in replies["testing"].problem
    assert "last answer" not in replies["testing"].problem


def test_a_method_the_server_now_refuses_is_probed_again() -> None:
    # remembered from an earlier run (json_schema), but the server now answers it with 400
    script = {"planning": [structured(PLAN)]}
    with FakeOpenAI(script, IMITATIONS["json_mode_only"]) as server:
        llm = LLM(settings(server))
        model = server.imitation.models[0]
        before = Usage(
            agent="planning", round=1, model=model, method="json_schema", endpoint=server.base_url
        )
        llm.remember_methods([before])
        reply = llm.ask_structured("planning", Plan, "You are the planning agent.", "Plan.")
        llm.close()
    assert reply.value is not None and reply.method == "json_mode"
    assert reply.notes[0].startswith("json_schema refused (it worked before: probing again)")
    assert [r.refused for r in server.requests] == ["json_schema", "tools", None]


def test_a_slow_reply_past_the_limit_fails_its_call_and_the_round_goes_on(tmp_path: Path) -> None:
    script = {
        "testing": [structured(NO_SHAPES)],
        "planning": [slow(structured(PLAN), 3.0)],
        "coding": [candidate(1.3)],
    }
    with FakeOpenAI(script) as server:
        result = run(server, tmp_path, rounds=1, timeout_s=1.0, max_retries=2)
    assert not server.unscripted
    (round_1,) = result.rounds
    assert round_1.geomean_speedup == pytest.approx(1.3) and result.status == "finished"
    failure = f"planning: LLM call failed: {server.base_url}: no reply within 1 s (--llm-timeout)"
    assert failure in round_1.notes
    saved = json.loads((Path(result.run_dir) / "run.json").read_text())
    assert failure in json.dumps(saved["rounds"][0])
    assert "no reply within 1 s" in (Path(result.run_dir) / "report.md").read_text()


@pytest.mark.parametrize(
    ("reply", "words"),
    [
        (slow(structured(PLAN), 1.5), "no reply within 0.5 s (--llm-timeout)"),
        (hang_up(), "/v1: Server disconnected"),  # the transport's words, not "Connection error."
    ],
    ids=["slow", "hang_up"],
)
def test_a_run_whose_every_call_fails_ends_failed_naming_the_endpoint_error(
    reply: Scripted, words: str, tmp_path: Path
) -> None:
    script = {"testing": [reply], "planning": [reply], "coding": [reply] * 3}
    with FakeOpenAI(script) as server:
        result = run(server, tmp_path, rounds=1, timeout_s=0.5)
    assert not server.unscripted
    assert result.status == "failed" and result.error is not None
    assert "every LLM call failed" in result.error and words in result.error
    run_dir = Path(result.run_dir)
    saved = OptimizationResult.model_validate_json((run_dir / "run.json").read_text())
    assert saved.status == "failed" and saved.error == result.error
    assert words in (run_dir / "report.md").read_text()


def test_a_cut_off_plan_is_asked_again(tmp_path: Path) -> None:
    script = {
        "testing": [structured(NO_SHAPES)],
        "planning": [cut(structured(PLAN)), structured(plan("shorter"))],
        "coding": [candidate(1.3)],
    }
    with FakeOpenAI(script) as server:
        result = run(server, tmp_path, rounds=1, max_output_tokens=4096)
    assert result.rounds[0].plan is not None and result.rounds[0].plan.summary == "shorter"
    reask = server.for_agent("planning")[1].text
    assert "cut off" in reask and "output-token limit" in reask
    assert server.for_agent("planning")[0].body["max_completion_tokens"] == 4096


def test_cut_off_code_is_never_compiled_and_the_coder_is_told(tmp_path: Path) -> None:
    script = {
        "testing": [structured(NO_SHAPES)],
        "planning": [structured(PLAN)],
        "coding": [cut(candidate(1.3)), candidate(1.3)],
    }
    with FakeOpenAI(script) as server:
        result = run(server, tmp_path, rounds=1)
    run_dir = Path(result.run_dir)
    assert not (run_dir / "rounds/1/attempt-1.cu").exists()  # never written, never compiled
    assert (run_dir / "rounds/1/attempt-2.cu").is_file()
    repair = server.for_agent("coding")[1].text
    assert "cut off" in repair and "output-token limit" in repair
    assert result.rounds[0].attempts == 2 and result.best_round == 1


def test_a_diff_reply_is_applied_or_answered_with_a_whole_file_request(tmp_path: Path) -> None:
    import difflib

    naive = NAIVE.read_text()
    faster = naive.replace("expf(-a)", "__expf(-a)").replace(
        "// astra: description", "// fake: speedup = 1.4\n// astra: description"
    )
    diff = "\n".join(
        difflib.unified_diff(naive.splitlines(), faster.splitlines(), "a", "b", lineterm="")
    )
    stale = diff.replace("const long long row", "const int row")
    script = {
        "testing": [structured(NO_SHAPES)],
        "planning": [structured(PLAN), structured(PLAN)],
        "coding": [
            text(f"Here is the change:\n```diff\n{diff}\n```"),  # round 1: applies
            text(f"```diff\n{stale}\n```"),  # round 2: does not apply
            candidate(1.2),
        ],
    }
    with FakeOpenAI(script) as server:
        result = run(server, tmp_path, rounds=2)
    run_dir = Path(result.run_dir)
    assert (run_dir / "rounds/1/candidate.cu").read_text() == faster
    assert result.rounds[0].geomean_speedup == pytest.approx(1.4)
    repair = server.for_agent("coding")[2].text
    assert "does not apply cleanly" in repair and "WHOLE" in repair
    assert result.rounds[1].attempts == 2


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize(
    ("url", "words"),
    [
        ("not-a-url", "--base-url 'not-a-url': expected an http"),
        ("http://127.0.0.1:{port}/v1", "--base-url http://127.0.0.1:{port}/v1: cannot connect"),
    ],
)
def test_preflight_rejects_a_bad_or_dead_url(url: str, words: str, tmp_path: Path) -> None:
    port = _closed_port()
    started = time.monotonic()
    with pytest.raises(ConfigurationError, match=words.format(port=port).replace(".", r"\.")):
        optimize(
            NAIVE,
            rounds=1,
            runs_dir=tmp_path,
            evaluator=FakeEvaluator(),
            llm_settings=LLMSettings(base_url=url.format(port=port)),
        )
    assert time.monotonic() - started < 10
    assert not list(tmp_path.iterdir())  # no run directory


def test_preflight_names_the_key_and_the_model(monkeypatch: pytest.MonkeyPatch) -> None:
    with FakeOpenAI(imitation=Imitation(key="sk-right")) as server:
        monkeypatch.setenv("OPENAI_API_KEY", "sk-wrong")
        with pytest.raises(EndpointError, match=r"OPENAI_API_KEY: .* refused the key: HTTP 401"):
            preflight(LLMSettings(base_url=server.base_url), ["planning"])
        monkeypatch.setenv("OPENAI_API_KEY", "sk-right")
        preflight(LLMSettings(base_url=server.base_url), ["planning"])
        with pytest.raises(EndpointError, match=r"--agent-model o3: not served .*o4-mini"):
            preflight(
                LLMSettings(base_url=server.base_url, agent_models={"coding": "o3"}), ["coding"]
            )
    # a URL without the API's /v1: the URL is named, not the model
    with FakeOpenAI() as server:
        wrong = server.base_url.removesuffix("/v1")
        with pytest.raises(EndpointError, match=r"--base-url .*: no OpenAI-compatible API.*/v1"):
            preflight(LLMSettings(base_url=wrong), ["planning"])
    # a web server that is not an API: 404 pages, and 501 for POST
    import threading
    from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer

    class Quiet(SimpleHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

    web = ThreadingHTTPServer(("127.0.0.1", 0), Quiet)
    threading.Thread(target=web.serve_forever, args=(SHUTDOWN_POLL_S,), daemon=True).start()
    try:
        url = f"http://127.0.0.1:{web.server_address[1]}/v1"
        with pytest.raises(EndpointError, match=r"--base-url .*: HTTP 501"):
            preflight(LLMSettings(base_url=url), ["planning"])
    finally:
        web.shutdown()
        web.server_close()
    # a server that answers to any model name (llama.cpp) passes with the one-token request
    with FakeOpenAI(imitation=IMITATIONS["llama_cpp"]) as server:
        preflight(LLMSettings(base_url=server.base_url, model="anything"), ["planning"])
        assert server.requests and server.requests[0].body["max_tokens"] == 1


@pytest.fixture
def _restore_structlog() -> Iterator[None]:
    yield
    structlog.reset_defaults()


@pytest.mark.usefixtures("_restore_structlog")
@pytest.mark.parametrize(
    ("case", "words"),
    [
        ("not_a_url", "--base-url 'not-a-url': expected an http:// or https:// URL"),
        ("refused", "--base-url http://127.0.0.1:{port}/v1: cannot connect"),
        ("wrong_key", "OPENAI_API_KEY: --base-url {url} refused the key: HTTP 401"),
        ("no_key", "OPENAI_API_KEY (none set): --base-url {url} refused the key: HTTP 401"),
        ("unknown_model", "--model gpt-nope: not served by {url} (it serves: o4-mini)"),
    ],
)
def test_cli_preflight_one_line_exit_2_before_any_run_directory(
    case: str,
    words: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    import astra_graph.commands.optimize as command
    import astra_graph.harness.evaluator as harness_evaluator

    monkeypatch.setattr(command, "gpu_arch", lambda: "sm_90")
    monkeypatch.setattr(harness_evaluator, "Evaluator", FakeEvaluator)
    if case == "wrong_key":
        monkeypatch.setenv("OPENAI_API_KEY", "sk-wrong")
    port = _closed_port()
    imitation = Imitation(key="sk-right") if case.endswith("_key") else Imitation()
    with FakeOpenAI(imitation=imitation) as server:
        url = {"not_a_url": "not-a-url", "refused": f"http://127.0.0.1:{port}/v1"}.get(
            case, server.base_url
        )
        model = ["--model", "gpt-nope"] if case == "unknown_model" else []
        argv = ["optimize", "silu_and_mul/naive", "--base-url", url, *model]
        code = cli.main([*argv, "--runs-dir", str(tmp_path / "runs")])
        chats = [r for r in server.requests if r.agent is not None]
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1, err
    assert words.format(port=port, url=server.base_url) in err[0]
    if case == "unknown_model":
        assert "does not exist" in err[0]  # the server's own answer
    assert not (tmp_path / "runs").exists()  # no run directory
    assert not chats  # no agent was asked anything


@pytest.mark.usefixtures("_restore_structlog")
def test_cli_a_failed_planner_or_coder_is_named_everywhere(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Round 1's planner gets a 429, round 2's coder never sends code: each failure is in the
    round's record (the state), run.json, the CLI's progress lines and the report."""
    import astra_graph.commands.optimize as command
    import astra_graph.harness.evaluator as harness_evaluator

    monkeypatch.setattr(command, "gpu_arch", lambda: "sm_90")
    monkeypatch.setattr(harness_evaluator, "Evaluator", FakeEvaluator)
    script = {
        "testing": [structured(NO_SHAPES)],
        "planning": [error(429), structured(plan("second"))],
        "coding": [candidate(1.3), text("I would rather not.")],
    }
    with FakeOpenAI(script) as server:
        argv = ["optimize", "silu_and_mul/naive", "--rounds", "2", "--max-repairs", "0"]
        argv += ["--retries", "0", "--json", "--base-url", server.base_url]
        code = cli.main([*argv, "--runs-dir", str(tmp_path)])
    out, err = capsys.readouterr()
    assert not server.unscripted and code == 0  # round 1 still found a faster kernel
    result = OptimizationResult.model_validate_json(out)
    planner = f"planning: LLM call failed: HTTP 429 from {server.base_url}: scripted failure 429"
    coder = "no CUDA source with an '// astra:' header found in the reply"
    assert planner in result.rounds[0].notes
    assert any(coder in note for note in result.rounds[1].notes)
    assert result.rounds[0].geomean_speedup == pytest.approx(1.3)
    saved = json.loads((Path(result.run_dir) / "run.json").read_text())
    assert planner in json.dumps(saved["rounds"][0]) and coder in json.dumps(saved["rounds"][1])
    events = [json.loads(line) for line in err.splitlines() if line.startswith("{")]
    said = [(e.get("agent"), e.get("round"), str(e.get("message"))) for e in events]
    assert any(a == "planning" and k == 1 and "HTTP 429" in m for a, k, m in said)
    assert any(a == "coding" and k == 2 and coder in m for a, k, m in said)
    report = (Path(result.run_dir) / "report.md").read_text()
    assert "HTTP 429" in report and coder in report


@pytest.mark.usefixtures("_restore_structlog")
def test_cli_a_run_whose_every_call_fails_exits_1_naming_the_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import astra_graph.commands.optimize as command
    import astra_graph.harness.evaluator as harness_evaluator

    monkeypatch.setattr(command, "gpu_arch", lambda: "sm_90")
    monkeypatch.setattr(harness_evaluator, "Evaluator", FakeEvaluator)
    script = {"testing": [error(503)], "planning": [error(503)], "coding": [error(503)] * 3}
    with FakeOpenAI(script) as server:
        argv = ["optimize", "silu_and_mul/naive", "--rounds", "1", "--retries", "0", "--json"]
        code = cli.main([*argv, "--base-url", server.base_url, "--runs-dir", str(tmp_path)])
    out, err = capsys.readouterr()
    assert code == 1
    result = OptimizationResult.model_validate_json(out)
    assert result.status == "failed" and "HTTP 503" in (result.error or "")
    assert "run failed: every LLM call failed" in err and "HTTP 503" in err
    events = [json.loads(line) for line in err.splitlines() if line.startswith("{")]
    assert any("HTTP 503" in str(e.get("message", "")) for e in events if e.get("agent"))


def test_reasoning_content_reaches_the_pipeline() -> None:
    with FakeOpenAI({"planning": [structured(PLAN)]}, IMITATIONS["reasoning"]) as server:
        llm = LLM(settings(server))
        answer = llm.ask_text("planning", "You are the planning agent.", "Plan.")
        llm.close()
    assert answer.value is not None and answer.value.reasoning is not None
    assert "First I read the profile" in answer.value.reasoning
