"""A test tool whose business effect key counts across runs: ``refund_daily`` is the demo's
``issue_refund`` (the same payment service, counted by ``DemoService.refund_count``) with
``effect_window_s`` of an hour. Registered with ``WARRANT_TOOLS=...,tests.effect_tool:plugin``;
the session's pipeline worker serves its queue."""

from __future__ import annotations

import dataclasses

import warrant_demo
from warrant_demo.tools import ISSUE_REFUND

from warrant.tools import Plugin

__all__ = ["REFUND_DAILY", "WINDOW_S", "plugin"]

#: How long an earlier refund of an order refuses another, in any run.
WINDOW_S = 3600.0

REFUND_DAILY = dataclasses.replace(
    ISSUE_REFUND,
    name="refund_daily",
    description="Refund an order at most once an hour, whichever run asks.",
    effect_window_s=WINDOW_S,
)

plugin = Plugin(name="effects", tools=(REFUND_DAILY,), deps=warrant_demo.plugin.deps)
