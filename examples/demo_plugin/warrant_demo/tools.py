"""Demo tools over the fake external service: payments and the seed's lookup/save_draft."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from warrant.runner.codes import ObservationSource
from warrant.runner.errors import ToolFailed
from warrant.tools import ReconcileResult, SideEffect, Tool, ToolContext, ToolInput, ToolOutput
from warrant_demo.documents import READ_DOCUMENT
from warrant_demo.http_read import HTTP_READ

__all__ = [
    "DEMO_TOOLS",
    "GET_REFUND",
    "ISSUE_REFUND",
    "LOOKUP",
    "NOOP_READ",
    "SAVE_DRAFT",
    "SEND_NOTICE",
    "SLEEP_READ",
]


class _Input(ToolInput):
    """Inputs of these tools."""


class _Output(ToolOutput):
    """Outputs of these tools."""


# --- issue_refund --------------------------------------------------------------------------


class RefundInput(_Input):
    order_id: str = Field(pattern=r"^ord_[A-Za-z0-9]{1,40}$")
    """The order to refund, e.g. ``ord_123``."""
    amount_cents: int = Field(gt=0, le=100_000)
    """Amount in cents (at most 1000.00)."""
    currency: Literal["EUR", "USD"]
    """ISO currency code."""


class RefundOutput(_Output):
    refund_id: str
    """The service's refund id."""
    order_id: str
    """The refunded order."""
    amount_cents: int
    """Refunded amount in cents."""
    currency: str
    """ISO currency code."""


def _issue_refund(args: RefundInput, ctx: ToolContext) -> RefundOutput:
    out = ctx.deps.demo.issue_refund(
        key=ctx.idempotency_token,
        order_id=args.order_id,
        amount_cents=args.amount_cents,
        currency=args.currency,
        is_cancelled=ctx.is_cancelled,
        on_interrupt=ctx.on_interrupt,
    )
    return RefundOutput(**out)


def _verify_refund(args: RefundInput, out: RefundOutput, ctx: ToolContext) -> bool:
    seen = ctx.deps.demo.get_refund(key=ctx.idempotency_token)
    return (
        not ctx.deps.demo.corrupt_read("issue_refund")
        and seen is not None
        and seen["amount_cents"] == args.amount_cents
        and seen["order_id"] == args.order_id
    )


def refund_impact(args: RefundInput) -> dict[str, str]:
    """What a refund is expected to do, for the person asked to confirm it."""
    return {
        "amount": f"{args.amount_cents // 100}.{args.amount_cents % 100:02d}",
        "currency": args.currency,
        "target": f"order {args.order_id}",
    }


def _reverse_refund(token: str, ctx: ToolContext) -> None:
    if not ctx.deps.demo.reverse_refund(key=token):
        raise ToolFailed("no refund to reverse", code="REFUND_NOT_FOUND")


def _reconcile_refund(token: str, ctx: ToolContext) -> ReconcileResult:
    seen = ctx.deps.demo.get_refund(key=token)
    return ReconcileResult(applied=seen is not None, output=seen)


ISSUE_REFUND: Tool[RefundInput, RefundOutput] = Tool(
    name="issue_refund",
    version="1",
    description="Refund (part of) an order through the payment service.",
    input_model=RefundInput,
    output_model=RefundOutput,
    capabilities=("payments:refund",),
    side_effect=SideEffect.COMPENSATABLE_WRITE,
    output_source=ObservationSource.TRUSTED_TOOL,  # the service's own records
    execute=_issue_refund,
    timeout_s=5.0,
    resource=lambda args, subject: f"order:{args.order_id}",
    verify=_verify_refund,
    reconcile=_reconcile_refund,
    compensate=_reverse_refund,
    impact=refund_impact,
    effect_key="refund:{order_id}",  # one refund per order in a run; repeat_effect asks a person
)


# --- get_refund ----------------------------------------------------------------------------


class GetRefundInput(_Input):
    order_id: str = Field(pattern=r"^ord_[A-Za-z0-9]{1,40}$")
    """The order whose refunds to count."""


class GetRefundOutput(_Output):
    order_id: str
    """The order asked about."""
    refunds: int
    """How many refunds the service holds for it."""


GET_REFUND: Tool[GetRefundInput, GetRefundOutput] = Tool(
    name="get_refund",
    version="1",
    description="Count the refunds of an order (read only).",
    input_model=GetRefundInput,
    output_model=GetRefundOutput,
    capabilities=("payments:read",),
    side_effect=SideEffect.READ,
    output_source=ObservationSource.TRUSTED_TOOL,  # the service's own records
    execute=lambda args, ctx: GetRefundOutput(
        order_id=args.order_id, refunds=ctx.deps.demo.refund_count(order_id=args.order_id)
    ),
    timeout_s=5.0,
    resource=lambda args, subject: f"order:{args.order_id}",
)


# --- lookup (read) and save_draft (idempotent write), the seed's pair ----------------------


class LookupInput(_Input):
    query: str = Field(min_length=1, max_length=200)
    """What to look up."""


class LookupOutput(_Output):
    query: str
    """The query as executed."""
    observation: str
    """The record found."""


LOOKUP: Tool[LookupInput, LookupOutput] = Tool(
    name="lookup",
    version="1",
    description="Look a record up in the demo service (read only).",
    input_model=LookupInput,
    output_model=LookupOutput,
    capabilities=("lookup:read",),
    side_effect=SideEffect.READ,
    output_source=ObservationSource.TRUSTED_TOOL,  # the service's own records
    execute=lambda args, ctx: LookupOutput(
        **ctx.deps.demo.lookup(
            query=args.query, is_cancelled=ctx.is_cancelled, on_interrupt=ctx.on_interrupt
        )
    ),
    timeout_s=3.0,
    resource=lambda args, subject: "records",
)


class SaveDraftInput(_Input):
    draft_id: str = Field(pattern=r"^[a-z0-9-]{1,50}$")
    """Stable business id of the draft."""
    content: str = Field(max_length=10_000)
    """Draft text."""


class SaveDraftOutput(_Output):
    draft_id: str
    """The draft saved."""
    chars: int
    """Stored length."""


def _save_draft(args: SaveDraftInput, ctx: ToolContext) -> SaveDraftOutput:
    return SaveDraftOutput(
        **ctx.deps.demo.save_draft(
            key=ctx.idempotency_token,
            draft_id=args.draft_id,
            content=args.content,
            is_cancelled=ctx.is_cancelled,
            on_interrupt=ctx.on_interrupt,
        )
    )


def _verify_draft(args: SaveDraftInput, out: SaveDraftOutput, ctx: ToolContext) -> bool:
    if ctx.deps.demo.corrupt_read("save_draft"):
        return False  # the read-back was falsified (a ``corrupt_read`` fault)
    seen = ctx.deps.demo.get_draft(key=ctx.idempotency_token)
    return seen is not None and seen["chars"] == len(args.content)


def _reconcile_draft(token: str, ctx: ToolContext) -> ReconcileResult:
    seen = ctx.deps.demo.get_draft(key=token)
    return ReconcileResult(applied=seen is not None, output=seen)


SAVE_DRAFT: Tool[SaveDraftInput, SaveDraftOutput] = Tool(
    name="save_draft",
    version="1",
    description="Save a draft in the demo service (idempotent per token; queryable).",
    input_model=SaveDraftInput,
    output_model=SaveDraftOutput,
    capabilities=("drafts:write",),
    side_effect=SideEffect.IDEMPOTENT_WRITE,
    output_source=ObservationSource.TRUSTED_TOOL,  # the service's own records
    execute=_save_draft,
    timeout_s=3.0,
    resource=lambda args, subject: f"draft:{args.draft_id}",
    verify=_verify_draft,
    verify_attempts=3,  # the drafts store may show a write late (a corrupt_read fault)
    reconcile=_reconcile_draft,
)


class NoticeInput(_Input):
    recipient: str = Field(pattern=r"^[a-z0-9._-]{1,64}@example\.(com|org)$")
    """Where to send it (example domains only)."""
    body: str = Field(min_length=1, max_length=2_000)
    """Message text."""


class NoticeOutput(_Output):
    recipient: str
    """Who it went to."""
    chars: int
    """Length sent."""


SEND_NOTICE: Tool[NoticeInput, NoticeOutput] = Tool(
    name="send_notice",
    version="1",
    description="Send a notice (irreversible; the service offers no status query).",
    input_model=NoticeInput,
    output_model=NoticeOutput,
    capabilities=("notices:send",),
    side_effect=SideEffect.IRREVERSIBLE,
    output_source=ObservationSource.TRUSTED_TOOL,  # the service's own records
    execute=lambda args, ctx: NoticeOutput(
        **ctx.deps.demo.send_notice(
            recipient=args.recipient,
            body=args.body,
            is_cancelled=ctx.is_cancelled,
            on_interrupt=ctx.on_interrupt,
        )
    ),
    timeout_s=3.0,
    resource=lambda args, subject: f"recipient:{args.recipient}",
    sensitive_fields=frozenset({"body"}),
    unverified=True,
    unverified_reason="the notice service offers no status query: a sent notice cannot be "
    "read back",
)

# --- benchmark tools ------------------------------------------------------------------------


class NoopInput(_Input):
    n: int = Field(ge=0, le=10_000_000)
    """Any number (distinct per step, so loop detection sees progress)."""


class NoopOutput(_Output):
    n: int
    """The number, echoed."""


NOOP_READ: Tool[NoopInput, NoopOutput] = Tool(
    name="noop_read",
    version="1",
    description="Do nothing and echo n (benchmarks: the cost of the machinery alone).",
    input_model=NoopInput,
    output_model=NoopOutput,
    capabilities=("bench:read",),
    side_effect=SideEffect.READ,
    output_source=ObservationSource.TRUSTED_TOOL,  # the service's own records
    execute=lambda args, ctx: NoopOutput(n=args.n),
    timeout_s=5.0,
    resource=lambda args, subject: "bench",
)


class SleepInput(_Input):
    n: int = Field(ge=0, le=10_000_000)
    """Any number (distinct per step)."""
    ms: int = Field(default=100, ge=0, le=2_000)
    """How long to sleep."""


def _sleep(args: SleepInput, ctx: ToolContext) -> NoopOutput:
    import time

    time.sleep(args.ms / 1000)
    return NoopOutput(n=args.n)


SLEEP_READ: Tool[SleepInput, NoopOutput] = Tool(
    name="sleep_read",
    version="1",
    description="Sleep ms milliseconds (benchmarks: a tool-bound workload).",
    input_model=SleepInput,
    output_model=NoopOutput,
    capabilities=("bench:read",),
    side_effect=SideEffect.READ,
    output_source=ObservationSource.TRUSTED_TOOL,  # the service's own records
    execute=_sleep,
    timeout_s=5.0,
    resource=lambda args, subject: "bench",
)


class WaitInput(_Input):
    n: int = Field(ge=0, le=10_000_000)
    """Any number (distinct per step)."""
    ms: int = Field(default=1000, ge=0, le=60_000)
    """How long to wait."""


def _wait(args: WaitInput, ctx: ToolContext) -> NoopOutput:
    ctx.sleep(args.ms / 1000)  # one wait, ended at once by the worker's interruption
    return NoopOutput(n=args.n)


WAIT_READ: Tool[WaitInput, NoopOutput] = Tool(
    name="wait_read",
    version="1",
    description="Wait ms milliseconds through the call's context, never asking whether the run "
    "is cancelled (benchmarks and tests: a wait only the worker can interrupt).",
    input_model=WaitInput,
    output_model=NoopOutput,
    capabilities=("bench:read",),
    side_effect=SideEffect.READ,
    output_source=ObservationSource.TRUSTED_TOOL,  # the service's own records
    execute=_wait,
    timeout_s=5.0,
    resource=lambda args, subject: "bench",
)


DEMO_TOOLS: list[Tool] = [
    ISSUE_REFUND,
    GET_REFUND,
    LOOKUP,
    SAVE_DRAFT,
    SEND_NOTICE,
    NOOP_READ,
    SLEEP_READ,
    WAIT_READ,
    HTTP_READ,
    READ_DOCUMENT,
]
