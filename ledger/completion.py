"""The ledger facts a run's success conditions are checked on (queries only): the spec's
``success`` declaration, the run's calls whose outcome succeeded, the paths of its artifacts.
The pure :func:`warrant.runner.success.check_success` decides."""

from __future__ import annotations

from typing import Any

from sqlalchemy import exists, or_, select

from warrant.ledger.models import Artifact, Command, OutcomeRow, Run
from warrant.runner.spec import SuccessSpec
from warrant.runner.success import CompletionFacts, SucceededCall

__all__ = ["completion_facts", "success_of"]


def success_of(conn: Any, run_id: str) -> SuccessSpec | None:
    """The run's ``success`` declaration (None: the spec declares none)."""
    declared = conn.execute(select(Run.spec["success"]).where(Run.id == run_id)).scalar()
    return SuccessSpec.model_validate(declared) if declared else None


def completion_facts(conn: Any, run_id: str) -> CompletionFacts:
    """What the run did, as the ledger says: each command with an outcome that succeeded, a
    job that ended succeeded, or an unknown effect found applied; and its stored artifacts."""
    succeeded = exists().where(
        OutcomeRow.command_id == Command.id,
        or_(
            OutcomeRow.status == "succeeded",
            OutcomeRow.resolved_status.in_(("applied", "succeeded")),
        ),
    )
    calls = conn.execute(
        select(Command.tool, Command.tool_version, Command.arguments, Command.step)
        .where(Command.run_id == run_id, succeeded)
        .order_by(Command.step)
    ).all()
    paths = conn.execute(select(Artifact.path).where(Artifact.run_id == run_id)).scalars()
    return CompletionFacts(
        succeeded_calls=tuple(
            SucceededCall(tool, version, arguments or {}, step)
            for tool, version, arguments, step in calls
        ),
        artifact_paths=frozenset(paths),
    )
