"""Repositories: the only SQL the stages use. Every run transition is a compare-and-set."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    Connection,
    Integer,
    String,
    bindparam,
    case,
    event,
    exists,
    func,
    select,
    update,
)
from sqlalchemy.dialects.postgresql import JSONB, insert
from sqlalchemy.orm import Session
from sqlalchemy.sql.functions import FunctionElement

from warrant.ledger import webhooks
from warrant.ledger._compiled import Compiled
from warrant.ledger.chain import row_hash
from warrant.ledger.models import (
    Command,
    Observation,
    OutcomeRow,
    Run,
    TraceRecord,
)
from warrant.runner.canonical import content_hash
from warrant.runner.codes import CommandStatus, ErrorCode, ObservationKind, Phase, RunStatus
from warrant.runner.errors import StateConflict
from warrant.runner.run_machine import NEXT_PROPOSAL_ID, NOW, Change
from warrant.runner.spec import Budgets
from warrant.runner.views import ObservationView, RunView

__all__ = [
    "NEXT_PROPOSAL_ID",
    "ROWS_HASHED",
    "Guarded",
    "NewObservation",
    "StaleVersion",
    "append_events",
    "charge_usage",
    "commit",
    "note_rows",
    "observations_of",
    "run_view",
    "to_datetime",
    "transition",
    "with_row_hashes",
]


class StaleVersion(StateConflict):
    """The compare-and-set lost: another message already moved the run.

    Raised on the hot path (every duplicate delivery): no ``__init__`` of its own, the
    code is the class attribute."""

    code: str = ErrorCode.STALE_VERSION


@dataclass(frozen=True)
class NewObservation:
    observation_id: str
    kind: ObservationKind
    source: str
    content: dict[str, Any]
    expires_after_step: int | None = None


def to_datetime(ts: float) -> datetime:
    return datetime.fromtimestamp(ts, tz=UTC)


def run_view(run: Run | Any) -> RunView:
    """The pure core's view of a run (an ORM row or a ``warrant.ledger.stage_loads`` row)."""
    return RunView(
        run_id=run.id,
        status=RunStatus(run.status),
        phase=Phase(run.phase),
        version=run.version,
        step=run.step,
        model_calls=run.model_calls,
        tool_calls=run.tool_calls,
        observation_version=run.observation_version,
        deadline_at=run.deadline_at.timestamp(),
        subject=run.subject,
        budgets=_budgets_of(run),
        tool_calls_by_tool=dict(run.tool_calls_by_tool or {}),
        tokens_used=run.tokens_used or 0,
        cost_used=run.cost_used or 0.0,
        model_calls_delegated=getattr(run, "model_calls_delegated", 0) or 0,
    )


def _budgets_of(run: Any) -> Budgets:
    text = getattr(run, "budgets_json", None)  # a warrant.ledger.stage_loads row selects only these
    if text is not None:
        return _budgets_from_json(text)
    return Budgets.model_validate(run.spec.get("budgets", {}))


@functools.lru_cache(maxsize=256)
def _budgets_from_json(text: str) -> Budgets:
    """A run's budgets never change, and a stage reads them for every message: validated once
    per text (PostgreSQL prints a ``jsonb`` value the same way every time). Frozen model."""
    return Budgets.model_validate_json(text)


_OBSERVATIONS_OF_RUN = Compiled.of(
    select(
        Observation.observation_id,
        Observation.kind,
        Observation.step,
        Observation.content["status"].astext,
    )
    .where(Observation.run_id == bindparam("run_id"))
    .order_by(Observation.id)
)


def observations_of(s: Session | Connection, run_id: str) -> list[ObservationView]:
    """The run's observations, oldest first (what a final answer may cite)."""
    return [
        ObservationView(
            observation_id=o, kind=ObservationKind(k), step=st, **ObservationView.flags(stat)
        )
        for o, k, st, stat in _OBSERVATIONS_OF_RUN.all(s, {"run_id": run_id})
    ]


#: ``Session.info`` key: decision rows a session wrote whose hashes no event carries yet.
_NOTED = "warrant.row_hashes"

#: The event that carries the hashes of the decision rows its record's transaction wrote.
ROWS_HASHED = "ledger.rows_hashed"


def note_rows(s: Session, run_id: str, rows: Iterable[tuple[str, Mapping[str, Any]]]) -> None:
    """Decision rows the session wrote on the run (``(table, values)``): their content
    hashes (:func:`warrant.ledger.chain.row_hash`) go into the next trace record the session
    writes for the run (its ``ledger.rows_hashed`` event), or into a record of their own at
    its commit."""
    noted = s.info.setdefault(_NOTED, [])
    noted += [(run_id, table, row_hash(table, values)) for table, values in rows]


def _take_noted(s: Session | Connection, run_id: str) -> list[tuple[str, str]]:
    noted = s.info.get(_NOTED) if isinstance(s, Session) else None
    if not noted:
        return []
    s.info[_NOTED] = [n for n in noted if n[0] != run_id]
    return [(table, h) for r, table, h in noted if r == run_id]


def with_row_hashes(
    events: Sequence[tuple[str, dict[str, Any]]], rows: Sequence[tuple[str, str]]
) -> Sequence[tuple[str, dict[str, Any]]]:
    """``events`` and, when the record's transaction wrote decision rows, a last
    ``ledger.rows_hashed`` event: ``row_hashes``, ``[table, hash]`` per row (in the same
    record as the events that say why they were written, so in the same statement)."""
    if not rows:
        return events
    return [*events, (ROWS_HASHED, {"row_hashes": [[table, h] for table, h in rows]})]


@event.listens_for(Session, "before_commit")
def _record_noted_rows(s: Session) -> None:
    """Row hashes noted in a session that wrote no trace record for their run afterwards."""
    noted = s.info.pop(_NOTED, None)
    for run_id in dict.fromkeys(r for r, _, _ in noted or ()):
        rows = [[table, h] for r, table, h in noted or () if r == run_id]
        step = s.execute(select(Run.step).where(Run.id == run_id)).scalar_one_or_none()
        if step is not None:
            append_events(s, run_id, [(ROWS_HASHED, {"row_hashes": rows})], step=step)


@event.listens_for(Session, "after_rollback")
def _forget_noted_rows(s: Session) -> None:
    s.info.pop(_NOTED, None)


def append_events(
    s: Session,
    run_id: str,
    events: Sequence[tuple[str, dict[str, Any]]],
    *,
    step: int,
    proposal_id: str | None = None,
    last_seq: int | None = None,
) -> None:
    """Append trace events, one record, with per-run sequence numbers (allocated on the run
    row); with them, the hashes of the decision rows the session noted (:func:`note_rows`)."""
    events = with_row_hashes(events, _take_noted(s, run_id))
    if not events:
        return
    if last_seq is None:
        last_seq = s.execute(
            update(Run)
            .where(Run.id == run_id)
            .values(trace_seq=Run.trace_seq + len(events))
            .returning(Run.trace_seq)
        ).scalar_one()
    s.execute(
        insert(TraceRecord).values(
            run_id=run_id,
            seq=last_seq - len(events) + 1,
            step=step,
            proposal_id=proposal_id,
            events=[[name, details] for name, details in events],
        )
    )


@dataclass(frozen=True)
class Guarded:
    """A write that belongs to a transition: it runs in the transition's own statement and only
    if the compare-and-set wins. ``shape`` names the statement's form (statements are built
    once per shape and cached); ``build`` gets the CAS result (a CTE) and returns the DML,
    whose bind parameters come from ``params``."""

    shape: str
    build: Callable[[Any], Any]
    params: dict[str, Any]
    rows: tuple[tuple[str, str], ...] = ()
    """The decision rows it writes, ``(table, row hash)``: recorded with the transition's
    events (:func:`with_row_hashes`)."""


_RUNS: Any = Run.__table__
_EVENTS: Any = TraceRecord.__table__
_OBSERVATIONS: Any = Observation.__table__
_STATEMENTS: dict[tuple[Any, ...], Compiled] = {}


_COMMANDS: Any = Command.__table__


def _transition_statement(
    change_keys: tuple[tuple[str, str], ...],
    observation: bool,
    guarded: tuple[Guarded, ...],
    attempt_guard: bool = False,
) -> Compiled:
    key = (change_keys, observation, tuple(g.shape for g in guarded), attempt_guard)
    cached = _STATEMENTS.get(key)
    if cached is not None:
        return cached
    inline = {"now": func.now(), "next_proposal_id": func.nextval("proposals_id_seq")}
    values: dict[str, Any] = {
        name: inline[kind] if kind in inline else bindparam(f"c_{name}", type_=_RUNS.c[name].type)
        for name, kind in change_keys
    }
    n_events = bindparam("cas_n", type_=Integer)
    if observation:
        seen = exists().where(
            _OBSERVATIONS.c.run_id == bindparam("cas_run"),
            _OBSERVATIONS.c.content_hash == bindparam("o_hash"),
        )
        values["observation_version"] = _RUNS.c.observation_version + case((seen, 0), else_=1)
    values["version"] = _RUNS.c.version + 1
    values["trace_seq"] = _RUNS.c.trace_seq + n_events
    values["updated_at"] = func.now()
    where = [_RUNS.c.id == bindparam("cas_run"), _RUNS.c.version == bindparam("cas_expected")]
    if attempt_guard:
        where.append(
            exists().where(
                _COMMANDS.c.id == bindparam("cas_command", type_=String),
                _COMMANDS.c.status == CommandStatus.STARTED.value,
                _COMMANDS.c.attempts == bindparam("cas_attempt", type_=Integer),
            )
        )
    upd = (
        update(_RUNS)
        .where(*where)
        .values(values)
        .returning(
            _RUNS.c.version,
            _RUNS.c.trace_seq,
            _RUNS.c.observation_version,
            _RUNS.c.pending_proposal_id,
        )
        .cte("cas")
    )
    events = insert(_EVENTS).from_select(
        ["run_id", "seq", "step", "proposal_id", "events"],
        select(
            bindparam("cas_run", type_=String),
            upd.c.trace_seq - n_events + 1,
            bindparam("cas_step", type_=Integer),
            bindparam("cas_pid", type_=String),
            bindparam("cas_events", type_=JSONB),
        )
        .select_from(upd)
        .where(n_events > 0),  # a transition without events writes no record
        include_defaults=False,
    )
    ctes = [events.cte("events")]
    if observation:
        cols = ["observation_id", "kind", "source", "content", "content_hash", "expires_after_step"]
        ctes.append(
            insert(_OBSERVATIONS)
            .from_select(
                ["run_id", "step", "observation_version", *cols],
                select(
                    bindparam("cas_run", type_=String),
                    bindparam("cas_step", type_=Integer),
                    upd.c.observation_version,
                    *(bindparam(f"o_{c}", type_=_OBSERVATIONS.c[c].type) for c in cols),
                ).select_from(upd),
                include_defaults=False,
            )
            .cte("observation")
        )
    ctes += [g.build(upd).cte(f"w{i}") for i, g in enumerate(guarded)]
    statement = select(upd.c.version, upd.c.trace_seq, upd.c.observation_version).add_cte(*ctes)
    compiled = _STATEMENTS[key] = Compiled.of(statement)
    return compiled


def transition(
    s: Session | Connection,
    run_id: str,
    expected_version: int,
    *,
    changes: dict[str, Any],
    events: Sequence[tuple[str, dict[str, Any]]] = (),
    step: int,
    proposal_id: str | None = None,
    observation: NewObservation | None = None,
    guarded: Sequence[Guarded] = (),
    current_attempt: tuple[str, int] | None = None,
) -> int:
    """Compare-and-set the run from ``expected_version``; write its events, observation and
    ``guarded`` writes — all in one statement, so in autocommit mode one round trip.

    ``current_attempt`` (command id, attempt): the set also requires that command to be
    ``started`` at that attempt — an attempt that is no longer the command's current one
    writes nothing.

    Returns the new version, or raises :class:`StaleVersion` (then nothing was written; in a
    session the caller's transaction is rolled back, so nothing of the stale message is kept).
    """
    if isinstance(s, Session):
        s.flush()
    rows = [*(r for g in guarded for r in g.rows), *_take_noted(s, run_id)]
    events = with_row_hashes(events, rows)
    change_keys = tuple(sorted((k, _kind(v)) for k, v in changes.items()))
    params: dict[str, Any] = {
        "cas_run": run_id,
        "cas_expected": expected_version,
        "cas_n": len(events),
        "cas_events": [[name, details] for name, details in events],
        "cas_step": step,
        "cas_pid": proposal_id,
    }
    for name, kind in change_keys:
        if kind == "bind":
            params[f"c_{name}"] = changes[name]
    if observation is not None:
        params.update(
            o_observation_id=observation.observation_id,
            o_kind=observation.kind.value,
            o_source=observation.source,
            o_content=observation.content,
            o_hash=content_hash(observation.content),
            o_expires_after_step=observation.expires_after_step,
        )
        params["o_content_hash"] = params["o_hash"]
    for g in guarded:
        params.update(g.params)
    if current_attempt is not None:
        params["cas_command"], params["cas_attempt"] = current_attempt
    stmt = _transition_statement(
        change_keys, observation is not None, tuple(guarded), current_attempt is not None
    )
    row = stmt.first(s, params)
    if row is None:
        raise StaleVersion(f"run {run_id} is no longer at version {expected_version}")
    return int(row[0])


def commit(
    s: Session | Connection,
    change: Change,
    *,
    step: int,
    proposal_id: str | None = None,
    observation: NewObservation | None = None,
    guarded: Sequence[Guarded] = (),
    current_attempt: tuple[str, int] | None = None,
) -> int:
    """Commit one change of the run state machine (:mod:`warrant.runner.run_machine`) as a
    compare-and-set from ``change.version``, with the writes that belong to it (see
    :func:`transition`). Returns the new version, ``change.version + 1``."""
    changes = {k: func.now() if v is NOW else v for k, v in change.changes.items()}
    owed = webhooks.delivery_write(change.source, change.target, phase=changes.get("phase"))
    if owed is not None:  # the run waits for a person, has ended, or was decided: tell
        guarded = (*guarded, Guarded(*owed))
    return transition(
        s,
        change.run_id,
        change.version,
        changes=changes,
        events=change.events,
        step=step,
        proposal_id=proposal_id,
        observation=observation,
        guarded=guarded,
        current_attempt=current_attempt,
    )


def _kind(value: Any) -> str:
    if isinstance(value, FunctionElement) and getattr(value, "name", "") == "now":
        return "now"
    return "next_proposal_id" if value is NEXT_PROPOSAL_ID else "bind"


def record_outcome(s: Session, **values: Any) -> bool:
    """Insert the command's one outcome (its hash noted, :func:`note_rows`); False if one
    was already recorded."""
    inserted = s.execute(
        insert(OutcomeRow)
        .values(**values)
        .on_conflict_do_nothing(constraint="uq_outcomes_command_attempt")
        .returning(OutcomeRow.id)
    ).first()
    if inserted is not None:
        note_rows(s, values["run_id"], [("outcomes", values)])
    return inserted is not None


def command_for_update(s: Session, command_id: str) -> Command | None:
    return s.scalars(select(Command).where(Command.id == command_id).with_for_update()).first()


def charge_usage(
    s: Session,
    run_id: str,
    *,
    model_calls: int,
    tokens: int,
    cost: float,
    step: int,
    details: dict[str, Any],
    event: str = "model.usage.charged",
) -> None:
    """Add a call's usage to the run's counters whatever its version: the step that made a
    model call lost its compare-and-set (the run was cancelled or moved on meanwhile), or a
    tool's outcome is recorded under locks, but the call was billed all the same. Traced as
    ``event`` (``model.usage.charged``, ``tool.usage.charged``)."""
    s.execute(
        update(Run)
        .where(Run.id == run_id)
        .values(
            model_calls=Run.model_calls + model_calls,
            tokens_used=Run.tokens_used + tokens,
            cost_used=Run.cost_used + cost,
        )
    )
    charged = {"model_calls": model_calls, "tokens": tokens, "cost": cost, **details}
    append_events(s, run_id, [(event, charged)], step=step)
