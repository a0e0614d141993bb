"""Errors as one line: what failed and what the server said, whether a server refused a
request parameter (as opposed to failing the request), and the line for a run in which every
model call failed.

A method counts as refused when the server answers it with 400, 415, 422 or 501 and the message
is not a context-length complaint.
"""

from __future__ import annotations

from collections.abc import Iterable

import openai

from astra_graph.llm.usage import Usage

REFUSAL_STATUSES = frozenset({400, 415, 422, 501})
"""Statuses with which servers refuse a request parameter they do not support."""
_CONTEXT_WORDS = ("context length", "context window", "maximum context", "too many tokens")


def _squash(text: str, limit: int = 300) -> str:
    return " ".join(text.split())[:limit]


def server_message(exc: openai.APIStatusError) -> str:
    """The server's own error message, not the SDK's wrapping of it."""
    body = exc.body
    if isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, dict) and inner.get("message"):
            return _squash(str(inner["message"]))
        if isinstance(inner, str):
            return _squash(inner)
    return _squash(exc.message)


def _root_cause(exc: BaseException) -> str:
    """What went wrong underneath a connection error: the SDK wraps the transport's error
    ("Server disconnected without sending a response.") and langchain-openai wraps the SDK's
    ("Connection error."), so the innermost message is the one that says something."""
    seen = {id(exc)}
    inner: BaseException = exc
    while True:
        cause = inner.__cause__ or inner.__context__
        if cause is None or id(cause) in seen:
            break
        seen.add(id(cause))
        inner = cause
    return _squash(str(inner)) or type(inner).__name__


def describe_error(exc: BaseException, endpoint: str) -> str:
    """One line: what failed and what the server said."""
    if isinstance(exc, openai.APIStatusError):
        return f"HTTP {exc.status_code} from {endpoint}: {server_message(exc)}"
    if isinstance(exc, openai.APITimeoutError):
        return f"no answer from {endpoint} in time (timeout)"
    if isinstance(exc, openai.APIConnectionError):
        return f"cannot connect to {endpoint}: {_root_cause(exc)}"
    return f"{type(exc).__name__}: {_squash(str(exc)) or 'no message'}"


def refuses_method(exc: BaseException) -> bool:
    """The server refused a request parameter (as opposed to failing the request)."""
    if not isinstance(exc, openai.APIStatusError) or exc.status_code not in REFUSAL_STATUSES:
        return False
    message = server_message(exc).lower()
    return not any(word in message for word in _CONTEXT_WORDS)


def every_call_failed(usage: Iterable[Usage]) -> str | None:
    """When no LLM call of a run gave a usable reply: one line naming the last failure."""
    calls = list(usage)
    if not calls or any(u.failed_calls < u.calls for u in calls):
        return None
    return f"every LLM call failed ({len(calls)} calls); the last: {calls[-1].failure}"
