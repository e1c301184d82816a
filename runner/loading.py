"""Importing what the deployment's settings name (``module:attr``): tools, deps factories,
planner kinds. Only settings and installed packages are ever imported, never a run spec."""

from __future__ import annotations

import importlib
from typing import Any

from warrant.runner.errors import PluginError

__all__ = ["load_object"]


def load_object(ref: str) -> Any:
    """Import ``module:attr`` (``attr`` may be dotted); :class:`PluginError` if it cannot."""
    module_name, sep, attr = ref.strip().partition(":")
    if not sep or not module_name or not attr:
        raise PluginError(f"{ref!r} is not of the form module:attr", code="PLUGIN_LOAD_FAILED")
    try:
        obj: Any = importlib.import_module(module_name)
        for part in attr.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError) as exc:
        raise PluginError(f"cannot load {ref!r}: {exc}", code="PLUGIN_LOAD_FAILED") from exc
    return obj
