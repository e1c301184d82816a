"""Deprecated: the adapters moved to :mod:`warrant.contrib` (``warrant.contrib.openai_agents``,
``warrant.contrib.pydantic_ai``). The old module paths re-export them, with a
``DeprecationWarning``, for one release."""

__layer__ = "client, server, CLI and stack"

import warnings
from types import ModuleType
from typing import Any


def moved(old: str, new: ModuleType, name: str) -> Any:
    """``name`` of ``new`` (the adapter's new home), warning that ``old`` is going."""
    if name not in new.__all__:
        raise AttributeError(f"module {old!r} has no attribute {name!r}")
    warnings.warn(
        f"{old} is deprecated: import {name} from {new.__name__} (the old path goes in the "
        "next release)",
        DeprecationWarning,
        stacklevel=3,
    )
    return getattr(new, name)
