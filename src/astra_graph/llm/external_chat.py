"""The one place where an agent's model call becomes a LangGraph ``interrupt()``.

:class:`ExternalChat` is a ``ChatOpenAI`` whose server is whoever answers the interrupt. When
the agent invokes it (plain text, or ``with_structured_output``), ``_generate`` builds the
exact request payload ``ChatOpenAI`` would send, raises ``interrupt()`` with a
:class:`~astra_graph.llm.external.Question` made from it (messages, and for structured replies the
JSON schema and an example), and the run stops. When the run is resumed with
``Command(resume=answer)``, the node runs again, ``interrupt()`` returns the answer, and the
answer is served to ``ChatOpenAI``'s own client as an OpenAI chat completion from an in-process
transport (no socket). Everything after that (the openai SDK's parsing of structured output,
langchain's parsers, the agent's extraction, validation and repair) is the code a model's reply
goes through: an external answer cannot take a shortcut around it.

An answer is text; a JSON value (as Studio may send for a structured reply) is serialised.
It reports no tokens, so usage shows the call with zero tokens and zero cost.
"""

from __future__ import annotations

import json
from contextvars import ContextVar
from typing import Any

import httpx
from langchain_core.callbacks import AsyncCallbackManagerForLLMRun, CallbackManagerForLLMRun
from langchain_core.messages import BaseMessage
from langchain_core.outputs import ChatResult
from langchain_openai import ChatOpenAI
from langgraph.types import interrupt
from pydantic import BaseModel

from astra_graph.llm.external import (
    EXTERNAL,
    Message,
    Question,
    ReplyKind,
    example_from_schema,
    how_to_answer,
)

SERVED_URL = "http://external.astra.invalid/v1"
"""The base URL the client believes it talks to; the in-process transport answers every call."""

_ANSWER: ContextVar[str | None] = ContextVar("astra_external_answer", default=None)


def answer_text(answer: Any) -> str:
    """The reply text of a resume value: a string as it is, anything else as JSON."""
    return answer if isinstance(answer, str) else json.dumps(answer)


def _schema_of(response_format: Any) -> dict[str, Any] | None:
    """The JSON schema inside an OpenAI ``response_format`` (a dict or a Pydantic class)."""
    if isinstance(response_format, type) and issubclass(response_format, BaseModel):
        return response_format.model_json_schema()
    if isinstance(response_format, dict):
        inner = response_format.get("json_schema", {})
        schema = inner.get("schema") if isinstance(inner, dict) else None
        return schema if isinstance(schema, dict) else None
    return None


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            str(part.get("text", "")) if isinstance(part, dict) else str(part) for part in content
        )
    return json.dumps(content)


def question_from_payload(agent: str, payload: dict[str, Any]) -> Question:
    """The request a model would have received, as the question to ask outside."""
    schema = _schema_of(payload.get("response_format"))
    reply: ReplyKind = "structured" if schema is not None else "text"
    return Question(
        agent=agent,
        reply=reply,
        messages=[
            Message(role=str(m.get("role", "")), content=_content_text(m.get("content")))
            for m in payload.get("messages", [])
        ],
        response_schema=schema,
        example=example_from_schema(schema) if schema is not None else None,
        how_to_answer=how_to_answer(reply),
    )


def _serve(request: httpx.Request) -> httpx.Response:
    """The in-process 'server': the current answer as an OpenAI chat completion."""
    answer = _ANSWER.get()
    if answer is None:  # only reachable if something calls the client outside _generate
        return httpx.Response(500, json={"error": {"message": "no external answer to serve"}})
    body = json.loads(request.content or b"{}")
    return httpx.Response(
        200,
        json={
            "id": "chatcmpl-external",
            "object": "chat.completion",
            "created": 0,
            "model": body.get("model", EXTERNAL),
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": answer},
                    "finish_reason": "stop",
                }
            ],
            "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0},
        },
    )


class ExternalChat(ChatOpenAI):
    """A chat model for one agent whose replies come from ``interrupt()``."""

    agent: str = ""

    @classmethod
    def for_agent(cls, agent: str) -> ExternalChat:
        return cls(
            model=EXTERNAL,
            agent=agent,
            api_key="not-needed",
            base_url=SERVED_URL,
            max_retries=0,
            disable_streaming=True,  # the answer comes whole; _generate is the one path
            http_client=httpx.Client(transport=httpx.MockTransport(_serve)),
            http_async_client=httpx.AsyncClient(transport=httpx.MockTransport(_serve)),
        )

    def _ask(self, messages: list[BaseMessage], stop: list[str] | None, **kwargs: Any) -> str:
        """The interrupt: the request ``ChatOpenAI`` would send, as a question; its answer."""
        payload = self._get_request_payload(messages, stop=stop, **kwargs)
        return answer_text(interrupt(question_from_payload(self.agent, payload).model_dump()))

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        token = _ANSWER.set(self._ask(messages, stop, **kwargs))
        try:
            return super()._generate(messages, stop=stop, run_manager=run_manager, **kwargs)
        finally:
            _ANSWER.reset(token)

    async def _agenerate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        """As ``_generate``; ``interrupt()`` needs the graph's run context (a LangGraph node)."""
        token = _ANSWER.set(self._ask(messages, stop, **kwargs))
        try:
            return await super()._agenerate(messages, stop=stop, run_manager=run_manager, **kwargs)
        finally:
            _ANSWER.reset(token)
