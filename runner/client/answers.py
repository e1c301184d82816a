"""Answering a run's clarifying question: the run goes on from ``needs_input``."""

from __future__ import annotations

from warrant.broker import telemetry
from warrant.ledger.db import session_scope
from warrant.ledger.operator import lock_run
from warrant.ledger.repo import NewObservation, commit, run_view
from warrant.runner import run_machine as machine
from warrant.runner.client.runs import RunInfo, RunsClient
from warrant.runner.codes import ObservationKind, ObservationSource, RunStatus
from warrant.runner.errors import InvalidRequest, RunNotFound, StateConflict

__all__ = ["MAX_ANSWER_CHARS", "AnswersClient"]

#: An answer is a user message: as long as a goal may be.
MAX_ANSWER_CHARS = 8_000


class AnswersClient(RunsClient):
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
            run = lock_run(s, run_id)
            if run is None:
                raise RunNotFound(f"no run {run_id}")
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
