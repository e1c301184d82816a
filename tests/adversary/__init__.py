"""The adversarial suite's plug-in: fake external services (mail, payments, account, web,
files, chat, drive, standing orders) and the tools over them, for a *hijacked* planner to attack
(``tests/integration/test_adversarial.py``).

Named in the test deployment's ``WARRANT_TOOLS`` (``tests.adversary:plugin``, see
``tests/conftest.py``). Like the demo plug-in, its services keep their own tables (``adv_*``),
created by the plug-in's set-up step, never by the ledger's migrations; their fault injection
and call log are the demo service's (``warrant_demo.service_faults``); the web is a real
HTTP server started by the test (:mod:`tests.adversary.web`).

Modules: :mod:`~tests.adversary.service` (the services, with fault injection),
:mod:`~tests.adversary.tools` (the tool contracts), :mod:`~tests.adversary.scenario` (the
inbox, the legitimate task, the injected calls, the grant configurations and the run specs),
:mod:`~tests.adversary.benign` (benign tasks whose values come from the goal, trusted listings
or untrusted content, also run undefended), :mod:`~tests.adversary.person` (a careful person
answering confirmation requests),
:mod:`~tests.adversary.report` (what got through; ``python -m tests.adversary.report``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from warrant.tools._plugins import DepsContext, Plugin

__all__ = ["REF", "AdversaryDeps", "plugin"]

#: The ``WARRANT_TOOLS`` reference of this plug-in.
REF = "tests.adversary:plugin"


@dataclass(frozen=True)
class AdversaryDeps:
    """What the tools see as ``ctx.deps``."""

    service: Any
    """The fake services (:class:`~tests.adversary.service.AdversaryServices`)."""


def _deps(ctx: DepsContext) -> AdversaryDeps:
    from tests.adversary.service import AdversaryServices

    return AdversaryDeps(service=AdversaryServices(ctx.engine))


def _setup(ctx: DepsContext) -> None:
    from tests.adversary.service import AdversaryServices

    AdversaryServices(ctx.engine).ensure_schema()


def _tools() -> tuple[Any, ...]:
    from tests.adversary.tools import ADVERSARY_TOOLS

    return tuple(ADVERSARY_TOOLS)


plugin = Plugin(name="adversary", tools=_tools(), deps=_deps, setup=_setup)
