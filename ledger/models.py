"""SQLAlchemy 2 models of the ledger (PostgreSQL only).

``runs`` is the authoritative state; every transition is a compare-and-set on
``runs.version``. The other tables are append-mostly facts bound to a run.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import (
    BigInteger,
    Boolean,
    CheckConstraint,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    UniqueConstraint,
    text,
)
from sqlalchemy.orm import Mapped, configure_mappers, mapped_column

from warrant.ledger.model_base import JSON, Base, ViewBase
from warrant.ledger.model_base import created_now as _now
from warrant.ledger.models_api import ApiToken, LedgerAnchor, WebhookDelivery

__all__ = [
    "ApiToken",
    "Artifact",
    "Base",
    "CallerKey",
    "Command",
    "Confirmation",
    "GrantRow",
    "Handoff",
    "LedgerAnchor",
    "McpToolPin",
    "MemoryRecord",
    "Observation",
    "OutcomeRow",
    "PolicyApproval",
    "Proposal",
    "Reconciliation",
    "Run",
    "ToolSwitch",
    "TraceEvent",
    "TraceRecord",
    "WebhookDelivery",
    "WorkerRegistration",
]


class Run(Base):
    __tablename__ = "runs"

    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    status: Mapped[str] = mapped_column(String(32))
    phase: Mapped[str] = mapped_column(String(16))
    version: Mapped[int] = mapped_column(Integer, default=1)
    step: Mapped[int] = mapped_column(Integer, default=0)
    model_calls: Mapped[int] = mapped_column(Integer, default=0)
    tool_calls: Mapped[int] = mapped_column(Integer, default=0)
    tool_calls_by_tool: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    observation_version: Mapped[int] = mapped_column(Integer, default=0)
    tokens_used: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    cost_used: Mapped[float] = mapped_column(Float, default=0.0, server_default="0")
    trace_seq: Mapped[int] = mapped_column(Integer, default=0)
    stop_reason: Mapped[str | None] = mapped_column(String(64))
    stop_detail: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    answer: Mapped[str | None] = mapped_column(Text)
    goal: Mapped[str] = mapped_column(Text)
    subject: Mapped[str] = mapped_column(String(200))
    spec: Mapped[dict[str, Any]] = mapped_column(JSON)
    deadline_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    pending_proposal_id: Mapped[int | None] = mapped_column(BigInteger)
    active_command_id: Mapped[str | None] = mapped_column(String(36))
    trace_id: Mapped[str | None] = mapped_column(String(32))
    fan_out: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    """The open parallel step (``warrant.runner.fan_in.FanOut``) until its verdict (0022)."""
    created_at: Mapped[datetime] = _now()
    updated_at: Mapped[datetime] = _now()
    finished_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    idempotency_key: Mapped[str | None] = mapped_column(String(200))
    """The producer's key of this start: the same key again returns this run (migration 0011)."""
    spec_hash: Mapped[str | None] = mapped_column(String(64))
    """sha256 of the canonical JSON of the validated spec."""
    started_by: Mapped[str | None] = mapped_column(String(200))
    republish_version: Mapped[int | None] = mapped_column(Integer)
    """The version the stalled-run sweep last re-published (migration 0015)."""
    republish_count: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    """How many times in a row it re-published that version: the next waits longer."""
    parent_run_id: Mapped[str | None] = mapped_column(
        String(36), ForeignKey("runs.id", ondelete="SET NULL"), nullable=True
    )
    """The run whose ``delegate`` call started this one; ``None``: a producer's (0024)."""
    delegation: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    """A child's spawn terms: the parent's command, what it reserved, ``settled`` (0024)."""
    model_calls_delegated: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    """Of ``model_calls``, those the run's sub-runs hold (reserved, or used): 0024."""
    plan: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    """The planner's latest plan (``kind: plan``; its own notes, never trusted): 0027."""
    waiting: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    """The wait a planner's ``kind: wait`` committed, while the run is at its ``step``: 0027."""
    kind: Mapped[str] = mapped_column(String(16), default="live", server_default="live")
    """``live``, ``replay`` (re-decided by today's gate, executes nothing) or ``fork``: 0028."""
    source_run_id: Mapped[str | None] = mapped_column(
        String(36), ForeignKey("runs.id", ondelete="SET NULL"), nullable=True
    )
    """The run a replay or a fork came from (0028)."""
    source_step: Mapped[int | None] = mapped_column(Integer, nullable=True)
    """The step of its source a fork starts at (0028)."""

    __table_args__ = (
        Index("ix_runs_status", "status"),
        Index("ix_runs_created", "created_at"),
        Index(
            "ix_runs_parent", "parent_run_id", postgresql_where=text("parent_run_id IS NOT NULL")
        ),
        Index(
            "ix_runs_source", "source_run_id", postgresql_where=text("source_run_id IS NOT NULL")
        ),
        Index(
            "uq_runs_idempotency_key",
            "idempotency_key",
            unique=True,
            postgresql_where=text("idempotency_key IS NOT NULL"),
        ),
        # the oldest finished runs first (ledger prune; migration 0012)
        Index(
            "ix_runs_finished",
            "finished_at",
            postgresql_where=text("status IN ('completed', 'failed', 'cancelled')"),
        ),
        {"postgresql_with": {"fillfactor": 70}},  # room for HOT updates (migration 0006)
    )


class Proposal(Base):
    __tablename__ = "proposals"

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=True)
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"))
    step: Mapped[int] = mapped_column(Integer)
    branch: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    """A parallel step's call 1..N; 0: the step's own proposal (migration 0022)."""
    proposal_id: Mapped[str | None] = mapped_column(String(200))
    kind: Mapped[str] = mapped_column(String(16))
    tool: Mapped[str | None] = mapped_column(String(200))
    tool_version: Mapped[str | None] = mapped_column(String(50))
    raw: Mapped[Any | None] = mapped_column(JSON, nullable=True)
    arguments: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    fingerprint: Mapped[str | None] = mapped_column(String(64))
    proposal_hash: Mapped[str | None] = mapped_column(String(64))
    observation_version: Mapped[int] = mapped_column(Integer)
    status: Mapped[str] = mapped_column(String(32))
    rejection_code: Mapped[str | None] = mapped_column(String(64))
    confirmation_request: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    provenance: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    created_at: Mapped[datetime] = _now()

    __table_args__ = (
        UniqueConstraint("run_id", "step", "branch", name="uq_proposals_run_step"),
        Index("ix_proposals_run_version", "run_id", "observation_version", "step"),
    )


class Command(Base):
    __tablename__ = "commands"

    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"))
    proposal_pk: Mapped[int] = mapped_column(ForeignKey("proposals.id", ondelete="CASCADE"))
    proposal_id: Mapped[str] = mapped_column(String(200))
    step: Mapped[int] = mapped_column(Integer)
    branch: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    """A parallel step's branch 1..N; 0: an ordinary step's command (migration 0022)."""
    cut_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    """When its step's merge cut the branch: a running attempt is interrupted (0022)."""
    tool: Mapped[str] = mapped_column(String(200))
    tool_version: Mapped[str] = mapped_column(String(50))
    arguments: Mapped[dict[str, Any]] = mapped_column(JSON)
    arguments_hash: Mapped[str] = mapped_column(String(64))
    idempotency_token: Mapped[str] = mapped_column(String(64))
    status: Mapped[str] = mapped_column(String(16))
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    worker: Mapped[str | None] = mapped_column(String(200))
    timeout_s: Mapped[float] = mapped_column(Float)
    deadline_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    confirmation_id: Mapped[str | None] = mapped_column(String(36))
    grant_ids: Mapped[list[Any]] = mapped_column(JSON, default=list)
    effect_key: Mapped[str | None] = mapped_column(String(300), nullable=True)
    """The tool's business effect key over the arguments (``refund:42``; migration 0023)."""
    created_at: Mapped[datetime] = _now()
    started_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    heartbeat_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    """Renewed while a threads-pool attempt runs (its lease; migration 0016); NULL on prefork."""
    finished_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))

    __table_args__ = (
        UniqueConstraint("run_id", "step", "branch", name="uq_commands_run_step"),
        # the reconciler's lease check; completed commands take no entry (migration 0007)
        Index("ix_commands_started", "started_at", postgresql_where=text("status = 'started'")),
        # the foreign-key check when a proposal is deleted (ledger prune; migration 0012)
        Index("ix_commands_proposal", "proposal_pk"),
        Index(
            "ix_commands_effect_key",
            "effect_key",
            "created_at",
            postgresql_where=text("effect_key IS NOT NULL"),
        ),
    )


class CallerKey(Base):
    """A caller's key of a proposal (a tool-call id, an MCP request, an ``Idempotency-Key``):
    the step and branch it became and the digest of the call it named (migration 0023)."""

    __tablename__ = "caller_keys"

    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True)
    key: Mapped[str] = mapped_column(String(200), primary_key=True)
    step: Mapped[int] = mapped_column(Integer)
    branch: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    digest: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[datetime] = _now()


class OutcomeRow(Base):
    __tablename__ = "outcomes"

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=True)
    command_id: Mapped[str] = mapped_column(ForeignKey("commands.id", ondelete="CASCADE"))
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), index=True)
    status: Mapped[str] = mapped_column(String(16))
    code: Mapped[str | None] = mapped_column(String(64))
    retryable: Mapped[bool] = mapped_column(Boolean, default=False)
    message: Mapped[str | None] = mapped_column(Text)
    output: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    attempt: Mapped[int] = mapped_column(Integer, default=1)
    duration_ms: Mapped[float | None] = mapped_column(Float)
    resolved_status: Mapped[str | None] = mapped_column(String(16))
    """For ``unknown``: what reconciliation found (``applied``/``not_applied``/``handoff``)."""
    resolved_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    reconcile_attempts: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    next_reconcile_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    created_at: Mapped[datetime] = _now()

    __table_args__ = (
        UniqueConstraint("command_id", "attempt", name="uq_outcomes_command_attempt"),
    )


class Observation(Base):
    __tablename__ = "observations"

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=True)
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"))
    observation_id: Mapped[str] = mapped_column(String(64))
    kind: Mapped[str] = mapped_column(String(32))
    source: Mapped[str] = mapped_column(String(32))
    step: Mapped[int] = mapped_column(Integer)
    content: Mapped[dict[str, Any]] = mapped_column(JSON)
    content_hash: Mapped[str] = mapped_column(String(64))
    observation_version: Mapped[int] = mapped_column(Integer)
    expires_after_step: Mapped[int | None] = mapped_column(Integer)
    created_at: Mapped[datetime] = _now()

    __table_args__ = (
        UniqueConstraint("run_id", "observation_id", name="uq_observations_run_obs"),
        Index("ix_observations_run_order", "run_id", "id"),
        Index("ix_observations_run_hash", "run_id", "content_hash"),
    )


class TraceRecord(Base):
    """One transition's trace events, in order, in one row (migration 0013): ``events`` is
    ``[[name, details], …]`` and ``seq`` the first event's number (the next ones follow it).
    Append-only. Read them one event per row through :class:`TraceEvent`."""

    __tablename__ = "trace_records"

    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True)
    seq: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    step: Mapped[int] = mapped_column(Integer)
    proposal_id: Mapped[str | None] = mapped_column(String(200))
    events: Mapped[list[Any]] = mapped_column(JSON)
    created_at: Mapped[datetime] = _now()
    prev_hash: Mapped[str] = mapped_column(String(64))  # set by the chain trigger (0018)
    hash: Mapped[str] = mapped_column(String(64))  # see warrant.ledger.chain


class TraceEvent(ViewBase):
    """One trace event per row: the ``trace_events`` view over :class:`TraceRecord` (read
    only; not in ``Base.metadata``, so neither migrations nor retention take it for a
    table)."""

    __tablename__ = "trace_events"

    run_id: Mapped[str] = mapped_column(String(36), primary_key=True)
    seq: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    event: Mapped[str] = mapped_column(String(64))
    step: Mapped[int] = mapped_column(Integer)
    proposal_id: Mapped[str | None] = mapped_column(String(200))
    details: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))


class GrantRow(Base):
    __tablename__ = "grants"

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=True)
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), index=True)
    capability: Mapped[str] = mapped_column(String(100))
    resource_scope: Mapped[str] = mapped_column(String(500))
    expires_at_step: Mapped[int | None] = mapped_column(Integer)
    max_uses: Mapped[int | None] = mapped_column(Integer)
    uses: Mapped[int] = mapped_column(Integer, default=0)
    source: Mapped[str] = mapped_column(String(16), default="spec")
    destinations_from: Mapped[list[str] | None] = mapped_column(JSON, nullable=True)
    """A task-scoped grant's sources (``Grant.destinations_from``); NULL: not narrowed."""
    expires_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    """Wall-clock expiry, compared with the database's clock; NULL: none (migration 0020)."""
    constraints: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    """Limits on a call's argument values (``Grant.constraints``); NULL: none (migration
    0026)."""
    created_at: Mapped[datetime] = _now()


class Confirmation(Base):
    __tablename__ = "confirmations"

    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), index=True)
    proposal_hash: Mapped[str] = mapped_column(String(64))
    tool: Mapped[str] = mapped_column(String(200))
    approved: Mapped[bool] = mapped_column(Boolean)
    used: Mapped[bool] = mapped_column(Boolean, default=False)
    expires_at_step: Mapped[int] = mapped_column(Integer)
    expires_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    decided_by: Mapped[str] = mapped_column(String(200))
    created_at: Mapped[datetime] = _now()
    used_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    precondition_fingerprint: Mapped[str | None] = mapped_column(String(64))  # 0021
    covers_run: Mapped[bool] = mapped_column(Boolean, default=False, server_default="false")
    """A ``per-run`` approval: once used, it covers the tool's later calls in the run (0025)."""


class PreApproval(Base):
    """An exact proposal (tool, version, arguments; by its hash) approved ahead of time."""

    __tablename__ = "pre_approvals"

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=True)
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"))
    proposal_hash: Mapped[str] = mapped_column(String(64))
    tool: Mapped[str] = mapped_column(String(200))
    tool_version: Mapped[str] = mapped_column(String(50))
    arguments: Mapped[dict[str, Any]] = mapped_column(JSON)
    approved_by: Mapped[str] = mapped_column(String(200))
    approved_at: Mapped[datetime] = _now()
    used_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    used_by_proposal: Mapped[str | None] = mapped_column(String(200))

    __table_args__ = (Index("ix_pre_approvals_run", "run_id", "proposal_hash"),)


class Artifact(Base):
    __tablename__ = "artifacts"

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=True)
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"))
    path: Mapped[str] = mapped_column(String(300))
    content: Mapped[str] = mapped_column(Text)
    sha256: Mapped[str] = mapped_column(String(64))
    idempotency_token: Mapped[str] = mapped_column(String(64), unique=True)
    created_at: Mapped[datetime] = _now()

    __table_args__ = (Index("ix_artifacts_run_path", "run_id", "path"),)


class MemoryRecord(Base):
    __tablename__ = "memory_records"

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=True)
    subject: Mapped[str] = mapped_column(String(200))
    key: Mapped[str] = mapped_column(String(100))
    value: Mapped[str] = mapped_column(Text)
    version: Mapped[int] = mapped_column(Integer)
    source_kind: Mapped[str] = mapped_column(String(32))
    confirmation_id: Mapped[str | None] = mapped_column(String(36))
    created_by_run: Mapped[str | None] = mapped_column(String(36))
    idempotency_token: Mapped[str | None] = mapped_column(String(64), unique=True)
    expires_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    revoked_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    revoked_by: Mapped[str | None] = mapped_column(String(200))
    created_at: Mapped[datetime] = _now()

    __table_args__ = (
        UniqueConstraint("subject", "key", "version", name="uq_memory_subject_key_version"),
        # Only user confirmations are a source, and nothing is an instruction.
        CheckConstraint("source_kind = 'user-confirmation'", name="ck_memory_source"),
        CheckConstraint("key <> 'system_instruction'", name="ck_memory_not_instruction"),
        Index("ix_memory_subject_key", "subject", "key"),
    )


class Reconciliation(Base):
    """One reconciliation attempt of an unknown effect (the history a person sees)."""

    __tablename__ = "reconciliations"

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=True)
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), index=True)
    command_id: Mapped[str] = mapped_column(ForeignKey("commands.id", ondelete="CASCADE"))
    attempt: Mapped[int] = mapped_column(Integer)
    result: Mapped[str] = mapped_column(String(16))
    detail: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    created_at: Mapped[datetime] = _now()

    __table_args__ = (Index("ix_reconciliations_command", "command_id"),)  # migration 0012


class Handoff(Base):
    """A run handed to a person, with everything they need (``bundle``)."""

    __tablename__ = "handoffs"

    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), index=True)
    reason: Mapped[str] = mapped_column(String(64))
    bundle: Mapped[dict[str, Any]] = mapped_column(JSON)
    created_at: Mapped[datetime] = _now()
    resolved_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    resolved_by: Mapped[str | None] = mapped_column(String(200))
    resolution: Mapped[str | None] = mapped_column(String(16))
    resolution_reason: Mapped[str | None] = mapped_column(Text)

    __table_args__ = (Index("ix_handoffs_open", "resolved_at"),)


# Configure the mappers now, at import, not lazily at a process's first ORM query: that query
# may run inside a tool, and a soft time limit or a cancel's SIGUSR1 arriving during lazy
# configuration would leave every mapper of that worker process broken for good.
configure_mappers()


# -- MCP tool pins: the definition of each declared MCP server tool an operator accepted (or
# that its first use pinned), by hash. Re-exported by :mod:`warrant.ledger.models`.


class McpToolPin(Base):
    """One server tool's pinned definition (``warrant.tools._mcp_pins``): the policy gate
    refuses its calls (``MCP_TOOL_CHANGED``) while the server serves another one."""

    __tablename__ = "mcp_tool_pins"

    server: Mapped[str] = mapped_column(String(64), primary_key=True)
    tool: Mapped[str] = mapped_column(String(64), primary_key=True)
    """The server's name of the tool."""
    definition_hash: Mapped[str] = mapped_column(String(64))
    definition: Mapped[dict[str, Any]] = mapped_column(JSON)
    """Name, description, inputSchema and annotations, as the server served them."""
    accepted_by: Mapped[str] = mapped_column(String(200))
    """Who accepted it: an operator (``warrant mcp accept --by``) or ``first-use:<run id>``."""
    accepted_at: Mapped[datetime] = _now()
    history: Mapped[list[Any]] = mapped_column(JSON)
    """Every acceptance, oldest first: ``definition_hash``, ``accepted_by``, ``accepted_at``,
    ``replaced`` (the hash it replaced, ``None`` for the first) and ``changed`` fields."""


class ToolSwitch(Base):
    """A tool an operator disabled (``warrant tools disable``; migration 0025): while
    ``disabled``, the policy gate refuses its calls (``TOOL_DISABLED``) and the tool stage
    will not start a command issued for it. Every change is kept in ``history``."""

    __tablename__ = "tool_switches"

    tool: Mapped[str] = mapped_column(String(200), primary_key=True)
    disabled: Mapped[bool] = mapped_column(Boolean)
    reason: Mapped[str | None] = mapped_column(Text)
    changed_by: Mapped[str] = mapped_column(String(200))
    changed_at: Mapped[datetime] = _now()
    history: Mapped[list[Any]] = mapped_column(JSON)
    """Every change, oldest first: ``event`` (``tool.disabled`` or ``tool.enabled``),
    ``by``, ``at`` and ``reason``."""


class PolicyApproval(Base):
    """A policy version an operator approved (``warrant policy approve``; migration 0028):
    with ``WARRANT_POLICY_APPROVAL=required`` a policy worker decides only under an approved
    policy hash; under another it refuses every proposal ``POLICY_NOT_APPROVED``."""

    __tablename__ = "policy_approvals"

    policy_hash: Mapped[str] = mapped_column(String(64), primary_key=True)
    approved_by: Mapped[str] = mapped_column(String(200))
    approved_at: Mapped[datetime] = _now()
    form: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    """The policy's form when approved (contracts and settings), for the next diff."""
    note: Mapped[str | None] = mapped_column(Text, nullable=True)


# -- The workers' registrations (one row per worker process): what tool set each running worker
# has. Re-exported by :mod:`warrant.ledger.models`.


class WorkerRegistration(Base):
    """What tool set a running worker has: written when it starts, refreshed while it runs,
    removed when it stops. The policy gate and ``warrant tools check`` read it to tell when
    the roles disagree."""

    __tablename__ = "worker_registrations"

    process: Mapped[str] = mapped_column(String(80), primary_key=True)
    """The worker process's identity (``<pid>.<started>.<space>``; unique across hosts)."""
    node: Mapped[str] = mapped_column(String(255), index=True)
    """Celery node name (``tool-1234@host``): for people; two workers may share one."""
    roles: Mapped[list[Any]] = mapped_column(JSON)
    queues: Mapped[list[Any]] = mapped_column(JSON)
    fingerprint: Mapped[str] = mapped_column(String(64))
    tools: Mapped[list[Any]] = mapped_column(JSON)
    """``name@version`` of every tool in the worker's registry."""
    pid: Mapped[int] = mapped_column(Integer)
    started_at: Mapped[datetime] = _now()
    seen_at: Mapped[datetime] = _now()
