"""A test tool with a precondition read: ``withdraw`` (irreversible, so every call waits for a
confirmation) takes money from an account of a small fake account service. The service is a
JSON file the tests write and move (``{"balance_cents": ..., "status": ...}``; ``{"down":
true}`` makes every read fail); each executed withdrawal appends one line to the file
``ledger`` names, the effects the tests count.

Registered with ``WARRANT_TOOLS=...,tests.precondition_tool:plugin``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import Field

from warrant.tools import (
    Plugin,
    PreconditionContext,
    SideEffect,
    Tool,
    ToolContext,
    ToolInput,
    ToolOutput,
)

__all__ = ["CAPABILITY", "WITHDRAW", "account", "move", "plugin", "proposal", "withdrawn"]

CAPABILITY = "accounts:withdraw"


class WithdrawInput(ToolInput):
    account: str = Field(min_length=1, max_length=500)
    """The fake service: the account's JSON file."""
    amount_cents: int = Field(ge=1, le=10**9)
    """How much, in cents."""
    ledger: str = Field(min_length=1, max_length=500)
    """Where each executed withdrawal is written (one line each)."""


class WithdrawOutput(ToolOutput):
    withdrawn: bool
    """Whether the money was taken."""


class ServiceDown(RuntimeError):
    """The fake account service does not answer."""


def _balance(args: WithdrawInput, ctx: PreconditionContext) -> dict[str, Any]:
    state = json.loads(Path(args.account).read_text(encoding="utf-8"))
    if state.get("down"):
        raise ServiceDown("the account service is down")
    return {"balance_cents": state["balance_cents"], "status": state["status"]}


def _withdraw(args: WithdrawInput, ctx: ToolContext) -> WithdrawOutput:
    with Path(args.ledger).open("a", encoding="utf-8") as f:
        f.write(f"{args.account} {args.amount_cents}\n")
    return WithdrawOutput(withdrawn=True)


def _withdrawal_recorded(args: WithdrawInput, out: WithdrawOutput, ctx: ToolContext) -> bool:
    """The postcondition, read back from the fake service: its ledger has the withdrawal."""
    lines = Path(args.ledger).read_text(encoding="utf-8").splitlines()
    return f"{args.account} {args.amount_cents}" in lines


WITHDRAW: Tool[WithdrawInput, WithdrawOutput] = Tool(
    name="withdraw",
    version="1",
    description="Withdraw money from an account (the approver sees its balance).",
    input_model=WithdrawInput,
    output_model=WithdrawOutput,
    capabilities=(CAPABILITY,),
    side_effect=SideEffect.IRREVERSIBLE,
    execute=_withdraw,
    verify=_withdrawal_recorded,
    resource=lambda args, subject: args.account,
    precondition=_balance,
    max_attempts=2,
    retry_base_s=0.05,
    retry_cap_s=0.1,
)

plugin = Plugin(name="preconditions", tools=(WITHDRAW,))


def account(path: Path, balance_cents: int, *, status: str = "open") -> Path:
    """Open (or reset) the fake account at ``path``."""
    path.write_text(json.dumps({"balance_cents": balance_cents, "status": status}))
    return path


def move(path: Path, **state: Any) -> None:
    """Change the account's state (``down=True``: the service stops answering)."""
    path.write_text(json.dumps({**json.loads(path.read_text()), **state}))


def proposal(account_file: Path, ledger: Path, amount_cents: int) -> dict[str, Any]:
    """A fixture planner's proposal of a withdrawal."""
    return {
        "kind": "tool",
        "proposal_id": "w1",
        "tool": "withdraw",
        "tool_version": "1",
        "arguments": {
            "account": str(account_file),
            "amount_cents": amount_cents,
            "ledger": str(ledger),
        },
        "reason_summary": "",
        "source_observation_ids": [],
    }


def withdrawn(ledger: Path) -> int:
    """How many withdrawals the fake service made."""
    return len(ledger.read_text().splitlines()) if ledger.exists() else 0
