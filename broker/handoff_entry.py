"""Entering a handoff: the bundle (the ledger's one read, :func:`warrant.ledger.rows.
handoff_bundle`), the handoff row, the run moved to ``handoff``."""

from __future__ import annotations

import time
from typing import Any

from sqlalchemy.orm import Session

from warrant.ledger import rows as evidence
from warrant.ledger.models import Run
from warrant.ledger.repo import commit, run_view
from warrant.runner import run_machine as machine
from warrant.tools._registry import Registry

__all__ = ["enter_handoff"]


def enter_handoff(
    s: Session,
    run: Run,
    *,
    reason: str,
    registry: Registry,
    events: list[tuple[str, dict[str, Any]]] | None = None,
    late_effect: bool = False,
) -> str:
    """Build the bundle and move ``run`` (locked by the caller) to ``handoff``. A run that
    had already ended is reopened only for ``late_effect`` (an effect found after its end)."""
    facts = evidence.BundleFacts(now=time.time())
    bundle = evidence.handoff_bundle(s, run, reason=reason, registry=registry, facts=facts)
    handoff_id = evidence.add_handoff(s, run.id, reason=reason, bundle=bundle)
    view = run_view(run)
    if late_effect and view.status.terminal:
        change = machine.reopen_for_late_effect(view, handoff_id=handoff_id, events=events or [])
    else:
        change = machine.hand_off(view, handoff_id=handoff_id, reason=reason, events=events or [])
    commit(s, change, step=run.step)
    return handoff_id
