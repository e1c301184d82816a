"""Proposals over HTTP, for an agent that runs its own loop (a run with planner kind
``external``): ``POST /v1/runs/{id}/proposals`` submits the next one, ``GET
/v1/runs/{id}/proposals/{step}`` reads (and long-polls) its decision. The submitter is the
token's label; a ``producer`` token may propose in the runs it started (else ``403
NOT_YOUR_RUN``), only an ``approver`` may confirm."""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING, Annotated, Any

from fastapi import APIRouter, Depends, Header, Path, Query, Request
from fastapi.concurrency import run_in_threadpool
from pydantic import BaseModel, Field

from warrant.runner.authz import Action, Identity
from warrant.runner.external import Decision, DecisionState
from warrant.runner.server.http.auth import Reader, check_own_run, deps, requires
from warrant.runner.server.http.errors import ERROR_RESPONSES
from warrant.runner.server.http.models import INT32_MAX, _In, record_model
from warrant.runner.server.http.runs import RunId, long_poll
from warrant.runner.spec import MAX_PARALLEL_CALLS

__all__ = ["DecisionStateOut", "ProposalIn", "router"]

router = APIRouter(prefix="/v1", tags=["proposals"], responses=ERROR_RESPONSES)

Step = Annotated[int, Path(ge=1, le=INT32_MAX, description="The step the proposal filled.")]
Proposer = Annotated[Identity, Depends(requires(Action.PROPOSE))]

#: The longest one request waits for a decision.
MAX_WAIT_S = 60.0
FIRST_PAUSE_S, MAX_PAUSE_S = 0.02, 0.5


class UsageIn(_In):
    prompt_tokens: int = Field(default=0, ge=0, le=INT32_MAX)
    completion_tokens: int = Field(default=0, ge=0, le=INT32_MAX)
    cost: float = Field(default=0.0, ge=0, le=1e9, allow_inf_nan=False)


class ProposalIn(_In):
    proposal: dict[str, Any] = Field(
        description="One planner output: a tool proposal, a final answer or a question."
    )
    step: int | None = Field(
        default=None,
        ge=1,
        le=INT32_MAX,
        description="The step this proposal fills: sent again, the same proposal replays.",
    )
    usage: UsageIn | None = Field(default=None, description="What the caller's model used.")


if TYPE_CHECKING:

    class DecisionStateOut(BaseModel): ...

else:
    DecisionStateOut = record_model(
        Decision,
        "DecisionStateOut",
        "What the gate made of the proposal of ``step`` (``warrant.runner.external.Decision``).",
        required=frozenset({"run_status", "run_version"}),
        extra={"settled": (bool, Field())},
    )


IdempotencyKey = Annotated[
    str | None,
    Header(
        alias="Idempotency-Key",
        pattern=r"^[!-~]{1,200}$",
        description="The caller's key of this proposal: sent again, the same decision.",
    ),
]

WaitQuery = Annotated[
    float, Query(ge=0, le=MAX_WAIT_S, allow_inf_nan=False, description="Seconds (≤ 60).")
]


def _out(decision: Decision) -> DecisionStateOut:
    return DecisionStateOut.model_validate(decision.to_dict())


@router.post(
    "/runs/{run_id}/proposals", response_model=DecisionStateOut, summary="Submit a proposal"
)
async def submit(
    request: Request,
    run_id: RunId,
    body: ProposalIn,
    identity: Proposer,
    idempotency_key: IdempotencyKey = None,
    wait: WaitQuery = 0.0,
) -> DecisionStateOut:
    """Record the run's next step; returns its decision (waiting up to ``wait`` seconds for
    it to leave ``pending``). ``409 PROPOSAL_IN_FLIGHT`` while the previous one is undecided.
    Sent again with the same ``Idempotency-Key`` (a retry after a lost answer), the same
    decision, never a second step; ``409 IDEMPOTENCY_KEY_REUSED`` with another proposal."""
    client = deps(request).client
    usage = body.usage.model_dump() if body.usage else None

    def propose() -> Decision:
        check_own_run(client, identity, run_id)
        decision: Decision = client.propose(
            run_id,
            body.proposal,
            by=identity.label,
            step=body.step,
            usage=usage,
            call_id=idempotency_key,
        )
        return decision

    decision = await run_in_threadpool(propose)
    return _out(await _wait(request, run_id, decision, wait, "pending"))


@router.get(
    "/runs/{run_id}/proposals/{step}",
    response_model=DecisionStateOut,
    summary="A proposal's decision (long poll)",
)
async def get_decision(
    request: Request,
    run_id: RunId,
    step: Step,
    identity: Reader,
    wait: WaitQuery = 0.0,
    seen: Annotated[
        DecisionState, Query(description="Return as soon as the state is not this one.")
    ] = "pending",
    branch: Annotated[
        int, Query(ge=0, le=MAX_PARALLEL_CALLS, description="One call of a parallel step.")
    ] = 0,
) -> DecisionStateOut:
    """The decision of ``step`` (of its call ``branch`` for a parallel step); with
    ``wait``, returns as soon as its state differs from ``seen``, else after ``wait``
    seconds with the same state."""
    client = deps(request).client
    decision = await run_in_threadpool(partial(client.decision, run_id, step, branch=branch))
    return _out(await _wait(request, run_id, decision, wait, seen))


async def _wait(
    request: Request, run_id: str, decision: Decision, wait_s: float, seen: str
) -> Decision:
    client = deps(request).client
    found: Decision = await long_poll(
        request,
        decision,
        lambda: client.decision(run_id, decision.step, branch=decision.branch),
        lambda d: d.state != seen,
        wait_s,
        MAX_PAUSE_S,
        FIRST_PAUSE_S,
    )
    return found
