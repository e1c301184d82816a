"""What the client's operator and user actions write: confirm or decline a pending proposal,
cancel a run, grant a capability, resolve a handoff, disable or enable a tool, approve a
deployment policy.

Each function works in the caller's session: the ``lock_*`` ones read a row ``FOR UPDATE``
(the action's compare-and-set then cannot race another writer); the others add or change the
rows an action records besides the run's own status change (the caller's
:func:`warrant.ledger.repo.commit`).
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import func, select, text, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.orm import Session

from warrant.ledger.chain import row_values
from warrant.ledger.models import (
    ApiToken,
    Command,
    Confirmation,
    GrantRow,
    Handoff,
    PolicyApproval,
    PreApproval,
    Proposal,
    Run,
    ToolSwitch,
)
from warrant.ledger.repo import commit, note_rows, run_view, to_datetime
from warrant.ledger.rows import lock_run
from warrant.runner import run_machine as machine
from warrant.runner.codes import CommandStatus, RunStatus
from warrant.runner.spec import Grant

__all__ = [
    "approve_policy",
    "cancel_locked",
    "discard_issued_branches",
    "discard_issued_command",
    "insert_grant",
    "insert_pre_approval",
    "lock_active_command",
    "lock_handoff",
    "lock_run",
    "mark_handoff_resolved",
    "policy_approvals",
    "record_confirmation",
    "record_partial_approval",
    "switch_tool",
]


def lock_active_command(s: Session, run: Run) -> Command | None:
    """The run's active command, locked (``None`` if it has none)."""
    if not run.active_command_id:
        return None
    return s.get(Command, run.active_command_id, with_for_update=True)


def lock_handoff(s: Session, handoff_id: str) -> Handoff | None:
    """The handoff ``handoff_id``, locked (``None`` if there is none)."""
    return s.get(Handoff, handoff_id, with_for_update=True)


def record_partial_approval(s: Session, proposal: Proposal, request: dict[str, Any]) -> None:
    """Keep an approval that is not the last one needed on the pending (locked run's)
    proposal's confirmation request (its ``approved_by`` list)."""
    proposal.confirmation_request = request
    s.flush()


def record_confirmation(
    s: Session,
    *,
    run_id: str,
    proposal_hash: str,
    tool: str,
    approved: bool,
    expires_at_step: int,
    expires_at: float,
    decided_by: str,
    precondition_fingerprint: str | None = None,
    covers_run: bool = False,
) -> str:
    """Record a person's decision on the pending proposal ``proposal_hash`` (unused yet);
    ``expires_at`` in epoch seconds; ``precondition_fingerprint``: the state the request
    showed (``Tool.precondition``); ``covers_run``: the request was a ``per-run`` one (once
    used, the approval covers the tool's later calls in the run). Returns the confirmation's
    id."""
    confirmation_id = str(uuid.uuid4())
    row = Confirmation(
        id=confirmation_id,
        run_id=run_id,
        proposal_hash=proposal_hash,
        tool=tool,
        approved=approved,
        used=False,
        expires_at_step=expires_at_step,
        expires_at=to_datetime(expires_at),
        decided_by=decided_by,
        precondition_fingerprint=precondition_fingerprint,
        covers_run=covers_run,
    )
    s.add(row)
    note_rows(s, run_id, [("confirmations", row_values("confirmations", row))])
    s.flush()
    return confirmation_id


def discard_issued_command(cmd: Command | None) -> None:
    """A command issued but never started is discarded (a cancelled run will not run it)."""
    if cmd is not None and cmd.status == CommandStatus.ISSUED:
        cmd.status = CommandStatus.DISCARDED.value


def discard_issued_branches(s: Session, run_id: str, step: int) -> None:
    """The calls of the run's parallel step ``step`` not started yet are discarded (a cancelled
    run will not run them; their messages are revoked, so nothing else would ever end them)."""
    s.execute(
        update(Command)
        .where(
            Command.run_id == run_id,
            Command.step == step,
            Command.branch > 0,
            Command.status == CommandStatus.ISSUED.value,
        )
        .values(status=CommandStatus.DISCARDED.value)
    )


def insert_grant(
    s: Session, run_id: str, grant: Grant, *, source: str, expires_at: float | None = None
) -> int:
    """Add ``grant`` to the run (unused so far); ``expires_at`` (epoch seconds) overrides the
    grant's own. Returns the grant's id."""
    row = GrantRow(
        run_id=run_id,
        capability=grant.capability,
        resource_scope=grant.resource_scope,
        expires_at_step=grant.expires_at_step,
        max_uses=grant.max_uses,
        uses=0,
        source=source,
        destinations_from=grant.destinations_from,
        expires_at=to_datetime(expires_at) if expires_at is not None else grant.expires_at,
        constraints=grant.constraints.model_dump() if grant.constraints is not None else None,
    )
    s.add(row)
    s.flush()
    return row.id


def insert_pre_approval(s: Session, run_id: str, record: dict[str, Any]) -> int:
    """Add a pre-approved proposal (see :func:`warrant.runner.confirmation_rules.
    pre_approval_record`). Returns its id."""
    row = PreApproval(run_id=run_id, **record)
    s.add(row)
    s.flush()
    return row.id


def mark_handoff_resolved(h: Handoff, *, by: str, outcome: str, reason: str) -> None:
    """Record who resolved the handoff, now, how and why."""
    h.resolved_at, h.resolved_by = datetime.now(tz=UTC), by
    h.resolution, h.resolution_reason = outcome, reason


# -- The reads an operator's grant needs before it is added: the database's time (a relative
# ``expires_in_s`` is counted on it, like every expiry the gate judges) and the run's standing
# grants of one capability (to tell a narrowing from a widening).


def database_now(s: Session) -> float:
    """The database's clock (epoch seconds), never this host's."""
    return float(s.execute(select(func.extract("epoch", func.clock_timestamp()))).scalar_one())


def standing_grants(s: Session, run_id: str, capability: str) -> list[GrantRow]:
    """Every grant of ``capability`` the run holds (from its spec or an operator), oldest
    first."""
    query = (
        select(GrantRow)
        .where(GrantRow.run_id == run_id, GrantRow.capability == capability)
        .order_by(GrantRow.id)
    )
    return list(s.scalars(query))


# -- API tokens: create, list, revoke, and find an active one by its hash.
#
# Only the sha256 (hex) of a token is stored. Each function works in the caller's session.


#: ``last_used_at`` is written at most this often per token (not on every request: a busy
#: token would serialise its requests on its row).
TOUCH_EVERY_S = 60

_ACTIVE = text(
    """
WITH t AS (
  SELECT id, name, role, token_hash, last_used_at FROM api_tokens
   WHERE token_hash = :token_hash AND revoked_at IS NULL
), touched AS (
  UPDATE api_tokens SET last_used_at = now() FROM t
   WHERE api_tokens.id = t.id
     AND (t.last_used_at IS NULL
          OR t.last_used_at < now() - make_interval(secs => :touch_every_s))
)
SELECT id, name, role, token_hash FROM t
"""
)


def insert_token(
    s: Session, *, token_id: str, name: str, role: str, token_hash: str, created_by: str
) -> ApiToken:
    """A new active token row (flushed: its ``created_at`` is read back)."""
    row = ApiToken(id=token_id, name=name, role=role, token_hash=token_hash, created_by=created_by)
    s.add(row)
    s.flush()
    s.refresh(row)
    return row


def tokens(s: Session) -> Sequence[ApiToken]:
    """Every token, revoked ones too, oldest first."""
    return s.scalars(select(ApiToken).order_by(ApiToken.created_at, ApiToken.id)).all()


def lock_tokens(s: Session, token: str) -> list[ApiToken]:
    """The token whose id is ``token``, else the active tokens named ``token``, locked (one,
    several or none)."""
    try:
        by_id = s.get(ApiToken, str(uuid.UUID(token)), with_for_update=True)
    except ValueError:
        by_id = None
    if by_id is not None:
        return [by_id]
    named = select(ApiToken).where(ApiToken.name == token, ApiToken.revoked_at.is_(None))
    return list(s.scalars(named.order_by(ApiToken.created_at).with_for_update()))


def mark_revoked(token: ApiToken, *, by: str) -> None:
    """Revoke the locked ``token`` now (a revoked one keeps its first revocation)."""
    if token.revoked_at is None:
        token.revoked_at = datetime.now(tz=UTC)
        token.revoked_by = by


def active_token(s: Session, token_hash: str) -> Any | None:
    """The unrevoked token with this hash (``id``, ``name``, ``role``, ``token_hash``) or
    ``None``; its ``last_used_at`` is set to now if older than :data:`TOUCH_EVERY_S`."""
    params = {"token_hash": token_hash, "touch_every_s": TOUCH_EVERY_S}
    return s.execute(_ACTIVE, params).first()


def cancel_locked(
    s: Session, run_id: str, run: Run, status: RunStatus, *, by: str, reason: str
) -> bool:
    """Cancel the locked, cancellable ``run``: ``cancelling`` while a tool runs or an effect
    is unknown, else ``cancelled`` at once. Returns whether something was in flight."""
    cmd = lock_active_command(s, run)
    waits = status in (RunStatus.RECONCILING, RunStatus.WAITING_JOB)  # an effect still open
    in_flight = waits or (cmd is not None and cmd.status == CommandStatus.STARTED)
    requested = {"by": by, "reason_chars": len(reason), "in_flight": in_flight}
    if not in_flight:
        discard_issued_command(cmd)
    if run.fan_out:  # a parallel step's calls not started: the cancel waits for none of them
        discard_issued_branches(s, run_id, int(run.fan_out["step"]))
    change = machine.cancel(run_view(run), in_flight=in_flight, requested=requested)
    commit(s, change, step=run.step)
    return in_flight


def switch_tool(
    s: Session, tool: str, *, disabled: bool, by: str, reason: str | None = None
) -> dict[str, Any]:
    """Disable (``warrant tools disable``) or enable ``tool`` by name, every version: its
    ``tool_switches`` row says so with who, when and why, and the change is appended to the
    row's ``history`` as ``tool.disabled`` or ``tool.enabled`` (the operator's audit: a tool is
    no run's). The policy gate and the tool stage read the row at their next decision or
    claim. Returns the change as recorded, ``changed`` False when the tool already was so."""
    s.execute(
        pg_insert(ToolSwitch)
        .values(tool=tool, disabled=False, changed_by=by, history=[])
        .on_conflict_do_nothing(index_elements=["tool"])
    )
    row = s.get(ToolSwitch, tool, with_for_update=True, populate_existing=True)
    assert row is not None
    at = s.execute(select(func.now())).scalar_one()
    event = "tool.disabled" if disabled else "tool.enabled"
    changed = row.disabled != disabled
    entry = {"event": event, "by": by, "at": at.isoformat(), "reason": reason or None}
    row.history = [*row.history, entry]
    row.disabled, row.reason, row.changed_by, row.changed_at = disabled, reason or None, by, at
    s.flush()
    return {"tool": tool, "disabled": disabled, "changed": changed, **entry}


def _approval(row: PolicyApproval) -> dict[str, Any]:
    return {
        "policy_hash": row.policy_hash,
        "approved_by": row.approved_by,
        "approved_at": row.approved_at.isoformat(),
        "note": row.note,
        "form": row.form,
    }


def policy_approvals(s: Session, policy_hash: str) -> tuple[dict[str, Any] | None, Any]:
    """The approval of ``policy_hash`` (``None``: not approved) and the latest approval of
    another policy (``None``: none), each as :func:`approve_policy` returns it."""
    found = s.get(PolicyApproval, policy_hash)
    latest = s.scalars(
        select(PolicyApproval)
        .where(PolicyApproval.policy_hash != policy_hash)
        .order_by(PolicyApproval.approved_at.desc())
        .limit(1)
    ).first()
    return (
        None if found is None else _approval(found),
        None if latest is None else _approval(latest),
    )


def approve_policy(
    s: Session, policy_hash: str, *, by: str, form: dict[str, Any], note: str | None = None
) -> tuple[dict[str, Any], bool]:
    """Record that ``by`` approved the deployment policy ``policy_hash`` (``warrant policy
    approve``) with its ``form``: policy workers under that hash decide from their next
    proposal on. Returns the approval and whether it is new (approving again returns the
    existing row unchanged)."""
    added = s.execute(
        pg_insert(PolicyApproval)
        .values(policy_hash=policy_hash, approved_by=by, form=form, note=note or None)
        .on_conflict_do_nothing(index_elements=["policy_hash"])
        .returning(PolicyApproval.policy_hash)
    ).first()
    row = s.get(PolicyApproval, policy_hash, populate_existing=True)
    assert row is not None
    return _approval(row), added is not None
