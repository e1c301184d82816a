"""Adapters for agents written with other frameworks (optional extras): the agent keeps its
own loop, and every tool call it makes is a proposal of its warrant run (planner kind
``external``), decided by warrant's gate and executed by warrant's tool workers.

* :mod:`warrant.contrib.openai_agents` (``pip install 'warrant-runner[openai-agents]'``)
* :mod:`warrant.contrib.pydantic_ai` (``pip install 'warrant-runner[pydantic-ai]'``)

This folder lives in ``warrant/`` itself (not a link like ``warrant/runner``); the layering
lint scans it with the four (``tests/lint/architecture.py``).
"""

__layer__ = "client, server, CLI and stack"
