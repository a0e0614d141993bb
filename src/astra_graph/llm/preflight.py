"""Checking a model endpoint before a run starts (:func:`preflight`): a well-formed URL, a
server that answers, a key it accepts and a model it serves; any failure is one line naming
the flag (``--base-url``, ``--model``, ``--agent-model``) or the key variable.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from urllib.parse import urlparse

import openai

from astra_graph.llm.errors import REFUSAL_STATUSES, describe_error, server_message
from astra_graph.llm.settings import (
    API_KEY_VARIABLES,
    PLACEHOLDER_KEY,
    LLMSettings,
    api_key,
    served_models,
)
from astra_graph.llm.usage import AgentName

PREFLIGHT_TIMEOUT_S = 20.0
"""How long preflight waits for each answer: a reachable server answers /models at once."""


class EndpointError(ValueError):
    """The model endpoint cannot serve this run; the message names the flag and the answer."""


def _url_problem(url: str) -> str | None:
    parsed = urlparse(url)
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        return (
            f"--base-url {url!r}: expected an http:// or https:// URL such as http://host:8000/v1"
        )
    try:
        _ = parsed.port
    except ValueError as exc:
        return f"--base-url {url!r}: {exc}"
    return None


def _key_source() -> str:
    for name in API_KEY_VARIABLES:
        if os.environ.get(name, "").strip():
            return name
    return "OPENAI_API_KEY (none set)"


def preflight(settings: LLMSettings, agents: Iterable[AgentName]) -> None:
    """Check the endpoint before a run starts; raise EndpointError with one line if it cannot
    serve: a malformed URL, no answer, a refused key, or a model it does not serve.

    ``/models`` answers the first three at once; a model it does not list is tried with a
    one-token request, since some servers (llama.cpp) answer to any model name.
    """
    models = served_models(settings, agents)
    if not models:
        return  # every agent is answered outside: no endpoint to check
    endpoint = settings.endpoint()
    flag = "--base-url " + endpoint if settings.base_url else f"the OpenAI API ({endpoint})"
    if settings.base_url and (problem := _url_problem(settings.base_url)):
        raise EndpointError(problem)
    client = openai.OpenAI(
        base_url=endpoint,
        api_key=api_key() or PLACEHOLDER_KEY,
        max_retries=1,
        timeout=PREFLIGHT_TIMEOUT_S,
    )
    with client:
        served: list[str] | None = None
        try:
            served = [m.id for m in client.models.list()]
        except (openai.AuthenticationError, openai.PermissionDeniedError) as exc:
            raise EndpointError(
                f"{_key_source()}: {flag} refused the key: {describe_error(exc, endpoint)}"
            ) from None
        except openai.APIStatusError:
            served = None  # no /models on this server: the one-token request decides
        except openai.APIConnectionError as exc:
            raise EndpointError(f"{flag}: {describe_error(exc, endpoint)}") from None
        except Exception:  # an answer that is not an OpenAI model list (an HTML page, ...)
            served = None
        for model in models:
            if served is not None and model in served:
                continue
            option = "--model" if model == settings.model else "--agent-model"
            _probe(client, f"{option} {model}", model, flag, served)


def _probe(
    client: openai.OpenAI, option: str, model: str, flag: str, served: list[str] | None
) -> None:
    """A one-token request: does the server answer for ``model``?"""
    endpoint = str(client.base_url).rstrip("/")
    try:
        client.chat.completions.create(
            model=model, messages=[{"role": "user", "content": "Say OK."}], max_tokens=1
        )
    except (openai.AuthenticationError, openai.PermissionDeniedError) as exc:
        raise EndpointError(
            f"{_key_source()}: {flag} refused the key: {describe_error(exc, endpoint)}"
        ) from None
    except openai.APIStatusError as exc:
        message = server_message(exc).lower()
        if exc.status_code == 404 and "model" not in message and served is None:
            raise EndpointError(  # neither /models nor /chat/completions exist there
                f"{flag}: no OpenAI-compatible API at this URL (POST /chat/completions: "
                f"{describe_error(exc, endpoint)}); most servers serve it under /v1"
            ) from None
        if exc.status_code == 404 or (exc.status_code in REFUSAL_STATUSES and "model" in message):
            listed = f" (it serves: {', '.join(served[:8])})" if served else ""
            raise EndpointError(
                f"{option}: not served by {endpoint}{listed}: {describe_error(exc, endpoint)}"
            ) from None
        if exc.status_code not in (400, 422):  # 400/422: a parameter it dislikes, model known
            raise EndpointError(f"{flag}: {describe_error(exc, endpoint)}") from None
    except Exception as exc:  # no connection, or an answer that is not a chat completion
        raise EndpointError(f"{flag}: {describe_error(exc, endpoint)}") from None
