"""Replay and policy review over HTTP (:mod:`warrant.runner.replay`): the server's own policy
(its registry and settings), or a candidate sent with the request, decides the recorded
proposals again; nothing is executed. An operator's."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request
from pydantic import BaseModel, ConfigDict, Field

from warrant.runner.authz import Action, Identity
from warrant.runner.client.replays import MAX_DIFF_RUNS
from warrant.runner.server.http.auth import deps, requires
from warrant.runner.server.http.errors import ERROR_RESPONSES
from warrant.runner.server.http.models import _In
from warrant.runner.server.http.runs import RunId

__all__ = ["router"]

router = APIRouter(prefix="/v1", tags=["review"], responses=ERROR_RESPONSES)

Reviewer = Annotated[Identity, Depends(requires(Action.REVIEW_POLICY))]

#: The longest window a policy review looks back (a year).
MAX_SINCE_S = 366 * 86_400.0


class ReplayIn(_In):
    candidate: dict[str, Any] | None = Field(
        default=None,
        description="A policy candidate (contract changes, settings); none: the server's.",
    )


class PolicyDiffIn(ReplayIn):
    since_s: float = Field(gt=0, le=MAX_SINCE_S, description="How far back (seconds).")
    limit: int = Field(default=1000, ge=1, le=MAX_DIFF_RUNS, description="At most this many runs.")


class ReplayOut(BaseModel):
    model_config = ConfigDict(extra="allow")

    replay_run_id: str
    source_run_id: str
    policy: str
    changed: int
    executed: int
    steps: list[dict[str, Any]]


class PolicyDiffOut(BaseModel):
    model_config = ConfigDict(extra="allow")

    policy: str
    runs: int
    decisions: int
    changed: int
    runs_changed: int
    changes: list[dict[str, Any]]


@router.post("/runs/{run_id}/replay", response_model=ReplayOut, summary="Replay a run")
def replay_run(request: Request, run_id: RunId, body: ReplayIn, identity: Reviewer) -> ReplayOut:
    """The run's recorded proposals decided again by the server's policy (or the
    candidate's), the tools dry: each step's recorded and today's decision, and the change.
    The replay is recorded as a run of kind ``replay``."""
    out = deps(request).client.replay_run(run_id, candidate=body.candidate, by=identity.label)
    return ReplayOut.model_validate(out)


@router.post("/policy/diff", response_model=PolicyDiffOut, summary="Review a policy")
def policy_diff(request: Request, body: PolicyDiffIn, identity: Reviewer) -> PolicyDiffOut:
    """The runs of the last ``since_s`` seconds replayed: the decisions that would change,
    by tool and code, with their runs."""
    client = deps(request).client
    out = client.policy_diff(since_s=body.since_s, candidate=body.candidate, limit=body.limit)
    return PolicyDiffOut.model_validate(out)
