"""The builds of a rolling upgrade, for the ``rolling-upgrade`` scenario: the demo plug-in
with ``issue_refund`` at version 1 only (the old build), at 2 only (a new build that dropped
1), and at both (what the control host, and an upgraded host that still serves 1, have).
Version 2 is version 1's tool under a new version number: the same service, token and
reconciliation, so the checker's counts mean the same for both."""

from __future__ import annotations

import dataclasses

from warrant_demo import plugin as demo

from warrant.tools._plugins import Plugin

__all__ = ["both", "v2_only"]

_REFUND_V1 = next(t for t in demo.tools if t.name == "issue_refund")
_REFUND_V2 = dataclasses.replace(_REFUND_V1, version="2")
_OTHERS = tuple(t for t in demo.tools if t.name != "issue_refund")

#: A new build with ``issue_refund`` 2 only.
v2_only = dataclasses.replace(demo, tools=(*_OTHERS, _REFUND_V2))
#: ``issue_refund`` 1 and 2.
both: Plugin = dataclasses.replace(demo, tools=(*_OTHERS, _REFUND_V1, _REFUND_V2))
