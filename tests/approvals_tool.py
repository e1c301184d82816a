"""Test tools that need more than one person: ``pay`` (irreversible, so every call waits for a
confirmation) needs two distinct approvers when ``amount_cents`` is over 100 000
(``approvals_rule``); ``pay_self_ok`` lets whoever started the run approve its calls
(``self_approval_allowed``). Each executed call appends one line to the file ``ledger`` names:
the fake payment service whose lines the tests count.

Registered with ``WARRANT_TOOLS=...,tests.approvals_tool:plugin``."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import Field

from warrant.tools import (
    ConfirmationPolicy,
    Plugin,
    SideEffect,
    Tool,
    ToolContext,
    ToolInput,
    ToolOutput,
)

__all__ = [
    "CAPABILITY",
    "PAY",
    "PAY_PER_RUN",
    "PAY_SELF_OK",
    "PAY_SWITCHED",
    "paid",
    "plugin",
    "proposal",
]

CAPABILITY = "payments:send"
#: Above this many cents a payment needs two people.
THRESHOLD_CENTS = 100_000


class PayInput(ToolInput):
    payee: str = Field(min_length=1, max_length=100)
    """Who is paid."""
    amount_cents: int = Field(ge=1, le=10**9)
    """How much, in cents: over 100 000 needs two approvers."""
    ledger: str = Field(min_length=1, max_length=500)
    """The fake service: a file each executed payment appends one line to."""


class PayOutput(ToolOutput):
    paid: bool
    """Whether the payment was made."""


def _pay(args: PayInput, ctx: ToolContext) -> PayOutput:
    with Path(args.ledger).open("a", encoding="utf-8") as f:
        f.write(f"{args.payee} {args.amount_cents}\n")
    return PayOutput(paid=True)


def _payment_recorded(args: PayInput, out: PayOutput, ctx: ToolContext) -> bool:
    """The postcondition, read back from the fake service: its ledger has the payment."""
    lines = Path(args.ledger).read_text(encoding="utf-8").splitlines()
    return f"{args.payee} {args.amount_cents}" in lines


def _approvals(arguments: Mapping[str, Any]) -> int:
    return 2 if int(arguments.get("amount_cents", 0)) > THRESHOLD_CENTS else 1


PAY: Tool[PayInput, PayOutput] = Tool(
    name="pay",
    version="1",
    description="Pay a payee (two approvers above 1000.00).",
    input_model=PayInput,
    output_model=PayOutput,
    capabilities=(CAPABILITY,),
    side_effect=SideEffect.IRREVERSIBLE,
    execute=_pay,
    verify=_payment_recorded,
    resource=lambda args, subject: args.payee,
    approvals_rule=_approvals,
    impact=lambda args: f"pay {args.amount_cents / 100:.2f} to {args.payee}",
)
PAY_SELF_OK = dataclasses.replace(PAY, name="pay_self_ok", self_approval_allowed=True)
#: An idempotent write whose contract asks one person's confirmation for the whole run.
PAY_PER_RUN = dataclasses.replace(
    PAY,
    name="pay_per_run",
    side_effect=SideEffect.IDEMPOTENT_WRITE,
    confirmation=ConfirmationPolicy.PER_RUN,
    approvals_rule=None,
)

#: An idempotent write no person confirms: the kill switch's tests disable and enable it (no
#: other test uses it, so switching it off stops nothing else).
PAY_SWITCHED = dataclasses.replace(
    PAY,
    name="pay_switched",
    side_effect=SideEffect.IDEMPOTENT_WRITE,
    confirmation=ConfirmationPolicy.NEVER,
    approvals_rule=None,
)

plugin = Plugin(name="approvals", tools=(PAY, PAY_SELF_OK, PAY_PER_RUN, PAY_SWITCHED))


def proposal(
    ledger: Path, amount_cents: int, *, tool: str = "pay", pid: str = "p1", payee: str = "acme"
) -> dict:
    """A fixture planner's proposal of a payment recorded in ``ledger``."""
    return {
        "kind": "tool",
        "proposal_id": pid,
        "tool": tool,
        "tool_version": "1",
        "arguments": {"payee": payee, "amount_cents": amount_cents, "ledger": str(ledger)},
        "reason_summary": "",
        "source_observation_ids": [],
    }


def paid(ledger: Path) -> int:
    """How many payments the fake service made."""
    return len(ledger.read_text().splitlines()) if ledger.exists() else 0
