"""What an approver is shown: each run waiting for a confirmation, with the exact proposal.

The confirmation request stored on the proposal masks every sensitive argument (it goes into
the trace, webhooks and handoff bundles). The approver must see what they approve, so this
reads the proposal's own normalized arguments and masks only the tool's ``secret_fields``
(and, for a reader who may not confirm, the ``sensitive_fields`` too). One part of
:class:`warrant.runner.client.api.Client`.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

from warrant.ledger import reads
from warrant.ledger.db import retry_once_on_disconnect, session_scope
from warrant.ledger.models import Observation, Proposal, Run
from warrant.runner.client.runs import RunsClient
from warrant.runner.codes import ObservationSource

__all__ = [
    "DEFAULT_INBOX_LIMIT",
    "CitedObservation",
    "InboxClient",
    "Parameter",
    "PendingConfirmation",
    "budget_rows",
]

DEFAULT_INBOX_LIMIT = 100
"""How many waiting runs the inbox shows at most (the longest waiting first)."""

SECRET = "<secret>"
SENSITIVE = "<sensitive>"
EXCERPT_CHARS = 600

UNDO = {
    "read": "Nothing to undo: it only reads.",
    "idempotent-write": "Not undone automatically; doing it again changes nothing more.",
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
    """Set when an argument's value came only from untrusted content (the provenance check)."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class InboxClient(RunsClient):
    """The approval inbox's reads."""

    @retry_once_on_disconnect
    def pending_confirmations(
        self, *, reveal_sensitive: bool, limit: int = DEFAULT_INBOX_LIMIT
    ) -> list[PendingConfirmation]:
        """The runs waiting for a confirmation, longest waiting first. ``reveal_sensitive``:
        whether the reader may see sensitive values (who may confirm must)."""
        from warrant.tools.plugins import registry_for

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
                found.append(_pending(run, proposal, cited, hidden, reveal_sensitive, raw))
        return found

    @retry_once_on_disconnect
    def budgets(self, run_id: str) -> list[dict[str, Any]]:
        """The run's budgets: used and limit of each (:class:`RunNotFound` if no run)."""
        from warrant.runner.errors import RunNotFound

        with session_scope(self.engine) as s:
            run = reads.run(s, run_id)
            if run is None:
                raise RunNotFound(f"no run {run_id}")
            return budget_rows(run)


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
    from warrant.runner.spec import Budgets

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
