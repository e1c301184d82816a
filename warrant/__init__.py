"""warrant: a message-queue based distributed runner for controlled LLM agents.

One import namespace for the design card's folders: ``warrant.runner`` (the domain, the
client and the CLI), ``warrant.tools`` (the tool contract, the registry, built-in tools),
``warrant.broker`` (Celery app, queues, worker roles) and ``warrant.ledger`` (the PostgreSQL
ledger). The public API of :mod:`warrant.runner` is re-exported here.
"""

from __future__ import annotations

from importlib import metadata as _metadata
from typing import Any

try:
    __version__ = _metadata.version("warrant-runner")
except _metadata.PackageNotFoundError:  # pragma: no cover - running from an unbuilt tree
    __version__ = "0+unknown"


def __getattr__(name: str) -> Any:
    from warrant import runner

    if name in runner.__all__:
        return getattr(runner, name)
    raise AttributeError(f"module 'warrant' has no attribute {name!r}")
