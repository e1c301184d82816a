"""Demo tools of the payment service's slower half: a refund that settles later (a
long-running tool, ``warrant.tools.JobHooks``) and a batch payout (``warrant.tools.Batch``)."""

from __future__ import annotations

from pydantic import Field

from warrant.runner.codes import ObservationSource
from warrant.runner.errors import ToolFailed, ToolRejected, ToolUnknown
from warrant.tools import (
    Accepted,
    Batch,
    ItemResult,
    ItemStatus,
    JobHooks,
    JobState,
    JobStatus,
    ReconcileResult,
    SideEffect,
    Tool,
    ToolContext,
    ToolInput,
    ToolOutput,
)
from warrant_demo.tools import RefundInput, RefundOutput, refund_impact

__all__ = ["PAYOUT_BATCH", "REFUND_ASYNC"]


# --- refund_async ----------------------------------------------------------------------------


def _start_refund(args: RefundInput, ctx: ToolContext) -> Accepted:
    job = ctx.deps.demo.start_refund_job(
        key=ctx.idempotency_token,
        order_id=args.order_id,
        amount_cents=args.amount_cents,
        currency=args.currency,
        is_cancelled=ctx.is_cancelled,
    )
    return Accepted(job["job_id"], details={"status": job["status"]})


_SETTLED = {"settled": JobState.SUCCEEDED, "failed": JobState.FAILED, "cancelled": JobState.FAILED}


def _poll_refund(job_id: str, ctx: ToolContext) -> JobStatus:
    job = ctx.deps.demo.refund_job(job_id)
    state = _SETTLED.get(job["status"], JobState.RUNNING)
    if job["status"] == "missing":
        return JobStatus(JobState.FAILED, code="JOB_NOT_FOUND", message=f"no job {job_id}")
    if state is JobState.SUCCEEDED:
        fields = ("refund_id", "order_id", "amount_cents", "currency")
        return JobStatus(state, output={k: job[k] for k in fields})
    if state is JobState.FAILED:
        code = "REFUND_CANCELLED" if job["status"] == "cancelled" else "REFUND_DECLINED"
        return JobStatus(state, code=code, message=f"the refund job ended {job['status']}")
    return JobStatus(state)


def _reconcile_refund_job(token: str, ctx: ToolContext) -> ReconcileResult:
    """The call's answer was lost: does the service have a job for this token?"""
    job = ctx.deps.demo.refund_job_by_key(token)
    if job is None:
        return ReconcileResult(applied=False)
    return ReconcileResult(applied=True, output={"operation_id": job["job_id"]})


def _cancel_refund(job_id: str, ctx: ToolContext) -> None:
    ctx.deps.demo.cancel_refund_job(job_id)


REFUND_ASYNC: Tool[RefundInput, RefundOutput] = Tool(
    name="refund_async",
    version="1",
    description="Refund (part of) an order; the payment service accepts the refund at once and "
    "settles it later (the run waits for the settlement).",
    input_model=RefundInput,
    output_model=RefundOutput,
    capabilities=("payments:refund",),
    side_effect=SideEffect.COMPENSATABLE_WRITE,
    output_source=ObservationSource.TRUSTED_TOOL,  # the service's own records
    execute=_start_refund,
    timeout_s=5.0,
    resource=lambda args, subject: f"order:{args.order_id}",
    reconcile=_reconcile_refund_job,
    impact=refund_impact,
    job=JobHooks(
        poll=_poll_refund, cancel=_cancel_refund, interval_s=0.3, max_polls=200, timeout_s=60.0
    ),
)


# --- payout_batch ----------------------------------------------------------------------------


class PayoutItem(ToolInput):
    payout_id: str = Field(pattern=r"^po_[A-Za-z0-9]{1,40}$")
    """The caller's id of this payout (unique within the batch)."""
    recipient: str = Field(pattern=r"^[a-z0-9._-]{1,64}@example\.(com|org)$")
    """Who is paid (example domains only)."""
    amount_cents: int = Field(gt=0, le=100_000)
    """Amount in cents."""


class PayoutBatchInput(ToolInput):
    payouts: list[PayoutItem] = Field(min_length=1, max_length=20)
    """The payouts to make (each applied on its own)."""


class PayoutBatchOutput(ToolOutput):
    items: list[ItemResult]
    """Each payout's status (applied, failed, rejected, unknown)."""


def _pay(args: PayoutBatchInput, ctx: ToolContext) -> PayoutBatchOutput:
    results = []
    for item in args.payouts:
        try:
            paid = ctx.deps.demo.payout(
                key=ctx.item_token(item.payout_id),
                recipient=item.recipient,
                amount_cents=item.amount_cents,
                is_cancelled=ctx.is_cancelled,
            )
        except ToolFailed as exc:
            status, code, retry = ItemStatus.FAILED, exc.code, exc.retryable
            results.append(
                ItemResult(key=item.payout_id, status=status, code=code, retryable=retry)
            )
            continue
        except ToolRejected as exc:
            results.append(
                ItemResult(key=item.payout_id, status=ItemStatus.REJECTED, code=exc.code)
            )
            continue
        except ToolUnknown as exc:
            results.append(ItemResult(key=item.payout_id, status=ItemStatus.UNKNOWN, code=exc.code))
            continue
        results.append(ItemResult(key=item.payout_id, status=ItemStatus.APPLIED, output=paid))
    return PayoutBatchOutput(items=results)


def _reconcile_payout(token: str, ctx: ToolContext) -> ReconcileResult:
    seen = ctx.deps.demo.get_payout(key=token)
    return ReconcileResult(applied=seen is not None, output=seen)


PAYOUT_BATCH: Tool[PayoutBatchInput, PayoutBatchOutput] = Tool(
    name="payout_batch",
    version="1",
    description="Pay several recipients in one call; each payout is applied, retried and "
    "reconciled on its own.",
    input_model=PayoutBatchInput,
    output_model=PayoutBatchOutput,
    capabilities=("payments:payout",),
    side_effect=SideEffect.IDEMPOTENT_WRITE,
    output_source=ObservationSource.TRUSTED_TOOL,  # the service's own records
    execute=_pay,
    timeout_s=5.0,
    batch=Batch(items="payouts", key="payout_id"),
    reconcile=_reconcile_payout,
    resource=lambda args, subject: "payouts",
    impact=lambda args: (
        f"pay {sum(p.amount_cents for p in args.payouts) / 100:.2f} in all to "
        f"{len({p.recipient for p in args.payouts})} recipient(s)"
    ),
)
