"""``warrant demo``: the stack of ``warrant up`` with the demo plug-in and its seed scenarios
(the Python client and the scenarios, loaded only for this command)."""

from __future__ import annotations

import os
import signal

import typer

from warrant.runner.cli.common import EXIT_FAILED, JsonOpt, console
from warrant.runner.cli.stack import _raise_on_sigterm, _stack
from warrant.runner.settings import load_settings
from warrant.runner.stack.demo import run_demo
from warrant.tools.demo import DEMO_RELAXED
from warrant.tools.plugins import DEMO_PLUGIN, split_refs

__all__ = ["demo"]


def demo(as_json: JsonOpt = False) -> None:
    """Start the stack with the demo plug-in, run the seed scenarios, print a table, stop."""
    refs = split_refs(os.environ.get("WARRANT_TOOLS", ""))
    if DEMO_PLUGIN not in refs:  # the demo's tools are a plug-in, off unless named
        os.environ["WARRANT_TOOLS"] = ",".join([*refs, DEMO_PLUGIN])
    # The seed scenarios refund and notify unattended: relaxed explicitly, and said so.
    os.environ.setdefault("WARRANT_RELAX_CONFIRMATION", DEMO_RELAXED)
    if not as_json:
        relaxed = os.environ["WARRANT_RELAX_CONFIRMATION"]
        console.print(
            f"[yellow]confirmation relaxed for: {relaxed}[/] (WARRANT_RELAX_CONFIRMATION)"
        )

    _raise_on_sigterm()
    # the environment changed above: the settings are read again, with the demo's tools
    stack = _stack(load_settings(), as_json)
    try:
        ok = run_demo(as_json=as_json, console=console)
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        stack.stop()
    if not ok:
        raise typer.Exit(EXIT_FAILED)
