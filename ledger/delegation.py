"""Sub-runs in the ledger: a ``delegate`` call's child started, followed and settled.

What the built-in ``delegate`` tool sees as ``ctx.deps.runs``:

* :meth:`SubRuns.spawn` starts the child in one transaction under the parent's row lock: the
  terms checked again on the ledger's state (:func:`warrant.runner.delegation.terms`), the child
  recorded like any run (its ``run.created`` names its parent and its grants), its budgets and
  grant uses reserved from the parent's counters, ``run.delegated`` on the parent's trace. The
  child is keyed by the command's idempotency token: a repeat of the call finds the same child.
* :meth:`SubRuns.settle`, asked by the reconciler's job poll, says whether the child has ended;
  the first time it has, the parent gets back what the child did not use (once: ``settled``),
  the child's tool calls are added to the parent's per-tool counts, and ``run.child_ended``
  goes on the parent's trace.
* :meth:`SubRuns.cancel` cancels a child (a parent cancelled, a wait past its bounds).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

from sqlalchemy import Engine, select, update
from sqlalchemy.orm import Session

from warrant.ledger.db import session_scope
from warrant.ledger.models import GrantRow, Observation, Run, TraceRecord
from warrant.ledger.operator import cancel_locked, database_now, lock_run
from warrant.ledger.repo import append_events, run_view
from warrant.ledger.runs_create import create_from_spec
from warrant.ledger.stage_loads import grant_views
from warrant.runner import delegation, routing
from warrant.runner.codes import ObservationSource, RunStatus
from warrant.runner.costs import check_priced
from warrant.runner.errors import SpecError, ToolRejected
from warrant.runner.settings import load_settings
from warrant.runner.spec import parse_run_spec
from warrant.tools._builtin import DelegateOutput

__all__ = ["SubRuns", "children_of", "children_shown", "parent_shown"]

_KEY_PREFIX = "delegate:"


class SubRuns:
    """A worker process's handle on sub-runs (``ctx.deps.runs`` of the ``delegate`` tool)."""

    def __init__(
        self,
        engine: Engine,
        *,
        kinds: delegation.ScopeKinds | None = None,
        publish: Callable[[str], None] | None = None,
        revoke: Callable[[str, bool], None] | None = None,
    ) -> None:
        self.engine = engine
        self._kinds = kinds or (lambda _capability: frozenset({None}))
        self._publish = publish
        self._revoke = revoke

    def spawn(
        self, *, parent_run_id: str, command_id: str, token: str, request: delegation.Request
    ) -> str:
        """The child of this call (started now, or found again by the call's token); its
        first planner message is published after the commit."""
        key = _KEY_PREFIX + token
        with session_scope(self.engine) as s:
            parent = lock_run(s, parent_run_id)
            if parent is None:
                raise ToolRejected("the parent run is gone", code="RUN_NOT_FOUND")
            known = s.scalars(select(Run.id).where(Run.idempotency_key == key)).first()
            child_id = known or self._start(
                s, parent, command_id=command_id, key=key, request=request
            )
        if self._publish is not None:
            self._publish(child_id)  # again for a child found: a duplicate message does nothing
        return child_id

    def _start(
        self,
        s: Session,
        parent: Run,
        *,
        command_id: str,
        key: str,
        request: delegation.Request,
    ) -> str:
        if RunStatus(parent.status).terminal or parent.status == RunStatus.CANCELLING:
            raise ToolRejected(f"the parent run is {parent.status}", code="RUN_FINISHED")
        branch = routing.branch_problem((parent.spec or {}).get("planner"), request)
        if branch is not None:
            raise ToolRejected(branch, code="PROPOSAL_INVALID")
        terms = delegation.terms(
            request,
            parent=run_view(parent),
            grants=grant_views(s, parent.id),
            run_policy=(parent.spec or {}).get("policy") or {},
            kinds=self._kinds,
            now=database_now(s),
            counted=True,
        )
        if isinstance(terms, delegation.Refusal):
            raise ToolRejected(terms.message, code=terms.code)
        try:
            spec = parse_run_spec(terms.spec)
            check_priced(spec, load_settings().model_prices)  # as a producer's start does
        except SpecError as exc:
            raise ToolRejected(str(exc), code="SPEC_INVALID") from None
        child_id = str(uuid.uuid4())
        reserved = terms.reserved.as_json()
        named = {
            "parent_run_id": parent.id,
            "parent_command_id": command_id,
            "grants": [g.model_dump(mode="json", exclude_none=True) for g in spec.grants],
            "max_delegation_depth": terms.depth,
            "route": getattr(request, "route", None),
        }
        _record_child(s, child_id, spec, key=key, parent=parent, named=named)
        s.execute(
            update(Run)
            .where(Run.id == child_id)
            .values(
                parent_run_id=parent.id,
                delegation={
                    "parent_command_id": command_id,
                    "reserved": reserved,
                    "route": getattr(request, "route", None),
                },
            )
        )
        _reserve(s, parent, terms.reserved)
        event = ("run.delegated", {"child_run_id": child_id, "command_id": command_id, **reserved})
        append_events(s, parent.id, [event], step=parent.step)
        return child_id

    def settle(self, child_run_id: str) -> dict[str, Any] | None:
        """``None`` while the child runs (or waits for a person); once it has ended, what the
        parent observes (:class:`~warrant.runner.delegation.DelegateOutput`), the unused
        reservation given back the first time."""
        with session_scope(self.engine) as s:
            child = lock_run(s, child_run_id)
            if child is None:
                return None
            if not RunStatus(child.status).terminal:
                return None
            terms = dict(child.delegation or {})
            if "output" in terms:
                return dict(terms["output"])
            output = _output(s, child)
            parent = lock_run(s, child.parent_run_id) if child.parent_run_id else None
            if parent is not None:
                returned = _give_back(s, parent, child, terms.get("reserved") or {})
                ended = {k: v for k, v in output.items() if k != "answer"}  # the observation has it
                event = ("run.child_ended", {**ended, "returned": returned})
                append_events(s, parent.id, [event], step=parent.step)
            terms["output"] = output
            child.delegation = terms
            return output

    def cancel(self, child_run_id: str, *, by: str = "parent") -> None:
        """Cancel the child as any cancel does: the ledger's flag, then (after the commit) the
        revoke of its queued messages and its tool call in flight. Nothing if it has ended."""
        with session_scope(self.engine) as s:
            child = lock_run(s, child_run_id)
            if child is None:
                return
            status = RunStatus(child.status)
            if status.terminal or status in (RunStatus.CANCELLING, RunStatus.HANDOFF):
                return
            why = "its parent was cancelled, or its step no longer needs it"
            in_flight = cancel_locked(s, child.id, child, status, by=by, reason=why)
        if self._revoke is not None:
            self._revoke(child_run_id, in_flight)

    def children(self, run_id: str) -> list[str]:
        with session_scope(self.engine) as s:
            return children_of(s, run_id)


def children_of(s: Session, run_id: str) -> list[str]:
    """The runs ``run_id`` started, oldest first."""
    q = select(Run.id).where(Run.parent_run_id == run_id).order_by(Run.created_at, Run.id)
    return list(s.scalars(q))


def children_shown(s: Session, run_id: str) -> list[dict[str, Any]]:
    """The runs ``run_id`` started, oldest first, as ``run show`` lists them."""
    q = (
        select(Run.id, Run.status, Run.stop_reason, Run.delegation)
        .where(Run.parent_run_id == run_id)
        .order_by(Run.created_at, Run.id)
    )
    return [
        {
            "run_id": child_id,
            "status": status,
            "stop_reason": reason,
            "route": (terms or {}).get("route"),
        }
        for child_id, status, reason, terms in s.execute(q)
    ]


def parent_shown(s: Session, run: Run) -> dict[str, Any] | None:
    """A sub-run's parent as the inbox shows it beside the sub-run's request: its id and goal,
    and the route a router took (``None`` for a run a producer started)."""
    if not run.parent_run_id:
        return None
    parent = s.get(Run, run.parent_run_id)
    route = (run.delegation or {}).get("route")
    goal = parent.goal if parent is not None else None
    return {"run_id": run.parent_run_id, "goal": goal, "route": route}


def _record_child(
    s: Session, child_id: str, spec: Any, *, key: str, parent: Run, named: dict[str, Any]
) -> None:
    create_from_spec(
        s.connection(),
        run_id=child_id,
        spec=spec,
        trace_id=parent.trace_id,
        named=named,
        idempotency_key=key,
        started_by=f"run:{parent.id}",
    )


def _reserve(s: Session, parent: Run, reserved: delegation.Reservation) -> None:
    values: dict[str, Any] = {"tool_calls": Run.tool_calls + reserved.tool_calls}
    if reserved.model_calls is not None:
        values["model_calls"] = Run.model_calls + reserved.model_calls
        values["model_calls_delegated"] = Run.model_calls_delegated + reserved.model_calls
    if reserved.tokens is not None:
        values["tokens_used"] = Run.tokens_used + reserved.tokens
    if reserved.cost is not None:
        values["cost_used"] = Run.cost_used + reserved.cost
    s.execute(update(Run).where(Run.id == parent.id).values(**values))
    for _index, grant_id, uses in reserved.grant_uses:
        s.execute(update(GrantRow).where(GrantRow.id == grant_id).values(uses=GrantRow.uses + uses))
    s.refresh(parent)


def _give_back(s: Session, parent: Run, child: Run, reserved: dict[str, Any]) -> dict[str, Any]:
    """The reservation less what the child used, back to the parent's counters; the child's
    tool calls added to the parent's per-tool counts. Returns what went back."""
    used = {
        "model_calls": child.model_calls,
        "tool_calls": child.tool_calls,
        "tokens": child.tokens_used or 0,
        "cost": child.cost_used or 0.0,
    }
    back: dict[str, Any] = {
        name: max(0, (reserved.get(name) or 0) - used[name])
        for name in used
        if reserved.get(name) is not None
    }
    by_tool = dict(parent.tool_calls_by_tool or {})
    for tool, count in (child.tool_calls_by_tool or {}).items():
        by_tool[tool] = by_tool.get(tool, 0) + int(count)
    parent.tool_calls_by_tool = by_tool
    parent.tool_calls = parent.tool_calls - int(back.get("tool_calls", 0))
    parent.model_calls = parent.model_calls - int(back.get("model_calls", 0))
    parent.model_calls_delegated = parent.model_calls_delegated - int(back.get("model_calls", 0))
    parent.tokens_used = (parent.tokens_used or 0) - int(back.get("tokens", 0))
    parent.cost_used = (parent.cost_used or 0.0) - back.get("cost", 0.0)
    child_grants = grant_views(s, child.id)
    for index, grant_id, uses in reserved.get("grant_uses") or []:
        spent = child_grants[index].uses if index < len(child_grants) else uses
        left = max(0, int(uses) - spent)
        if left:
            s.execute(
                update(GrantRow).where(GrantRow.id == grant_id).values(uses=GrantRow.uses - left)
            )
    return back


def _output(s: Session, child: Run) -> dict[str, Any]:
    untrusted = s.scalars(
        select(Observation.id)
        .where(
            Observation.run_id == child.id,
            Observation.source == ObservationSource.UNTRUSTED_CONTENT.value,
        )
        .limit(1)
    ).first()
    return DelegateOutput(
        child_run_id=child.id,
        status=child.status,
        stop_reason=child.stop_reason,
        answer=child.answer,
        citations=_citations(s, child.id),
        read_untrusted=untrusted is not None,
    ).model_dump(mode="json")


def _citations(s: Session, run_id: str) -> list[str]:
    records = s.scalars(
        select(TraceRecord.events).where(TraceRecord.run_id == run_id).order_by(TraceRecord.seq)
    )
    cited: list[str] = []
    for events in records:
        for name, details in events or []:
            if name == "final.validated" and isinstance(details, dict):
                cited = [str(c) for c in details.get("citations") or []]
    return cited
