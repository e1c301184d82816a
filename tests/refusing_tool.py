"""A test tool that refuses or fails with a message of its own: it repeats its secret and
sensitive arguments, carries control characters and, if asked, a megabyte of filler — what the
ledger, the planner and the trace must show bounded and masked.

Registered with ``WARRANT_TOOLS=...,tests.refusing_tool:plugin``."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from warrant.tools import (
    Plugin,
    SideEffect,
    Tool,
    ToolContext,
    ToolFailed,
    ToolInput,
    ToolOutput,
    ToolRejected,
)

__all__ = ["CAPABILITY", "REF", "TOOL", "plugin", "proposal"]

#: The ``WARRANT_TOOLS`` reference of this plug-in.
REF = "tests.refusing_tool:plugin"
CAPABILITY = "account:sign-in"


class SignInInput(ToolInput):
    account: str = Field(min_length=1, max_length=64)
    """The account."""
    password: str = Field(min_length=1, max_length=128)
    """Its password (a secret argument)."""
    note: str = Field(default="", max_length=200)
    """A remark for the operator (a sensitive argument)."""
    outcome: Literal["reject", "fail", "succeed"] = "reject"
    """What the call does."""
    filler: int = Field(default=0, ge=0, le=4_000_000)
    """Characters of filler the message ends with."""


class SignInOutput(ToolOutput):
    account: str
    """The account signed in."""


def _sign_in(args: SignInInput, ctx: ToolContext) -> SignInOutput:
    if args.outcome == "succeed":
        return SignInOutput(account=args.account)
    said = (
        f"account {args.account} refused password {args.password!r} (note: {args.note})"
        f"\x00\x1b[2J" + "z" * args.filler
    )
    if args.outcome == "reject":
        raise ToolRejected(said, code="SIGN_IN_REFUSED")
    raise ToolFailed(said, code="SIGN_IN_BROKEN")


TOOL: Tool[SignInInput, SignInOutput] = Tool(
    name="sign_in",
    version="1",
    description="Sign in to an account (tests only: refuses or fails with a message).",
    input_model=SignInInput,
    output_model=SignInOutput,
    capabilities=(CAPABILITY,),
    side_effect=SideEffect.READ,
    execute=_sign_in,
    timeout_s=5.0,
    secret_fields=frozenset({"password"}),
    sensitive_fields=frozenset({"note"}),
)

plugin = Plugin(name="refusing", tools=(TOOL,))


def proposal(pid: str, **arguments: object) -> dict[str, object]:
    """A fixture planner's proposal of ``sign_in``."""
    return {
        "kind": "tool",
        "proposal_id": pid,
        "tool": "sign_in",
        "tool_version": "1",
        "arguments": {"account": "acct-7", "password": "pw", **arguments},
        "reason_summary": "",
        "source_observation_ids": [],
    }
