"""Deprecated: moved to :mod:`warrant.contrib.openai_agents` (a ``DeprecationWarning`` on use;
this path goes in the next release)."""

from typing import Any

from warrant.contrib import openai_agents as _new
from warrant.runner.contrib import moved

__all__ = ["WarrantTools"]  # noqa: F822 (served by __getattr__, with the warning)


def __getattr__(name: str) -> Any:
    return moved(__name__, _new, name)
