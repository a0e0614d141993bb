"""Talking to models: the chat client (settings, errors, structured-output probing, preflight),
reading replies, prompt files, external (human or outside-agent) answers, and token usage.

May import: ``kernel``, ``store``, ``harness.results`` (data only), LangChain and its OpenAI
client. Never the GPU harness's machinery, the graph or the run layer.
"""
