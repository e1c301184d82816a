"""The client's approvals: a person confirms or declines a pending proposal or answers a run's
clarifying question, an operator grants a capability to a running run. One part of
:class:`warrant.runner.client.api.Client`."""

from __future__ import annotations

import copy
import dataclasses
import hmac
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pydantic import ValidationError
from sqlalchemy.orm import Session

from warrant.broker import telemetry
from warrant.ledger import reads
from warrant.ledger.db import session_scope
from warrant.ledger.guarded import insert_proposal, update_proposal
from warrant.ledger.models import Proposal, Run
from warrant.ledger.operator import (
    database_now,
    insert_grant,
    insert_pre_approval,
    record_confirmation,
    record_partial_approval,
)
from warrant.ledger.repo import NewObservation, append_events, commit, run_view
from warrant.runner import run_machine as machine
from warrant.runner.client.grant_admission import Admission, admit
from warrant.runner.client.runs import RunInfo, RunsClient, found_run
from warrant.runner.codes import ObservationKind, ObservationSource, Rejection, RunStatus
from warrant.runner.confirmation_rules import (
    Correction,
    add_approval,
    asked_call,
    corrected_call,
    pre_approval_record,
    resumed_deadline,
    self_approval,
    undecided,
)
from warrant.runner.errors import (
    ConfirmationRefused,
    InvalidRequest,
    RunFinished,
    SpecError,
    StateConflict,
    Unauthorized,
)
from warrant.runner.grants import check_task_sources
from warrant.runner.settings import load_settings
from warrant.runner.spec import Grant, PreApproval
from warrant.runner.views import RunView
from warrant.tools._plugins import registry_for

__all__ = ["MAX_ANSWER_CHARS", "ApprovalsClient", "Corrected", "Origin"]

#: An answer is a user message: as long as a goal may be.
MAX_ANSWER_CHARS = 8_000


@dataclass(frozen=True)
class Origin:
    """Where a person's decision came from, recorded in its trace event beside who."""

    via: str
    """``"web"`` (the inbox), ``"api"`` (HTTP) or ``"cli"``."""
    address: str | None = None
    """The client's address as the server saw it."""
    user_agent: str | None = None

    def details(self) -> dict[str, str]:
        out = {"via": self.via}
        if self.address:
            out["from"] = self.address
        if self.user_agent:
            out["user_agent"] = self.user_agent[:200]
        return out


@dataclass(frozen=True)
class Corrected:
    """A person's edit of a pending proposal, recorded: the new proposal goes to the gate."""

    run_id: str
    version: int
    """The run's version after the edit."""
    proposal_hash: str
    """The new proposal's hash (the original arguments with the changes)."""
    original_hash: str
    """The proposal it replaces (declined, never executed)."""
    step: int
    """The new proposal's step."""
    changed: list[str]
    """The arguments whose values the edit changed."""
    approved: bool
    """The edit counts as its author's approval of the new hash; else the new proposal waits
    for its own confirmation (more approvers needed, or a state to be shown first)."""

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


class ApprovalsClient(RunsClient):
    """Confirmations (bound to the pending proposal's hash), answers and operator grants."""

    def confirm(
        self,
        run_id: str,
        *,
        proposal_hash: str,
        by: str,
        origin: Origin | None = None,
        precondition: str | None = None,
    ) -> int:
        """Approve exactly the pending proposal (bound to its hash), or one call of a waiting
        parallel step (by its hash). Returns the new version. ``origin`` (where the decision
        came from) goes into the trace event beside ``by``. ``precondition``: the state's
        fingerprint the approver saw; if the request now shows another (the state moved and
        the run asked again), refused ``PRECONDITION_CHANGED``."""
        seen = {proposal_hash: precondition} if precondition is not None else {}
        return self.decide(run_id, approve=[proposal_hash], by=by, origin=origin, seen=seen)

    def decline(
        self, run_id: str, *, proposal_hash: str, by: str, origin: Origin | None = None
    ) -> int:
        """Refuse the pending proposal (or one call of a waiting parallel step); the planner
        sees a decline observation."""
        return self.decide(run_id, decline=[proposal_hash], by=by, origin=origin)

    def decide(
        self,
        run_id: str,
        *,
        approve: Sequence[str] = (),
        decline: Sequence[str] = (),
        by: str,
        origin: Origin | None = None,
        seen: Mapping[str, str] | None = None,
    ) -> int:
        """Approve and decline proposals by their hashes in one action: the pending proposal,
        or any of a waiting parallel step's calls that need a person. The run goes back to
        the gate once every call of the set is decided (and each approval has as many distinct
        people as its tool needs); until then it keeps waiting. ``seen``: hash → the state's
        fingerprint the approver saw (``PRECONDITION_CHANGED`` if its request shows another).
        Returns the run's version after it."""
        choices = [(h, True) for h in approve] + [(h, False) for h in decline]
        _check_choices(choices, by)
        now = time.time()
        with session_scope(self.engine) as s:
            run = found_run(s, run_id, lock=True)
            pending = _confirmable(s, run, now=now)
            request = copy.deepcopy(dict(pending.confirmation_request or {}))
            decider: dict[str, Any] = {"by": by, **(origin.details() if origin else {"via": "cli"})}
            events: list[tuple[str, dict[str, Any]]] = []
            done: list[tuple[str, bool, dict[str, Any]]] = []
            for phash, approved in choices:
                asked = _asked(request, phash)
                if approved and (seen or {}).get(phash) is not None:
                    _check_seen_state(asked, str((seen or {})[phash]))
                events += _self_approval_events(run, asked, decider, phash)
                if _take(asked, phash, approved=approved, decider=decider, now=now, events=events):
                    done.append((phash, approved, asked))
            version = _record_decisions(s, run, pending, request, done, decider, events)
            trace_id = run.trace_id
        if version is not None:
            with telemetry.run_context(trace_id):
                self.publisher.policy(run_id, version)
            return version
        return run.version

    def correct(
        self,
        run_id: str,
        *,
        proposal_hash: str,
        changes: Mapping[str, Any],
        by: str,
        reason: str = "",
        origin: Origin | None = None,
    ) -> Corrected:
        """Correct the pending proposal (bound to its hash) instead of approving it as it is:
        its arguments with ``changes`` (argument → value) become a new proposal, with its own
        hash, at the next step, gated again from the start (the values are the person's own
        words: a user observation ``correction-<step>``); the original is declined, never
        executed. The edit counts as ``by``'s approval of the new hash when one person's word
        may approve it (:class:`~warrant.runner.confirmation_rules.Correction`); whoever
        started the run may not correct it unless they may approve it. Traced
        ``proposal.corrected`` (who, the old and new hash, the changed arguments)."""
        _check_choices([(proposal_hash, False)], by)
        with session_scope(self.engine) as s:
            run = found_run(s, run_id, lock=True)
            pending = _confirmable(s, run, now=time.time())
            request = dict(pending.confirmation_request or {})
            if request.get("parallel"):
                raise InvalidRequest(
                    "a parallel step's calls are approved or declined one by one; decline "
                    "this one instead of correcting it",
                    code="CORRECTION_INVALID",
                )
            asked = _asked(request, proposal_hash)
            tool = registry_for().get(str(pending.tool), str(pending.tool_version))
            if tool is None:
                raise InvalidRequest(
                    f"no tool {pending.tool}@{pending.tool_version} here to check the edit",
                    code="CORRECTION_INVALID",
                )
            floor = load_settings().approvals_floor.get(tool.name, 1)
            correction = corrected_call(tool, pending.arguments or {}, changes, floor=floor)
            decider: dict[str, Any] = {"by": by, **(origin.details() if origin else {"via": "cli"})}
            events = _self_approval_events(run, asked, decider, proposal_hash)
            version = _record_correction(
                s, run, pending, correction, decider, events, reason=reason[:500]
            )
            trace_id = run.trace_id
            step = run.step + 1
        with telemetry.run_context(trace_id):
            self.publisher.policy(run_id, version)
        return Corrected(
            run_id=run_id,
            version=version,
            proposal_hash=correction.proposal_hash,
            original_hash=proposal_hash,
            step=step,
            changed=correction.changed,
            approved=correction.approves,
        )

    def answer(self, run_id: str, *, text: str, by: str) -> RunInfo:
        """Answer the question a run stopped on (``needs_input``): the answer becomes a user
        observation (``answer-<step>``), and the planner is asked again."""
        if not text.strip() or len(text) > MAX_ANSWER_CHARS:
            raise InvalidRequest(
                f"an answer is 1 to {MAX_ANSWER_CHARS} characters", code="ANSWER_INVALID"
            )
        if not by.strip():
            raise InvalidRequest("an answer needs who gave it", code="ANSWER_IDENTITY_REQUIRED")
        with session_scope(self.engine) as s:
            run = found_run(s, run_id, lock=True)
            if run.status != RunStatus.NEEDS_INPUT:
                raise StateConflict(
                    f"run {run_id} is {run.status}, not waiting for an answer",
                    code="RUN_NOT_WAITING_INPUT",
                )
            answered = {"by": by, "chars": len(text), "question_chars": len(run.answer or "")}
            change = machine.answer(run_view(run), answered=answered)
            content = {"answer": text, "by": by}
            observation = NewObservation(
                f"answer-{run.step}", ObservationKind.USER, ObservationSource.USER.value, content
            )
            version = commit(s, change, step=run.step, observation=observation)
            trace_id = run.trace_id
        with telemetry.run_context(trace_id):
            self.publisher.planner(run_id, version)
        return self.get_run(run_id)

    def add_grant(
        self,
        run_id: str,
        *,
        capability: str,
        resource_scope: str = "*",
        expires_at_step: int | None = None,
        max_uses: int | None = None,
        granted_by: str,
        operator_token: str | None = None,
        destinations_from: list[str] | None = None,
        expires_at: datetime | None = None,
        expires_in_s: float | None = None,
        widen: bool = False,
        constraints: dict[str, Any] | None = None,
    ) -> int:
        """Grant a capability to a running run (an authenticated operator call);
        ``destinations_from`` makes it task-scoped (``Grant.destinations_from``). A run in
        ``waiting_grant`` goes back to the gate with the same pending proposal: covered, it
        goes on; still not covered, it waits again. ``expires_at`` (aware) or ``expires_in_s``
        (from the database's now) end it in wall-clock time. A grant wider than a standing
        grant of its capability is refused ``GRANT_WIDENING_REFUSED`` unless ``widen``
        (then traced ``grant.widened``; :mod:`warrant.runner.client.grant_admission`).
        ``constraints`` limit the call's argument values (``{"max": {...}, "in": {...}}``, as a
        run spec's grant); a grant without a standing one's limits is a widening too."""
        self._check_operator(operator_token, "grant capabilities")
        grant = _grant(
            capability=capability,
            resource_scope=resource_scope,
            expires_at_step=expires_at_step,
            max_uses=max_uses,
            destinations_from=destinations_from,
            expires_at=expires_at,
            constraints=constraints,
        )
        if grant.destinations_from:
            check_task_sources([grant], registry_for(), where="grant")
        with session_scope(self.engine) as s:
            run = _open_run(s, run_id, "grant capabilities to")
            admitted = admit(
                s,
                run_id,
                grant,
                expires_in_s=expires_in_s,
                widen=widen,
                by=granted_by,
                registry=registry_for(),
            )
            grant_id = insert_grant(s, run_id, grant, source="api", expires_at=admitted.expires_at)
            version = _record_grant(s, run, grant, grant_id, admitted, by=granted_by)
            if version is None:
                return grant_id
            trace_id = run.trace_id
        with telemetry.run_context(trace_id):
            self.publisher.policy(run_id, version)
        return grant_id

    def pre_approve(
        self,
        run_id: str,
        *,
        tool: str,
        tool_version: str,
        arguments: dict[str, Any],
        approved_by: str,
        operator_token: str | None = None,
    ) -> int:
        """Approve one exact proposal ahead of time (an authenticated operator call): the gate
        takes a matching proposal of this run as confirmed, once. Returns its id."""
        self._check_operator(operator_token, "pre-approve proposals")
        item = PreApproval(
            tool=tool, tool_version=tool_version, arguments=arguments, approved_by=approved_by
        )
        floor = load_settings().approvals_floor
        record = pre_approval_record(item, registry_for(), field="pre_approval", floor=floor)
        with session_scope(self.engine) as s:
            run = _open_run(s, run_id, "pre-approve proposals of")
            pre_id = insert_pre_approval(s, run_id, record)
            added = {
                "pre_approval_id": pre_id,
                "tool": record["tool"],
                "proposal_hash": record["proposal_hash"],
                "by": approved_by,
            }
            append_events(s, run_id, [("pre_approval.added", added)], step=run.step)
            return pre_id

    @staticmethod
    def _check_operator(token: str | None, what: str) -> None:
        expected = load_settings().operator_token
        if expected and not hmac.compare_digest(expected, token or ""):
            raise Unauthorized(f"a valid operator token is required to {what}")


def _open_run(s: Session, run_id: str, what: str) -> Run:
    """The locked run, unless it is finished: then :class:`RunFinished` (a grant or
    pre-approval it could never use must not be recorded as if it mattered)."""
    run = found_run(s, run_id, lock=True)
    if RunStatus(run.status).terminal:
        raise RunFinished(f"run {run_id} is {run.status}: no one can {what} it any more")
    return run


def _record_grant(
    s: Session, run: Run, grant: Grant, grant_id: int, admitted: Admission, *, by: str
) -> int | None:
    """Trace the grant (``grant.widened`` first, when it widens); a run that waits for a grant
    goes back to the gate with the same pending proposal: its new version (else ``None``)."""
    added = {
        "grant_id": grant_id,
        "capability": grant.capability,
        "resource_scope": grant.resource_scope,
        "by": by,
        **({"expires_at": admitted.expires_at} if admitted.expires_at else {}),
    }
    widened = [(name, {"grant_id": grant_id, **d}) for name, d in admitted.events]
    if run.status != RunStatus.WAITING_GRANT:
        append_events(s, run.id, [*widened, ("grant.added", added)], step=run.step)
        return None
    append_events(s, run.id, widened, step=run.step)
    change = machine.resume_after_grant(run_view(run), added=added)
    return commit(s, change, step=run.step)


def _self_approval_events(
    run: Run, request: dict[str, Any], decider: dict[str, Any], proposal_hash: str
) -> list[tuple[str, dict[str, Any]]]:
    """Raise :class:`Forbidden` ``OWN_RUN_APPROVAL_FORBIDDEN`` when the principal that
    started the run decides on its proposal, unless the tool (``self_approval_allowed``) or
    the deployment (``WARRANT_APPROVER_MAY_APPROVE_OWN_RUNS=1``) allows it: then the trace
    event ``confirmation.self_approved`` that says who and why."""
    why = self_approval(
        run.started_by,
        str(decider["by"]),
        tool_allows=bool(request.get("self_approval_allowed")),
        deployment_allows=load_settings().approver_may_approve_own_runs,
    )
    if why is None:
        return []
    details = {
        "by": decider["by"],
        "started_by": run.started_by,
        "allowed_by": why,
        "tool": request.get("tool"),
        "proposal_hash": proposal_hash,
    }
    return [("confirmation.self_approved", details)]


def _check_seen_state(request: dict[str, Any], seen: str) -> None:
    """The approver saw the state fingerprinted ``seen``: the request must still show it."""
    shown = str((request.get("precondition") or {}).get("fingerprint"))
    if shown != seen:
        raise ConfirmationRefused(
            f"the state you approved has moved since you looked (the request now shows "
            f"{shown[:16]}, you saw {seen[:16]}): look again",
            code="PRECONDITION_CHANGED",
        )


def _check_choices(choices: list[tuple[str, bool]], by: str) -> None:
    if not by.strip():
        raise ConfirmationRefused(
            "a confirmation needs the identity of who gave it",
            code="CONFIRMATION_IDENTITY_REQUIRED",
        )
    if not choices:
        raise InvalidRequest(
            "nothing to decide: name a hash to approve or decline", code="DECISION_EMPTY"
        )
    hashes = [h for h, _ in choices]
    if len(set(hashes)) != len(hashes):
        raise InvalidRequest("a hash is named twice", code="DECISION_HASH_REPEATED")


def _confirmable(s: Session, run: Run, *, now: float) -> Proposal:
    """The locked run's pending proposal, if a decision on it may be taken at ``now``; else
    :class:`ConfirmationRefused` says why not."""
    pending = reads.pending_proposal(s, run)
    if (
        run.status != RunStatus.WAITING_CONFIRMATION
        or pending is None
        or not pending.confirmation_request
    ):
        raise ConfirmationRefused(
            f"run {run.id} is {run.status}, not waiting for a confirmation",
            code="RUN_NOT_WAITING_CONFIRMATION",
        )
    if now >= float(pending.confirmation_request["expires_at"]):
        raise ConfirmationRefused(
            "the confirmation request has expired", code="CONFIRMATION_EXPIRED"
        )
    return pending


def _asked(request: dict[str, Any], phash: str) -> dict[str, Any]:
    """The request (or the set's call's) a decision on ``phash`` answers, not yet decided."""
    asked = asked_call(request, phash)
    if asked is None:
        raise ConfirmationRefused(
            "that hash is not the pending proposal's (nor one of its set's calls that waits "
            "for a person)",
            code="CONFIRMATION_HASH_MISMATCH",
        )
    if asked.get("decision"):
        raise ConfirmationRefused(
            f"that call is already {asked['decision']}", code="CONFIRMATION_ALREADY_DECIDED"
        )
    return asked


def _take(
    asked: dict[str, Any],
    phash: str,
    *,
    approved: bool,
    decider: dict[str, Any],
    now: float,
    events: list[tuple[str, dict[str, Any]]],
) -> bool:
    """Take one decision into its request ``asked``: a decline, or the approval that makes
    as many distinct people as it needs, decides it (``True``); an approval short of that is
    recorded on it (``confirmation.approval_recorded``)."""
    if not approved:
        return True
    approved_by = add_approval(
        list(asked.get("approved_by") or []),
        {"by": decider["by"], "via": decider["via"], "at": now},
    )
    asked["approved_by"] = approved_by
    required = int(asked.get("approvals_required") or 1)
    if len(approved_by) >= required:
        return True
    names = [a["by"] for a in approved_by]
    recorded = {"proposal_hash": phash, **decider, "approved_by": names}
    events.append(("confirmation.approval_recorded", {**recorded, "approvals_required": required}))
    return False


def _record_decisions(
    s: Session,
    run: Run,
    pending: Proposal,
    request: dict[str, Any],
    done: list[tuple[str, bool, dict[str, Any]]],
    decider: dict[str, Any],
    events: list[tuple[str, dict[str, Any]]],
) -> int | None:
    """Record each decided call's confirmation and keep the request with who approved; once
    nothing waits (the proposal's decision, or every call of its set), the run goes back to
    the gate: its new version (else ``None``, and the run keeps waiting)."""
    resume: tuple[bool, dict[str, Any]] | None = None
    for phash, approved, asked in done:
        confirmation_id = record_confirmation(
            s,
            run_id=run.id,
            proposal_hash=phash,
            tool=str(asked["tool"]),
            approved=approved,
            expires_at_step=int(request["expires_at_step"]),
            expires_at=float(request["expires_at"]),
            decided_by=str(decider["by"]),
            precondition_fingerprint=(asked.get("precondition") or {}).get("fingerprint"),
            covers_run=asked.get("confirmation") == "per-run",
        )
        approvers = [a["by"] for a in asked.get("approved_by") or []]
        decided = {"confirmation_id": confirmation_id, "proposal_hash": phash, **decider}
        if approved:
            decided["approved_by"] = approvers
        if "branch" in asked:
            decided["branch"] = asked["branch"]
            asked["decision"] = "approved" if approved else "declined"
        if resume is not None:
            events.append(_decision_event(*resume))
        resume = (approved, decided)
    top = asked_call(request, str(request.get("proposal_hash")))
    if top is not None and top is not request:  # the set's first call: its request mirrors it
        request["approved_by"] = top.get("approved_by") or []
    record_partial_approval(s, pending, request)
    if resume is None or undecided(request):
        if resume is not None:
            events.append(_decision_event(*resume))
        append_events(s, run.id, events, step=run.step)
        return None
    append_events(s, run.id, events, step=run.step)
    view = run_view(run)
    moved = resumed_deadline(request, deadline_at=view.deadline_at, now=database_now(s))
    change = machine.resume_after_confirmation(
        view, approved=resume[0], decided=resume[1], deadline_at=moved
    )
    return commit(s, change, step=run.step, proposal_id=pending.proposal_id)


def _record_correction(
    s: Session,
    run: Run,
    pending: Proposal,
    correction: Correction,
    decider: dict[str, Any],
    events: list[tuple[str, dict[str, Any]]],
    *,
    reason: str,
) -> int:
    """One compare-and-set: the original declined (its row ``rejected``), the corrected
    proposal the run's pending one at the next step, the person's values their observation,
    and the edit as the approval of the new hash when it counts as one. The new version."""
    view, request = run_view(run), dict(pending.confirmation_request or {})
    step, tool = view.step + 1, str(pending.tool)
    corrected = {
        **decider,
        "tool": tool,
        "original_hash": pending.proposal_hash,
        "proposal_hash": correction.proposal_hash,
        "changed": correction.changed,
        "step": step,
        "counts_as_approval": correction.approves,
        **({"reason": reason} if reason else {}),
    }
    if correction.approves:
        events.append(_edit_approval(s, run, request, correction, decider, tool=tool, step=step))
    moved = resumed_deadline(request, deadline_at=view.deadline_at, now=database_now(s))
    declined = {"proposal_hash": pending.proposal_hash, **decider, "corrected": True}
    change = machine.resume_after_confirmation(
        view, approved=False, decided=declined, deadline_at=moved
    )
    change = dataclasses.replace(  # the edit's own proposal is gated, not the declined one
        change,
        changes={**change.changes, "step": step, "pending_proposal_id": machine.NEXT_PROPOSAL_ID},
        events=(*change.events[:1], ("proposal.corrected", corrected), *events, *change.events[1:]),
    )
    said = {k: correction.arguments.get(k) for k in correction.changed}
    content = {"correction": {"tool": tool, "changes": said, "by": decider["by"]}}
    return commit(
        s,
        change,
        step=view.step,
        proposal_id=pending.proposal_id,
        observation=NewObservation(
            f"correction-{view.step}", ObservationKind.USER, ObservationSource.USER.value, content
        ),
        guarded=[
            update_proposal(
                pending.id,
                {"status": "rejected", "rejection_code": Rejection.CONFIRMATION_DECLINED.value},
            ),
            insert_proposal(_corrected_row(pending, correction, view, step), pending=True),
        ],
    )


def _edit_approval(
    s: Session,
    run: Run,
    request: dict[str, Any],
    correction: Correction,
    decider: dict[str, Any],
    *,
    tool: str,
    step: int,
) -> tuple[str, dict[str, Any]]:
    """The edit recorded as its author's confirmation of the new hash (within the original
    request's expiry): its ``confirmation.approved`` event."""
    confirmation_id = record_confirmation(
        s,
        run_id=run.id,
        proposal_hash=correction.proposal_hash,
        tool=tool,
        approved=True,
        expires_at_step=max(int(request["expires_at_step"]), step),
        expires_at=float(request["expires_at"]),
        decided_by=str(decider["by"]),
    )
    approved = {"confirmation_id": confirmation_id, "proposal_hash": correction.proposal_hash}
    return ("confirmation.approved", {**approved, **decider, "by_correction": True})


def _corrected_row(
    pending: Proposal, correction: Correction, view: RunView, step: int
) -> dict[str, Any]:
    """The corrected proposal's row: the original's, with the edited arguments, at ``step``."""
    raw = dict(pending.raw) if isinstance(pending.raw, dict) else {}
    return {
        "run_id": pending.run_id,
        "step": step,
        "kind": "tool",
        "proposal_id": pending.proposal_id,
        "tool": pending.tool,
        "tool_version": pending.tool_version,
        "raw": {**raw, "arguments": correction.arguments},
        "observation_version": view.observation_version + 1,
        "status": "received",
    }


def _decision_event(approved: bool, decided: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    return ("confirmation.approved" if approved else "confirmation.declined", decided)


def _grant(
    *,
    capability: str,
    resource_scope: str,
    expires_at_step: int | None,
    max_uses: int | None,
    destinations_from: list[str] | None = None,
    expires_at: datetime | None = None,
    constraints: dict[str, Any] | None = None,
) -> Grant:
    """The grant, validated like a run spec's (:class:`SpecError` if it is not valid)."""
    try:
        return Grant.model_validate(
            {
                "capability": capability,
                "resource_scope": resource_scope,
                "expires_at_step": expires_at_step,
                "max_uses": max_uses,
                "destinations_from": destinations_from,
                "expires_at": expires_at,
                "constraints": constraints,
            }
        )
    except ValidationError as exc:
        raise SpecError(
            "invalid grant",
            errors=[
                {"field": ".".join(map(str, e["loc"])), "message": e["msg"]}
                for e in exc.errors(include_url=False)
            ],
        ) from None
