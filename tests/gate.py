"""Building pure gate inputs for unit tests (no Celery, no database)."""

from __future__ import annotations

from typing import Any

from warrant.runner.codes import Phase, RunStatus
from warrant.runner.policy import GateInput
from warrant.runner.spec import Budgets
from warrant.runner.views import ConfirmationView, GrantView, HistoryEntry, RunView
from warrant.tools._contract import SideEffect, Tool, ToolInput, ToolOutput
from warrant.tools._plugins import registry_for

NOW = 1_000_000.0


def run(**kw: Any) -> RunView:
    base: dict[str, Any] = dict(
        run_id="run-1",
        status=RunStatus.RUNNING,
        phase=Phase.POLICY,
        version=2,
        step=1,
        model_calls=1,
        tool_calls=0,
        observation_version=1,
        deadline_at=NOW + 60,
        subject="alice",
        budgets=Budgets(),
    )
    base.update(kw)
    return RunView(**base)


def grant(capability: str, scope: str = "*", **kw: Any) -> GrantView:
    base: dict[str, Any] = dict(
        grant_id=1,
        run_id="run-1",
        capability=capability,
        resource_scope=scope,
        expires_at_step=None,
        max_uses=None,
        uses=0,
    )
    base.update(kw)
    return GrantView(**base)


def confirmation(proposal_hash: str, **kw: Any) -> ConfirmationView:
    base: dict[str, Any] = dict(
        confirmation_id="c-1",
        run_id="run-1",
        proposal_hash=proposal_hash,
        tool="save_preference",
        approved=True,
        used=False,
        expires_at_step=10,
        expires_at=NOW + 300,
    )
    base.update(kw)
    return ConfirmationView(**base)


def proposal(tool: str = "search_public", arguments: Any = None, **kw: Any) -> dict[str, Any]:
    out: dict[str, Any] = {
        "kind": "tool",
        "proposal_id": "p1",
        "tool": tool,
        "tool_version": "1",
        "arguments": {"query": "retries"} if arguments is None else arguments,
        "reason_summary": "",
        "source_observation_ids": [],
    }
    out.update(kw)
    return out


def gate(
    raw: Any,
    *,
    grants: list[GrantView] | None = None,
    confirmations: list[ConfirmationView] | None = None,
    history: list[HistoryEntry] | None = None,
    **run_kw: Any,
) -> GateInput:
    view = run(**run_kw)
    return GateInput(
        raw=raw,
        run=view,
        expected_version=view.version,
        grants=[grant("search:public", "public")] if grants is None else grants,
        confirmations=confirmations or [],
        history=history or [],
        registry=registry_for(),
        now=NOW,
    )


class FetchIn(ToolInput):
    url: str
    """Where to fetch from."""


class Done(ToolOutput):
    ok: bool = True
    """Always true."""


def noop_tool(name: str, side_effect: SideEffect, model: type[Any], **kw: Any) -> Tool[Any, Any]:
    """A tool that does nothing, capability ``<name>:use``: for gate tests. A write that
    declares no postcondition says it is ``unverified`` (it has no effect to read back)."""
    if side_effect is not SideEffect.READ and not ({"verify", "reconcile", "unverified"} & set(kw)):
        kw = {**kw, "unverified": True, "unverified_reason": "a gate test's tool does nothing"}
    return Tool(
        name=name,
        version="1",
        description=name,
        input_model=model,
        output_model=Done,
        capabilities=(f"{name}:use",),
        side_effect=side_effect,
        execute=lambda args, ctx: Done(),
        **kw,
    )
