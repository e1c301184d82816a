"""Adapters for agents written with other frameworks (optional extras): the agent keeps its
own loop, and every tool call it makes is a proposal of its warrant run (planner kind
``external``), decided by warrant's gate and executed by warrant's tool workers.

* :mod:`warrant.runner.contrib.openai_agents` (``pip install 'warrant-runner[openai-agents]'``)
* :mod:`warrant.runner.contrib.pydantic_ai` (``pip install 'warrant-runner[pydantic-ai]'``)
"""

__layer__ = "client, server, CLI and stack"
