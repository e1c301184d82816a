"""A decision as an MCP tool result. Only an executed call that succeeded is a success; every
other decision is a tool error (``isError``) whose first text says what happened, led by its
stable code, and whose ``structuredContent.warrant`` carries the decision. An unknown effect
is never reported as a success: it says ``UNKNOWN_EFFECT`` and that the reconciler decides."""

from __future__ import annotations

import json
from typing import Any

from mcp import types

from warrant.runner.external import WAITING_FOR_APPROVAL, Decision, explain

__all__ = ["WAITING_FOR_APPROVAL", "error_result", "result_of"]


def _summary(d: Decision) -> dict[str, Any]:
    out = {
        "run_id": d.run_id,
        "step": d.step,
        "state": d.state,
        "code": d.code,
        "outcome": d.outcome,
        "observation_id": d.observation_id,
        "proposal_hash": d.proposal_hash,
        "run_status": d.run_status,
    }
    return {k: v for k, v in out.items() if v is not None}


def error_result(code: str, message: str, **warrant: Any) -> types.CallToolResult:
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=f"{code}: {message}")],
        structuredContent={"warrant": {"code": code, **warrant}},
        isError=True,
    )


def result_of(d: Decision) -> types.CallToolResult:
    meta = _summary(d)
    if d.state == "executed" and d.outcome == "succeeded":
        text = json.dumps(d.output, sort_keys=True) if d.output is not None else "ok"
        structured = d.output if isinstance(d.output, dict) else {"result": d.output}
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=text)],
            structuredContent=structured,
            isError=False,
            _meta={"warrant": meta},
        )
    code, message = explain(d)
    return error_result(code, message, **{k: v for k, v in meta.items() if k != "code"})
