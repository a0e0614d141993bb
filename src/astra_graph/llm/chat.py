"""The chat model and one agent call's reply: ``ChatOpenAI`` that keeps the reasoning text,
the reply's text as the pipeline reads it, and :class:`Reply` (value or problem, tokens,
requests, the structured-output method) with its usage record.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Generic, Literal, TypeVar

from langchain_core.messages import AIMessage
from langchain_openai import ChatOpenAI

from astra_graph.llm.replies import RawReply
from astra_graph.llm.settings import estimate_cost
from astra_graph.llm.usage import AgentName, Usage

StructuredMethod = Literal["json_schema", "function_calling", "json_mode", "text"]
ValueT = TypeVar("ValueT")


class ChatModel(ChatOpenAI):
    """``ChatOpenAI`` that keeps the ``reasoning_content`` (or ``reasoning``) field that vLLM,
    SGLang, DeepSeek and others put beside the content; the base class drops it."""

    def _create_chat_result(self, response: Any, generation_info: dict | None = None) -> Any:
        result = super()._create_chat_result(response, generation_info)
        data = response if isinstance(response, dict) else response.model_dump()
        for generation, choice in zip(result.generations, data.get("choices") or [], strict=False):
            message = choice.get("message") or {}
            reasoning = message.get("reasoning_content") or message.get("reasoning")
            if isinstance(reasoning, str) and reasoning:
                generation.message.additional_kwargs["reasoning_content"] = reasoning
        return result


def message_text(message: AIMessage) -> str:
    """The text of a reply, whether ``content`` is a string or a list of content blocks."""
    if isinstance(message.content, str):
        return message.content
    parts = []
    for block in message.content:
        if isinstance(block, str):
            parts.append(block)
        elif isinstance(block, dict) and block.get("type") == "text":
            parts.append(str(block.get("text", "")))
    return "".join(parts)


def raw_reply(message: AIMessage) -> RawReply:
    """The reply as the pipeline reads it: a tool call's arguments if there is one, else the
    content; the finish reason; the reasoning text."""
    text = message_text(message)
    if message.tool_calls:
        text = json.dumps(message.tool_calls[0]["args"])
    elif message.invalid_tool_calls:
        text = str(message.invalid_tool_calls[0].get("args") or text)
    reasoning = message.additional_kwargs.get("reasoning_content")
    return RawReply(
        text=text,
        finish_reason=message.response_metadata.get("finish_reason"),
        reasoning=reasoning if isinstance(reasoning, str) else None,
    )


@dataclass
class Reply(Generic[ValueT]):
    """One agent call: the value or a one-line problem, its tokens (every reply the server
    billed, usable or not), the requests made and the structured-output method used."""

    value: ValueT | None
    problem: str | None
    model: str
    input_tokens: int = 0
    output_tokens: int = 0
    requests: int = 0
    method: StructuredMethod | None = None
    endpoint: str | None = None
    notes: list[str] = field(default_factory=list)
    """How the method was found: the methods the server refused, and its answers."""
    raw: RawReply | None = None

    def usage(self, agent: AgentName, round_number: int) -> Usage:
        return Usage(
            agent=agent,
            round=round_number,
            model=self.model,
            input_tokens=self.input_tokens,
            output_tokens=self.output_tokens,
            cost_usd=estimate_cost(self.model, self.input_tokens, self.output_tokens),
            method=self.method,
            endpoint=self.endpoint if self.method else None,
            failure=self.problem,
            requests=self.requests,
            failed_calls=1 if self.problem else 0,
            notes=self.notes,
        )
