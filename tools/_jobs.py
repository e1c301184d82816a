"""Long-running tools: a call that answers "accepted, job 123" and finishes later.

A tool whose contract declares ``job=JobHooks(poll=...)`` may return :class:`Accepted` from its
``execute`` instead of its output model. The attempt then ends ``accepted`` (no worker stays
busy): the run waits in status ``waiting_job`` and the reconciler's sweep calls
``poll(operation_id, ctx)`` every ``interval_s`` (at most ``max_polls`` times, for at most
``timeout_s`` after the acceptance, and never past the run's deadline). When the job ends, the
run resumes with a *final* observation (``job-<step>``: succeeded with its output, or failed
with its code); the ``accepted`` observation (``tool-<step>``) says ``final: false`` and a final
answer may not cite it. A cancel of the run, or a job past its bounds, calls ``cancel`` once
(if the contract has one) and keeps asking until the job says how it ended; a job that never
says goes to a person with its operation id in the bundle.

The operation id, like the idempotency token, must be stable: a call re-invoked with the same
token returns the same job (:class:`ToolContext.idempotency_token` is what makes it so).
"""

from __future__ import annotations

__layer__ = "pure core"

from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

__all__ = ["Accepted", "JobHooks", "JobState", "JobStatus"]

#: Defaults of :class:`JobHooks`.
DEFAULT_POLL_INTERVAL_S = 5.0
DEFAULT_MAX_POLLS = 720
DEFAULT_JOB_TIMEOUT_S = 3600.0


@dataclass(frozen=True)
class Accepted:
    """What a long-running tool returns when the service took the job but has not done it."""

    operation_id: str
    """The service's id of the job (what ``poll`` and ``cancel`` get)."""
    details: dict[str, Any] | None = None
    """Anything else the service said at acceptance (shown to the planner, not final)."""


class JobState(StrEnum):
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    """Ended without its effect: failed, refused or cancelled by the service."""


@dataclass(frozen=True)
class JobStatus:
    """What ``poll`` says about a job."""

    state: JobState
    output: dict[str, Any] | None = None
    """For ``succeeded``: the tool's output (validated against its output model)."""
    code: str | None = None
    """For ``failed``: a stable code (``JOB_FAILED`` if none)."""
    message: str | None = None


@dataclass(frozen=True, kw_only=True)
class JobHooks:
    """How the program follows a tool's accepted jobs (``Tool(job=JobHooks(...))``)."""

    poll: Callable[[str, Any], JobStatus]
    """``poll(operation_id, ctx)``: the job's state now (``ctx`` is a ``ToolContext``)."""
    cancel: Callable[[str, Any], None] | None = None
    """``cancel(operation_id, ctx)``: ask the service to stop the job; called at most once."""
    interval_s: float = DEFAULT_POLL_INTERVAL_S
    max_polls: int = DEFAULT_MAX_POLLS
    timeout_s: float = DEFAULT_JOB_TIMEOUT_S
    """Longest a job may take after its acceptance before it is cancelled (or handed off)."""
