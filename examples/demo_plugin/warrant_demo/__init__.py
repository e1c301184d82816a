"""The demo plug-in: a fake external payment and drafts service with fault injection
(``warrant_demo.service``) and the tools that call it, plus the benchmark tools
(``warrant_demo.tools``).

Off unless named: ``WARRANT_TOOLS=warrant_demo:plugin`` (``warrant demo``, the benchmark
and the test suite turn it on). Its tables are created by its own set-up step, never by the
ledger's migrations.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from warrant.tools import DepsContext, Plugin

__all__ = ["DEMO_RELAXED", "DemoDeps", "plugin"]

#: The demo's writes that its seed scenarios run unattended (a refund is a compensatable write,
#: a notice irreversible: both need a person's confirmation by default). The deployments that
#: run those scenarios (``warrant demo``, the chaos suite, the test suite) relax them
#: explicitly with ``WARRANT_RELAX_CONFIRMATION``; ``warrant tools list`` shows it.
DEMO_RELAXED = "issue_refund,refund_async,send_notice"


@dataclass(frozen=True)
class DemoDeps:
    """What the demo tools see as ``ctx.deps``."""

    demo: Any
    """The demo service (:class:`~warrant_demo.service.DemoService`)."""


def _deps(ctx: DepsContext) -> DemoDeps:
    from warrant_demo.service import DemoService

    return DemoDeps(demo=DemoService(ctx.engine))


def _setup(ctx: DepsContext) -> None:
    from warrant_demo.service import DemoService

    DemoService(ctx.engine).ensure_schema()


def _tools() -> tuple[Any, ...]:
    from warrant_demo.tools import DEMO_TOOLS
    from warrant_demo.tools_jobs import PAYOUT_BATCH, REFUND_ASYNC

    return (*DEMO_TOOLS, REFUND_ASYNC, PAYOUT_BATCH)


plugin = Plugin(name="demo", tools=_tools(), deps=_deps, setup=_setup)
