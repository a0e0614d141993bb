"""External answers: a person or another program answers the agents' model requests.

With the model name :data:`EXTERNAL` for an agent (``astra optimize --agents external``, or
``--agent-model planning=external`` for one agent), the agent's chat model does not call a
server: :mod:`astra_graph.llm.external_chat` turns the call into a LangGraph ``interrupt()`` whose
value is a :class:`Question` (the messages a model would get, and for structured replies the
JSON schema and an example). The run stops there with status ``waiting``.

This module is the record of those exchanges, kept as files in the run directory
(``external/``, see docs/RUNS.md), which are the one source of truth:

- ``NNN-<agent>.request.json`` (:class:`ExternalRequest`) and ``NNN-<agent>.request.md`` (the
  same, to read) are written when the graph stops at an interrupt;
- ``NNN-<agent>.answer.txt`` is the answer, written (atomically) *before* the run continues, so
  a run killed after a reply continues with that answer instead of asking again.

The answer is the raw reply text. It goes back into the chat model as if a server had sent it,
so it meets exactly the reply pipeline (:mod:`astra_graph.llm.replies`), validation and repair a
model's reply meets.
``run.json`` lists every exchange (:func:`load_exchanges`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ValidationError

from astra_graph.store.rundir import EXTERNAL_DIR, utc_now, write_text

EXTERNAL = "external"
"""The model name that makes an agent's requests external (answered with ``astra reply``)."""

REQUEST_FORMAT = "astra-external-request/1"
QUESTION_KIND = "astra_external_request"
"""Marks an interrupt value as a :class:`Question` (Studio shows the value as it is)."""

ReplyKind = Literal["text", "structured"]


class ExternalError(ValueError):
    """A request or answer file that is missing or malformed, or an answer that cannot be used."""


class Message(BaseModel):
    role: str
    content: str


class Question(BaseModel):
    """What an external agent is asked: the interrupt's value, as Studio shows it."""

    kind: str = QUESTION_KIND
    agent: str
    reply: ReplyKind
    """``text``: free text (the coding agent's file in a fenced block); ``structured``: JSON."""
    messages: list[Message]
    response_schema: dict[str, Any] | None = None
    """The JSON schema a structured reply must satisfy."""
    example: Any = None
    """A reply of the right shape (placeholders for the content), for structured replies."""
    how_to_answer: str = ""


class ExternalRequest(Question):
    """A question as the run directory keeps it: numbered, with its round and interrupt id."""

    format: str = REQUEST_FORMAT
    number: int
    round: int
    """0: before the first round (the testing agent); k: round k."""
    interrupt_id: str
    asked_at: str


class Exchange(BaseModel):
    """One request and, once given, its answer (as ``run.json`` lists them)."""

    request: ExternalRequest
    answer: str | None = None
    answered_at: str | None = None
    request_path: str
    answer_path: str


def how_to_answer(reply: ReplyKind) -> str:
    if reply == "structured":
        return (
            "Reply with one JSON object that satisfies response_schema (see example); a "
            "```json fence or words around it are tolerated, as they are from a model."
        )
    return "Reply as a model would: follow the user message's instructions for the format."


def example_from_schema(schema: dict[str, Any]) -> Any:
    """A value of the schema's shape with placeholders: one item per list, every property set."""
    definitions = schema.get("$defs") or schema.get("definitions") or {}

    def build(node: dict[str, Any], name: str) -> Any:
        if "$ref" in node:
            return build(definitions[node["$ref"].rsplit("/", 1)[-1]], name)
        for key in ("anyOf", "oneOf", "allOf"):
            if key in node:
                options = [o for o in node[key] if o.get("type") != "null"]
                return build(options[0] if options else {}, name)
        if "enum" in node:
            return node["enum"][0]
        kind = node.get("type")
        if kind == "object":
            properties = node.get("properties", {})
            return {key: build(value, key) for key, value in properties.items()}
        if kind == "array":
            return [build(node.get("items", {}), name)]
        if kind == "integer":
            return 1
        if kind == "number":
            return 1.0
        if kind == "boolean":
            return False
        return f"<{node.get('description') or name}>"

    return build(schema, "value")


def _stem(number: int, agent: str) -> str:
    return f"{number:03d}-{agent}"


def request_path(run_dir: Path, number: int, agent: str) -> Path:
    return run_dir / EXTERNAL_DIR / f"{_stem(number, agent)}.request.json"


def markdown_path(request_json: Path) -> Path:
    return request_json.with_name(request_json.name.removesuffix(".json") + ".md")


def answer_path(request_json: Path) -> Path:
    return request_json.with_name(request_json.name.removesuffix(".request.json") + ".answer.txt")


def fence(text: str, language: str = "") -> str:
    """``text`` in a fence longer than any backtick run inside it."""
    longest = run = 0
    for char in text:
        run = run + 1 if char == "`" else 0
        longest = max(longest, run)
    marks = "`" * max(3, longest + 1)
    body = text if text.endswith("\n") else text + "\n"
    return f"{marks}{language}\n{body}{marks}"


def reply_command(run_dir: Path) -> str:
    return f"astra reply {run_dir} --file ANSWER"


def render_markdown(request: ExternalRequest, run_dir: Path) -> str:
    """The request as one readable page: what to answer, how, and the messages in full."""
    where = "before the first round" if request.round == 0 else f"round {request.round}"
    answer_file = answer_path(request_path(run_dir, request.number, request.agent))
    lines = [
        f"# Request {request.number}: the {request.agent} agent ({where})",
        "",
        f"Run: `{run_dir}`  ",
        f"Asked at: {request.asked_at}  ",
        f"Reply: {request.reply}",
        "",
        "## How to answer",
        "",
        request.how_to_answer,
        "",
        "Write the answer to a file and run:",
        "",
        fence(f"{reply_command(run_dir)}      # or: ... - < ANSWER (stdin)", "bash"),
        "",
        "The answer is checked exactly as a model's reply is: an unusable one is recorded and, "
        "where the agent has repairs left, comes back as a new request with the problem.",
        f"It is kept as `{answer_file.relative_to(run_dir)}`.",
    ]
    if request.response_schema is not None:
        lines += [
            "",
            "## Response schema",
            "",
            fence(json.dumps(request.response_schema, indent=2), "json"),
            "",
            "## Example of the shape (replace the placeholders)",
            "",
            fence(json.dumps(request.example, indent=2), "json"),
        ]
    for message in request.messages:
        lines += ["", f"## {message.role.capitalize()} message", "", fence(message.content)]
    return "\n".join(lines) + "\n"


def _read_request(path: Path) -> ExternalRequest:
    try:
        return ExternalRequest.model_validate_json(path.read_text())
    except (OSError, ValidationError) as exc:
        raise ExternalError(f"{path}: not a valid request file: {exc}") from None


def load_exchanges(run_dir: Path) -> list[Exchange]:
    """Every request of the run, in order, each with its answer if one was given."""
    folder = run_dir / EXTERNAL_DIR
    if not folder.is_dir():
        return []
    exchanges = []
    for path in sorted(folder.glob("*.request.json")):
        request = _read_request(path)
        answer_file = answer_path(path)
        answer, answered_at = None, None
        if answer_file.is_file():
            answer = answer_file.read_text()
            answered_at = written_at(answer_file)
        exchanges.append(
            Exchange(
                request=request,
                answer=answer,
                answered_at=answered_at,
                request_path=str(path),
                answer_path=str(answer_file),
            )
        )
    return exchanges


def written_at(path: Path) -> str:
    """When a file was last written, in the run directory's timestamp format."""
    return datetime.fromtimestamp(path.stat().st_mtime, UTC).isoformat(timespec="seconds")


def request_round(agent: str, completed_rounds: int) -> int:
    """The round a request belongs to: 0 for the testing agent, else the round under way."""
    return 0 if agent == "testing" else completed_rounds + 1


def record_questions(
    run_dir: Path, interrupts: Iterable[Any], completed_rounds: int
) -> list[Exchange]:
    """Write the request files of pending interrupts not yet on disk; return their exchanges.

    ``interrupts`` are LangGraph ``Interrupt`` objects (``.id``, ``.value``); values that are not
    a :class:`Question` are not ours and are skipped. An interrupt already on disk (a waiting run
    continued without an answer) keeps its file and number.
    """
    known = {e.request.interrupt_id: e for e in load_exchanges(run_dir)}
    number = len(known)
    pending = []
    for item in interrupts:
        value = getattr(item, "value", None)
        if not (isinstance(value, dict) and value.get("kind") == QUESTION_KIND):
            continue
        if item.id in known:
            pending.append(known[item.id])
            continue
        question = Question.model_validate(value)
        number += 1
        request = ExternalRequest(
            **question.model_dump(),
            number=number,
            round=request_round(question.agent, completed_rounds),
            interrupt_id=item.id,
            asked_at=utc_now(),
        )
        path = request_path(run_dir, number, question.agent)
        write_text(path, request.model_dump_json(indent=2) + "\n")
        write_text(markdown_path(path), render_markdown(request, run_dir))
        exchange = Exchange(
            request=request, request_path=str(path), answer_path=str(answer_path(path))
        )
        known[item.id] = exchange
        pending.append(exchange)
    return pending


def waiting_for(exchanges: Sequence[Exchange]) -> Exchange | None:
    """The request that still needs an answer (the last one without an answer), or None."""
    unanswered = [e for e in exchanges if e.answer is None]
    return unanswered[-1] if unanswered else None


def record_answer(exchange: Exchange, answer: str) -> None:
    """Keep the answer beside its request; an empty answer is refused (nothing to check)."""
    if not answer.strip():
        raise ExternalError("the answer is empty: give the reply text (--file F, or - for stdin)")
    if exchange.answer is not None:
        raise ExternalError(
            f"request {exchange.request.number} already has an answer ({exchange.answer_path}); "
            "continue the run with astra optimize --resume"
        )
    write_text(Path(exchange.answer_path), answer)


def answers_for(run_dir: Path, interrupt_ids: Iterable[str]) -> dict[str, str]:
    """The recorded answers of these pending interrupts, by interrupt id (resume map)."""
    wanted = set(interrupt_ids)
    return {
        e.request.interrupt_id: e.answer
        for e in load_exchanges(run_dir)
        if e.request.interrupt_id in wanted and e.answer is not None
    }


def waiting_line(exchange: Exchange, run_dir: Path) -> str:
    """The one line the CLI prints when a run stops for an answer."""
    request = exchange.request
    where = "before round 1" if request.round == 0 else f"round {request.round}"
    return (
        f"waiting for an answer to request {request.number} ({request.agent}, {where}): "
        f"read {markdown_path(Path(exchange.request_path))}, then run: {reply_command(run_dir)} "
        "(or - to read stdin)"
    )
