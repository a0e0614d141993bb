"""The reply pipeline: from the raw text of an answer to a validated object, or a typed failure.

Every answer an agent gets, whoever wrote it (a model through any server style, or a person
or another agent answering a request by hand), goes through the same two functions:

- :func:`read_structured` takes the reply (text, ``finish_reason``, ``reasoning_content``) and a
  Pydantic schema, and returns a validated instance or a :class:`ReplyProblem`;
- :func:`read_code` takes a coding reply and the sources it may be a diff against, and returns
  the whole implementation file (:class:`CodeReply`) or a :class:`ReplyProblem`.

A problem carries its kind, one line for the records, and the repair prompt that asks again
(``prompts/reask.md``), so the caller can re-ask without knowing why the reply failed. Nothing
here calls a model: it is pure text handling, tested through plain strings.

Why so lenient about where the JSON is: servers differ. Some honour ``json_schema``, some only
JSON mode, some neither; reasoning models put their thinking in ``reasoning_content`` or inline
in ``<think>`` blocks; many models wrap JSON in a fence or a sentence. A reply is accepted when
some JSON object in it validates against the schema; strictness lives in the schema.

Why a truncated reply is never taken as whole: ``finish_reason == "length"`` means the output
limit cut the answer. A JSON value that still parses and validates is complete, so it is used;
code is used only when its fence was closed before the cut.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, TypeVar

from pydantic import BaseModel, ValidationError

from astra_graph.llm import prompts

SchemaT = TypeVar("SchemaT", bound=BaseModel)

ProblemKind = Literal[
    "empty", "truncated", "no_json", "invalid_json", "invalid_schema", "no_code", "diff_failed"
]

TRUNCATED = "length"
"""The ``finish_reason`` of a reply cut off by the output-token limit."""

MAX_SCHEMA_ERRORS = 5
"""Validation errors quoted in a repair prompt; more only lengthen it."""


@dataclass(frozen=True)
class RawReply:
    """One answer as it arrived: the text (message content, or a tool call's arguments), why
    generation stopped, and the separate reasoning text some servers return."""

    text: str
    finish_reason: str | None = None
    reasoning: str | None = None

    @property
    def truncated(self) -> bool:
        return self.finish_reason == TRUNCATED


@dataclass(frozen=True)
class ReplyProblem:
    """Why a reply could not be used: the kind, one line for the records, the repair prompt."""

    kind: ProblemKind
    message: str
    repair: str


@dataclass(frozen=True)
class CodeReply:
    """The whole implementation file taken from a coding reply."""

    source: str
    from_diff: bool = False
    """The reply was a unified diff, applied to one of the given sources."""


# --- structured replies -------------------------------------------------------------------------

_THINK_BLOCK = re.compile(r"<think(?:ing)?>.*?</think(?:ing)?>", re.DOTALL | re.IGNORECASE)
_THINK_CLOSE = re.compile(r"</think(?:ing)?>", re.IGNORECASE)


def strip_thinking(text: str) -> str:
    """``text`` without ``<think>...</think>`` blocks; a lone closing tag (the opening one was
    part of the chat template) drops everything before it; an unclosed opening tag drops the
    rest, since what follows it is thinking that never finished."""
    text = _THINK_BLOCK.sub("", text)
    closes = list(_THINK_CLOSE.finditer(text))
    if closes:
        text = text[closes[-1].end() :]
    opening = re.search(r"<think(?:ing)?>", text, re.IGNORECASE)
    if opening:
        text = text[: opening.start()]
    return text.strip()


def schema_block(schema: type[BaseModel]) -> str:
    """The schema as quoted JSON, for prompts that must carry it themselves."""
    return prompts.quote("JSON schema", json.dumps(schema.model_json_schema()), "json")


def schema_instruction(schema: type[BaseModel]) -> str:
    """The instruction that carries the schema when the server cannot (JSON mode, plain text)."""
    return prompts.render("json_reply", schema=schema_block(schema))


def json_values(text: str) -> list[object]:
    """Every JSON object or array in ``text``, in order: the whole text, fenced blocks, then
    each value embedded in prose (decoded from each ``{`` or ``[`` that starts one)."""
    found: list[object] = []
    candidates = [text.strip(), *(body for _, body, _ in fenced_blocks(text))]
    for candidate in candidates:
        try:
            found.append(json.loads(candidate))
        except ValueError:
            continue
    decoder = json.JSONDecoder()
    i = 0
    while i < len(text):
        if text[i] in "{[":
            try:
                value, end = decoder.raw_decode(text, i)
            except ValueError:
                i += 1
                continue
            found.append(value)
            i = end
        else:
            i += 1
    return [v for v in found if isinstance(v, dict | list)]


def _shapes_of(value: object, schema: type[BaseModel]) -> list[object]:
    """``value`` and the forms a model commonly wraps the answer in: ``{"Plan": {...}}`` or
    ``{"properties": {...}}``, and a bare list for a schema whose only field is a list."""
    forms = [value]
    if isinstance(value, dict) and len(value) == 1:
        inner = next(iter(value.values()))
        if isinstance(inner, dict):
            forms.append(inner)
    fields = schema.model_fields
    if isinstance(value, list) and len(fields) == 1:
        forms.append({next(iter(fields)): value})
    return forms


def _validation_summary(exc: ValidationError) -> str:
    parts = []
    for error in exc.errors()[:MAX_SCHEMA_ERRORS]:
        where = ".".join(str(p) for p in error["loc"]) or "(top level)"
        parts.append(f"{where}: {error['msg']}")
    return "; ".join(parts)


def _reask(problem: str, instruction: str) -> str:
    return prompts.render("reask", problem=problem, instruction=instruction)


def _structured_problem(kind: ProblemKind, message: str, schema: type[BaseModel]) -> ReplyProblem:
    instruction = (
        "Your reply was cut off by the output-token limit. Reply again, shorter: only the "
        "JSON object, with brief text in each field."
        if kind == "truncated"
        else "Reply again with only one JSON object that matches the schema below, no prose "
        "and no code fence."
    )
    return ReplyProblem(kind, message, _reask(message, f"{instruction}\n\n{schema_block(schema)}"))


def read_structured(reply: RawReply, schema: type[SchemaT]) -> SchemaT | ReplyProblem:
    """The first JSON value in the reply that validates against ``schema``, or why none does.

    The content is searched first (thinking stripped), then the reasoning text, since some
    reasoning models leave the answer there when the content is empty.
    """
    sources = [strip_thinking(reply.text)]
    if reply.reasoning:
        sources.append(strip_thinking(reply.reasoning) or reply.reasoning)
    first_error: ValidationError | None = None
    saw_json = False
    for source in sources:
        for value in json_values(source):
            saw_json = True
            for form in _shapes_of(value, schema):
                try:
                    return schema.model_validate(form)
                except ValidationError as exc:
                    first_error = first_error or exc
    name = schema.__name__
    if reply.truncated:
        return _structured_problem(
            "truncated",
            f"the reply was cut off (finish_reason=length) before its {name} JSON was complete",
            schema,
        )
    if first_error is not None:
        return _structured_problem(
            "invalid_schema",
            f"the reply's JSON does not match {name}: {_validation_summary(first_error)}",
            schema,
        )
    if not any(s.strip() for s in sources):
        return _structured_problem("empty", "the reply was empty", schema)
    if saw_json or "{" in sources[0]:
        return _structured_problem(
            "invalid_json", f"the reply has no valid JSON {name} object", schema
        )
    return _structured_problem("no_json", f"the reply contains no JSON {name} object", schema)


# --- code replies -------------------------------------------------------------------------------

_FENCE_OPEN = re.compile(r"^[ \t]*(`{3,}|~{3,})[ \t]*([\w+#.-]*)[^\n]*$")
_HEADER = re.compile(r"^\s*//\s*astra:\s*entry\b", re.MULTILINE)
_ANY_HEADER = re.compile(r"^\s*//\s*astra:", re.MULTILINE)
_CODE_LANGUAGES = {"", "cuda", "cu", "c++", "cpp", "c", "cxx", "cc", "h", "hpp"}
_DIFF_LANGUAGES = {"diff", "patch", "udiff"}
_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
_HUNK_LINE = re.compile(r"^@@.*@@", re.MULTILINE)


def fenced_blocks(text: str) -> list[tuple[str, str, bool]]:
    """(language, body, closed) of each fenced block; an unclosed last fence runs to the end."""
    blocks = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        match = _FENCE_OPEN.match(lines[i])
        if not match:
            i += 1
            continue
        fence, language = match[1], match[2].lower()
        body = []
        i += 1
        while i < len(lines) and not lines[i].strip().startswith(fence):
            body.append(lines[i])
            i += 1
        blocks.append((language, "\n".join(body) + "\n", i < len(lines)))
        i += 1
    return blocks


def _unfenced_code(text: str) -> str | None:
    """Bare code with prose around it: from the header's comment block to the last ``}``."""
    lines = text.splitlines()
    first = next((i for i, line in enumerate(lines) if _ANY_HEADER.match(line)), None)
    if first is None:
        return None
    while first > 0 and lines[first - 1].strip().startswith("//"):
        first -= 1
    last = max(
        (i for i in range(first, len(lines)) if lines[i].rstrip().endswith(("}", "};"))),
        default=None,
    )
    if last is None:
        return None
    return "\n".join(lines[first : last + 1]) + "\n"


def extract_source(reply: str, *, closed_only: bool = False, bare: bool = True) -> str | None:
    """The implementation file inside a reply, or None if there is none.

    Prefers the last fenced block that has an ``// astra: entry`` header (models often revise
    within one reply), then any code block with some ``// astra:`` line, then bare code.
    ``closed_only`` (a truncated reply) takes only blocks whose closing fence arrived;
    ``bare=False`` never takes unfenced code (a reply with a diff has header lines as context).
    A block with ``@@`` hunk lines is a diff, not a file.
    """
    blocks = [
        body
        for lang, body, closed in fenced_blocks(reply)
        if lang in _CODE_LANGUAGES and (closed or not closed_only) and not _HUNK_LINE.search(body)
    ]
    with_entry = [b for b in blocks if _HEADER.search(b)]
    if with_entry:
        return with_entry[-1]
    with_header = [b for b in blocks if _ANY_HEADER.search(b)]
    if with_header:
        return max(with_header, key=len)
    if blocks and not _ANY_HEADER.search(reply):
        longest = max(blocks, key=len)
        return longest if "__global__" in longest else None
    return None if closed_only or not bare else _unfenced_code(reply)


def diff_text(reply: str) -> str | None:
    """The unified diff in a reply (a ``diff`` fence, or bare ``@@`` hunks), or None."""
    for language, body, _ in fenced_blocks(reply):
        if language in _DIFF_LANGUAGES or (language in _CODE_LANGUAGES and _HUNK_LINE.search(body)):
            return body
    if _HUNK_LINE.search(reply) and re.search(r"^[+-]", reply, re.MULTILINE):
        return reply
    return None


@dataclass(frozen=True)
class _Hunk:
    old_start: int | None
    old: list[str]
    new: list[str]


def _hunks(diff: str) -> list[_Hunk]:
    hunks: list[_Hunk] = []
    current: _Hunk | None = None
    for line in diff.splitlines():
        if line.startswith(("--- ", "+++ ", "diff ", "index ")) and (
            current is None or (not current.old and not current.new)
        ):
            continue
        if line.startswith("@@"):
            match = _HUNK.match(line)
            current = _Hunk(int(match[1]) if match else None, [], [])
            hunks.append(current)
        elif current is None:
            continue
        elif line.startswith("+"):
            current.new.append(line[1:])
        elif line.startswith("-"):
            current.old.append(line[1:])
        elif line.startswith(" ") or line == "":
            current.old.append(line[1:])
            current.new.append(line[1:])
        elif line.startswith("\\"):  # "\ No newline at end of file"
            continue
    return [h for h in hunks if h.old or h.new]


def _find(lines: list[str], block: list[str], start: int, hint: int | None) -> int | None:
    """Where ``block`` occurs in ``lines`` at or after ``start``: nearest to ``hint``, exact
    first, then ignoring trailing whitespace."""
    if not block:
        return hint if hint is not None and hint >= start else None
    for same in (
        lambda a, b: a == b,
        lambda a, b: a.rstrip() == b.rstrip(),
    ):
        spots = [
            i
            for i in range(start, len(lines) - len(block) + 1)
            if all(same(lines[i + j], block[j]) for j in range(len(block)))
        ]
        if spots:
            return min(spots, key=lambda i: abs(i - (hint or 0)))
    return None


def apply_diff(source: str, diff: str) -> str | None:
    """``source`` with the unified diff applied, or None if some hunk does not match it."""
    hunks = _hunks(diff)
    if not hunks:
        return None
    lines = source.splitlines()
    result: list[str] = []
    position = 0
    for hunk in hunks:
        hint = hunk.old_start - 1 if hunk.old_start else None
        at = _find(lines, hunk.old, position, hint)
        if at is None:
            return None
        result += lines[position:at] + hunk.new
        position = at + len(hunk.old)
    result += lines[position:]
    return "\n".join(result) + "\n"


def _code_problem(kind: ProblemKind, message: str, instruction: str) -> ReplyProblem:
    return ReplyProblem(kind, message, _reask(message, instruction))


WHOLE_FILE = (
    "Reply with the WHOLE `.cu` file, header included, in one ```cuda block; no diff, "
    "no elisions such as `// ... unchanged ...`."
)


def read_code(reply: RawReply, diff_bases: Sequence[str] = ()) -> CodeReply | ReplyProblem:
    """The implementation file in a coding reply, or why there is none.

    A whole file is preferred. A unified diff is applied to the first of ``diff_bases`` (the
    sources the author was shown, most recent first) it applies to cleanly. A truncated reply
    gives a file only if that file's fence was closed before the cut.
    """
    text = strip_thinking(reply.text) if "<think" in reply.text.lower() else reply.text
    if not text.strip():
        return _code_problem("empty", "the reply was empty", WHOLE_FILE)
    diff = diff_text(text)
    source = extract_source(text, closed_only=reply.truncated, bare=diff is None)
    if source is not None and _HEADER.search(source):
        return CodeReply(source)
    if diff is not None and not reply.truncated:
        for base in diff_bases:
            patched = apply_diff(base, diff)
            if patched is not None:
                return CodeReply(patched, from_diff=True)
        return _code_problem(
            "diff_failed",
            "the reply is a diff that does not apply cleanly to the current source",
            WHOLE_FILE,
        )
    if reply.truncated:
        return _code_problem(
            "truncated",
            "the reply was cut off (finish_reason=length) before the file was complete",
            "Your reply hit the output-token limit. " + WHOLE_FILE + " Keep prose out of the "
            "reply and keep the file compact.",
        )
    if source is not None:
        return CodeReply(source)
    return _code_problem(
        "no_code", "no CUDA source with an '// astra:' header found in the reply", WHOLE_FILE
    )
