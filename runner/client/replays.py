"""The client's replays and policy reviews (:mod:`warrant.runner.replay`): a run's recorded
proposals decided again by this process's policy (or a candidate's), nothing executed."""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from typing import Any

from warrant.ledger.replays import load_recorded, recent_run_ids, record_replay
from warrant.ledger.stage_loads import autocommit
from warrant.runner.client.runs import RunsClient
from warrant.runner.codes import ErrorCode
from warrant.runner.errors import InvalidRequest, RunNotFound
from warrant.runner.replay import (
    PolicyCandidate,
    RecordedRun,
    ReplayPolicy,
    diff_summary,
    replay_run,
    replay_runs,
)
from warrant.runner.settings import load_settings
from warrant.tools._plugins import registry_for

__all__ = ["MAX_DIFF_RUNS", "ReplaysClient", "current_policy"]

#: The most runs one policy review replays, and how many it reads per statement.
MAX_DIFF_RUNS, READ_BATCH = 10_000, 200


def current_policy(candidate: dict[str, Any] | None = None) -> ReplayPolicy:
    """This process's policy (its registry, ``WARRANT_RELAX_CONFIRMATION``,
    ``WARRANT_OBSERVE_TOOLS``), with ``candidate``'s changes (``CANDIDATE_INVALID``)."""
    settings = load_settings()
    base = ReplayPolicy(
        registry=registry_for(settings),
        relaxed=settings.relaxed_tools,
        observed=settings.observed_tools,
    )
    return base.with_candidate(None if candidate is None else PolicyCandidate.parse(candidate))


class ReplaysClient(RunsClient):
    def replay_run(
        self, run_id: str, *, candidate: dict[str, Any] | None = None, by: str | None = None
    ) -> dict[str, Any]:
        """Decide ``run_id``'s recorded proposals again under this process's policy (or
        ``candidate``'s) with dry tools, and record the replay (a run of kind ``replay``):
        each step with its recorded and today's decision, and what differs."""
        policy = current_policy(candidate)
        recorded = load_recorded(self.engine, [run_id]).get(run_id)
        if recorded is None:
            raise RunNotFound(f"no run {run_id}")
        if recorded.kind == "replay":
            raise InvalidRequest(
                f"run {run_id} is a replay: replay its source instead",
                code=ErrorCode.REPLAY_SOURCE_INVALID,
            )
        report = replay_run(recorded, policy)
        replay_id = record_replay(self.engine, recorded, report, started_by=by)
        return {"replay_run_id": replay_id, "source_run_id": run_id, **report.as_dict()}

    def policy_diff(
        self,
        *,
        since_s: float,
        candidate: dict[str, Any] | None = None,
        limit: int = 1000,
    ) -> dict[str, Any]:
        """Replay the runs of the last ``since_s`` seconds (at most ``limit``, newest first)
        under this process's policy or ``candidate``'s: the decisions that would change, by
        tool and code, with their runs. Nothing is executed or recorded."""
        if not 0 < limit <= MAX_DIFF_RUNS:
            raise InvalidRequest(
                f"a policy review replays 1 to {MAX_DIFF_RUNS} runs", code=ErrorCode.INVALID_LIMIT
            )
        started = time.monotonic()
        policy = current_policy(candidate)
        with autocommit(self.engine, held=False) as conn:
            ids = recent_run_ids(conn, since_s=since_s, limit=limit)
        reports, failures = replay_runs(self._recorded(ids), policy)
        return {
            "policy": policy.name,
            "since_s": since_s,
            **diff_summary(reports),
            "failed": failures,
            "elapsed_s": round(time.monotonic() - started, 3),
        }

    def _recorded(self, ids: Sequence[str]) -> Iterator[RecordedRun]:
        for at in range(0, len(ids), READ_BATCH):
            batch = ids[at : at + READ_BATCH]
            found = load_recorded(self.engine, batch)
            yield from (found[i] for i in batch if i in found)
