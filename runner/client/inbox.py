"""What an approver is shown: each run waiting for a confirmation, with the exact proposal.

The confirmation request stored on the proposal masks every sensitive argument (it goes into
the trace, webhooks and handoff bundles). The approver must see what they approve, so this
reads the proposal's own normalized arguments and masks only the tool's ``secret_fields``
(and, for a reader who may not confirm, the ``sensitive_fields`` too). One part of
:class:`warrant.runner.client.api.Client`.

:meth:`InboxClient.reveal` is the same view of one run's pending proposal for ``warrant run
show --reveal`` and ``GET /v1/runs/{id}?reveal=true``: the values as they will run (secrets
still hidden), each reveal recorded on the run as a ``sensitive.revealed`` trace event (who,
from where, which fields; never the values).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING, Any

from warrant.ledger import reads
from warrant.ledger.db import retry_once_on_disconnect, session_scope
from warrant.ledger.delegation import parent_shown
from warrant.ledger.models import Observation, Proposal, Run
from warrant.ledger.repo import append_events
from warrant.runner.client.contract import DEFAULT_INBOX_LIMIT
from warrant.runner.client.runs import RunsClient, found_run
from warrant.runner.codes import ObservationSource, RunStatus
from warrant.runner.errors import InvalidRequest
from warrant.runner.spec import Budgets
from warrant.tools._contract import IMPACT_NOT_DECLARED
from warrant.tools._plugins import registry_for

if TYPE_CHECKING:
    from warrant.runner.client.approvals import Origin

__all__ = [
    "DEFAULT_INBOX_LIMIT",
    "CitedObservation",
    "InboxClient",
    "Parameter",
    "PendingConfirmation",
    "Revealed",
    "budget_rows",
]


REVEALED_EVENT = "sensitive.revealed"
"""The trace event of a reveal: ``by``, ``via``, ``from``, ``fields``, ``proposal_hash``."""

SECRET = "<secret>"
SENSITIVE = "<sensitive>"
EXCERPT_CHARS = 600

UNDO = {
    "read": "Nothing to undo: it only reads.",
    "idempotent-write": (
        "Not undone automatically (there is no undo). Repeating the same call has no further "
        "effect."
    ),
    "compensatable-write": "Can be undone: a compensating action exists.",
    "irreversible": "Cannot be undone.",
}


@dataclass(frozen=True)
class Parameter:
    """One argument of the proposal, as shown."""

    name: str
    value: str
    """The value as JSON text (``<secret>`` or ``<sensitive>`` when masked)."""
    masked: str | None = None
    """``"secret"`` or ``"sensitive"`` when the value is hidden from this reader."""
    sensitive: bool = False
    """The contract marks it sensitive (kept out of traces; shown to approvers)."""


@dataclass(frozen=True)
class CitedObservation:
    """An observation the proposal names as its source."""

    observation_id: str
    kind: str
    source: str
    step: int
    excerpt: str
    untrusted: bool
    """Its content came from outside (a web page, an MCP server): data, not instructions."""


@dataclass(frozen=True)
class PendingConfirmation:
    """One run waiting for a person to approve or decline exactly one proposal."""

    run_id: str
    version: int
    goal: str
    subject: str
    started_by: str | None
    step: int
    tool: str
    tool_version: str
    action: str
    resource: str
    side_effect: str
    reversible: bool
    undo: str
    proposal_hash: str
    expires_at: float
    """Epoch seconds after which the request is refused (``CONFIRMATION_EXPIRED``)."""
    reason: str
    """The planner's one-line reason (its own words: not evidence)."""
    parameters: list[Parameter] = field(default_factory=list)
    cited: list[CitedObservation] = field(default_factory=list)
    flagged: dict[str, Any] | None = None
    """The provenance check: ``flagged`` lists the values no trusted text supplied."""
    described: dict[str, str] = field(default_factory=dict)
    """What the tool's service says the call's resources are (``Tool.describe_resources``)."""
    precondition: dict[str, Any] | None = None
    """The state the approval is bound to (``Tool.precondition``: fingerprint, summary)."""
    estimated_impact: str | dict[str, Any] = IMPACT_NOT_DECLARED
    """What the call is expected to do, from its arguments (``Tool.impact``): a sentence or
    a JSON object (``amount``, ``currency``, ``target``, ...); ``"not declared"`` when the
    tool declares none."""
    unverified_reason: str | None = None
    """The tool is an ``unverified`` write (nothing reads its effect back): why, as its
    contract says. None for a tool whose success is checked."""
    approvals_required: int = 1
    """How many distinct people must approve (M of N)."""
    approved_by: list[str] = field(default_factory=list)
    parallel: list[dict[str, Any]] | None = None
    """When the call is one of a parallel step's: every call of the set (``branch``, tool,
    arguments masked as the tool declares, ``accepted`` / ``needs_person`` / ``refused``)."""
    parent: dict[str, Any] | None = None
    """When the run is a sub-run: its parent's ``run_id`` and ``goal``, and the ``route`` a
    router took to it (what the person approves serves that goal)."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Revealed:
    """A pending proposal's arguments as they will run, for who may confirm it: sensitive
    values shown, ``secret_fields`` still ``<secret>``."""

    run_id: str
    proposal_hash: str
    """The proposal these values belong to (compare with ``confirmation_request``)."""
    tool: str
    tool_version: str
    arguments: dict[str, Any]
    """Every argument: its value (a JSON value), or ``"<secret>"``."""
    fields: list[str]
    """The sensitive fields whose values are shown here (what the trace event names)."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class InboxClient(RunsClient):
    """The approval inbox's reads."""

    @retry_once_on_disconnect
    def pending_confirmations(
        self, *, reveal_sensitive: bool, limit: int = DEFAULT_INBOX_LIMIT
    ) -> list[PendingConfirmation]:
        """``reveal_sensitive``: whether the reader may see sensitive values (who may confirm
        must)."""
        registry = registry_for(ask_mcp_servers=False)  # the masks are declared
        found = []
        with session_scope(self.engine) as s:
            for run, proposal in reads.waiting_confirmations(s, limit=limit):
                if not proposal.confirmation_request:
                    continue
                raw = proposal.raw if isinstance(proposal.raw, dict) else {}
                ids = [str(i) for i in raw.get("source_observation_ids") or []]
                cited = reads.cited_observations(s, run.id, ids)
                tool = registry.get(proposal.tool or "", proposal.tool_version or "")
                hidden = (tool.secret_fields, tool.sensitive_fields) if tool else None
                pending = _pending(run, proposal, cited, hidden, reveal_sensitive, raw)
                found.append(replace(pending, parent=parent_shown(s, run)))
        return found

    def reveal(self, run_id: str, *, by: str = "", origin: Origin | None = None) -> Revealed | None:
        """The pending proposal's arguments with its sensitive values shown, and the trace
        event ``sensitive.revealed`` (``by``, where from, which fields) on the run in the same
        transaction. ``None`` (nothing traced) when the run waits for no confirmation; a
        proposal without sensitive values is shown without an event. Who may see them is the
        caller's check (the HTTP API: a role that may confirm). :class:`RunNotFound` if there
        is no run; ``REVEAL_IDENTITY_REQUIRED`` without ``by``."""
        if not by.strip():
            raise InvalidRequest(
                "a reveal needs the identity of who looks", code="REVEAL_IDENTITY_REQUIRED"
            )
        registry = registry_for()
        with session_scope(self.engine) as s:
            run = found_run(s, run_id)
            pending = reads.pending_proposal(s, run)
            if run.status != RunStatus.WAITING_CONFIRMATION or pending is None:
                return None
            if not pending.confirmation_request:
                return None
            tool = registry.get(pending.tool or "", pending.tool_version or "")
            hidden = (tool.secret_fields, tool.sensitive_fields) if tool else None
            revealed = _revealed(run, pending, hidden)
            if revealed.fields:
                where = origin.details() if origin else {"via": "cli"}
                details = {
                    "by": by,
                    **where,
                    "fields": revealed.fields,
                    "proposal_hash": revealed.proposal_hash,
                }
                append_events(
                    s,
                    run_id,
                    [(REVEALED_EVENT, details)],
                    step=run.step,
                    proposal_id=pending.proposal_id,
                )
            return revealed

    @retry_once_on_disconnect
    def budgets(self, run_id: str) -> list[dict[str, Any]]:
        with session_scope(self.engine) as s:
            return budget_rows(found_run(s, run_id))


def _pending(
    run: Run,
    proposal: Proposal,
    cited: Any,
    hidden: tuple[frozenset[str], frozenset[str]] | None,
    reveal_sensitive: bool,
    raw: dict[str, Any],
) -> PendingConfirmation:
    request = dict(proposal.confirmation_request or {})
    side_effect = str(request.get("side_effect", ""))
    return PendingConfirmation(
        run_id=run.id,
        version=run.version,
        goal=run.goal,
        subject=run.subject,
        started_by=run.started_by,
        step=run.step,
        tool=str(request.get("tool", proposal.tool)),
        tool_version=str(request.get("tool_version", proposal.tool_version)),
        action=str(request.get("action", "")),
        resource=str(request.get("resource", "")),
        side_effect=side_effect,
        reversible=bool(request.get("reversible")),
        undo=UNDO.get(side_effect, ""),
        proposal_hash=str(proposal.proposal_hash),
        expires_at=float(request.get("expires_at", 0)),
        reason=str(raw.get("reason_summary") or ""),
        parameters=_parameters(proposal, request, hidden, reveal_sensitive),
        cited=[_cited(o) for o in cited],
        flagged=request.get("provenance"),
        described=dict(request.get("described") or {}),
        precondition=request.get("precondition"),
        estimated_impact=request.get("estimated_impact") or IMPACT_NOT_DECLARED,
        unverified_reason=request.get("unverified_reason"),
        approvals_required=int(request.get("approvals_required") or 1),
        approved_by=[str(a.get("by")) for a in request.get("approved_by") or []],
        parallel=(request.get("parallel") or {}).get("calls"),
    )


def _parameters(
    proposal: Proposal,
    request: dict[str, Any],
    hidden: tuple[frozenset[str], frozenset[str]] | None,
    reveal_sensitive: bool,
) -> list[Parameter]:
    """Every argument of the proposal. A tool no longer in this process's registry: what the
    request stored (its sensitive values already masked)."""
    if hidden is None:
        stored = request.get("parameters") or {}
        return [Parameter(name=k, value=_json(v)) for k, v in stored.items()]
    secret, sensitive = hidden
    shown = []
    for name, value in (proposal.arguments or {}).items():
        if name in secret:
            shown.append(Parameter(name=name, value=SECRET, masked="secret"))
        elif name in sensitive and not reveal_sensitive:
            shown.append(Parameter(name=name, value=SENSITIVE, masked="sensitive", sensitive=True))
        else:
            shown.append(Parameter(name=name, value=_json(value), sensitive=name in sensitive))
    return shown


def _revealed(
    run: Run, proposal: Proposal, hidden: tuple[frozenset[str], frozenset[str]] | None
) -> Revealed:
    """What an approver is shown of the proposal (the inbox's own masking), as JSON values."""
    request = dict(proposal.confirmation_request or {})
    shown = _parameters(proposal, request, hidden, True)
    return Revealed(
        run_id=run.id,
        proposal_hash=str(proposal.proposal_hash),
        tool=str(request.get("tool", proposal.tool)),
        tool_version=str(request.get("tool_version", proposal.tool_version)),
        arguments={p.name: p.value if p.masked else json.loads(p.value) for p in shown},
        fields=[p.name for p in shown if p.sensitive and not p.masked],
    )


def _cited(o: Observation) -> CitedObservation:
    text = _json(o.content)
    excerpt = text if len(text) <= EXCERPT_CHARS else text[:EXCERPT_CHARS] + " …"
    return CitedObservation(
        observation_id=o.observation_id,
        kind=o.kind,
        source=o.source,
        step=o.step,
        excerpt=excerpt,
        untrusted=o.source == ObservationSource.UNTRUSTED_CONTENT.value,
    )


def _json(value: Any) -> str:
    """JSON text: a string shows its quotes, so ``"42"`` and ``42`` never look alike."""
    return json.dumps(value, ensure_ascii=False)


def budget_rows(run: Run) -> list[dict[str, Any]]:
    """What the run has used of each budget, and the limit (``None``: unlimited)."""
    try:
        limits = Budgets.model_validate((run.spec or {}).get("budgets") or {})
    except ValueError:
        limits = Budgets()
    return [
        {"name": "steps", "used": run.step, "limit": limits.max_steps},
        {"name": "model calls", "used": run.model_calls, "limit": limits.max_model_calls},
        {"name": "tool calls", "used": run.tool_calls, "limit": limits.max_tool_calls},
        {"name": "tokens", "used": run.tokens_used, "limit": limits.max_tokens},
        {"name": "cost", "used": round(run.cost_used, 6), "limit": limits.max_cost},
        {"name": "deadline", "used": None, "limit": run.deadline_at.isoformat()},
    ]
