"""``warrant demo``: the stack of ``warrant up`` with the demo plug-in and its seed scenarios.
The demo is a distribution of its own (``examples/demo_plugin``, package ``warrant_demo``),
loaded only for this command."""

from __future__ import annotations

import os
import signal
from typing import Any

import typer

from warrant.runner.cli.common import EXIT_FAILED, JsonOpt, console, guard
from warrant.runner.cli.stack import _raise_on_sigterm, _stack
from warrant.runner.errors import PluginError
from warrant.runner.settings import load_settings
from warrant.tools._plugins import DEMO_PLUGIN, split_refs

__all__ = ["demo"]


def demo(as_json: JsonOpt = False) -> None:
    """Start the stack with the demo plug-in, run the seed scenarios, print a table, stop."""
    demo_plugin = guard(as_json, _demo_distribution)
    refs = split_refs(os.environ.get("WARRANT_TOOLS", ""))
    if DEMO_PLUGIN not in refs:  # the demo's tools are a plug-in, off unless named
        os.environ["WARRANT_TOOLS"] = ",".join([*refs, DEMO_PLUGIN])
    # The seed scenarios refund and notify unattended: relaxed explicitly, and said so.
    os.environ.setdefault("WARRANT_RELAX_CONFIRMATION", demo_plugin.DEMO_RELAXED)
    if not as_json:
        relaxed = os.environ["WARRANT_RELAX_CONFIRMATION"]
        console.print(
            f"[yellow]confirmation relaxed for: {relaxed}[/] (WARRANT_RELAX_CONFIRMATION)"
        )

    _raise_on_sigterm()
    # the environment changed above: the settings are read again, with the demo's tools
    stack = _stack(load_settings(), as_json)
    try:
        ok = demo_plugin.run.run_demo(as_json=as_json, console=console)
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        stack.stop()
    if not ok:
        raise typer.Exit(EXIT_FAILED)


def _demo_distribution() -> Any:
    """The demo distribution's package, ``warrant_demo`` (its ``run`` loaded), or
    ``DEMO_NOT_INSTALLED``."""
    try:
        import warrant_demo.run  # lazy: optional dependency (the demo distribution)
    except ModuleNotFoundError as exc:
        if (exc.name or "").partition(".")[0] != "warrant_demo":
            raise
        raise PluginError(
            "the demo is a distribution of its own, warrant-demo, and it is not installed: "
            "pip install -e examples/demo_plugin (make install and make demo do)",
            code="DEMO_NOT_INSTALLED",
        ) from exc
    return warrant_demo
