"""Why a run stopped or what it waits for, read off its state and trace: what ``warrant run
show`` leads with (and its ``--json`` ``why`` object), beside the other facts of
:func:`trace_facts`.

The stop reason alone can hide the cause: a plan that calls an unknown tool is refused at the
gate (``UNKNOWN_TOOL_OR_VERSION``), the planner goes on, and the run ends with
``FINAL_CITATION_VALIDATION_FAILED``. So the last refusal (the newest trace event carrying a
``code``: a gate rejection, a failed tool call, a model failure) is shown beside it."""

from __future__ import annotations

from typing import Any

from warrant.runner.observe import WOULD_REFUSE, would_refusals

__all__ = ["last_refusal", "policy_versions", "trace_facts", "waiting_for", "why", "why_lines"]


def trace_facts(data: dict[str, Any], trace: list[dict[str, Any]]) -> dict[str, Any]:
    """What ``run show`` and ``run start --wait`` add to a run from its trace: ``why`` it
    stopped or waits, the ``policy_versions`` of its decisions and the calls observe mode
    let through (``would_refuse``)."""
    return {
        "why": why(data, trace),
        "policy_versions": policy_versions(trace),
        "would_refuse": would_refusals(trace),
    }


def policy_versions(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Which policy decided each step, read off the run's ``policy.versioned`` trace events:
    one entry per gate decision, in order: ``step``, ``proposal_id``, ``decision``
    (``accepted``, ``refused``, ``needs_confirmation``, ``halted``), ``policy_version`` and
    the hashes of its parts (``contract_hash``, ``grants_hash``, ``settings_hash``)."""
    return [
        {"step": e.get("step"), "proposal_id": e.get("proposal_id"), **(e.get("details") or {})}
        for e in events
        if e.get("event") == "policy.versioned"
    ]


def last_refusal(events: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The newest event with a ``code`` in its details: ``event``, ``code``, ``message``,
    ``step``, ``seq`` (``None``: nothing was refused). A refusal observe mode let through
    (``gate.would_refuse`` and the layer's event before it) is none."""
    let_through: set[str] = set()  # observe mode: refusals it let through are no refusals
    for e in reversed(events):
        details = e.get("details") or {}
        code = details.get("code")
        if e.get("event") == WOULD_REFUSE:
            let_through.add(str(code))
            continue
        if code in let_through:  # the layer's own event of that refusal
            let_through.discard(code)
            continue
        if isinstance(code, str) and code:
            message = details.get("message") or details.get("reason") or _describe(details)
            return {
                "event": e["event"],
                "code": code,
                "message": str(message),
                "step": e.get("step"),
                "seq": e.get("seq"),
            }
    return None


def _describe(details: dict[str, Any]) -> str:
    keys = ("layer", "tool", "status", "attempt")
    return ", ".join(f"{k}={details[k]}" for k in keys if details.get(k) is not None)


def waiting_for(info: dict[str, Any], events: list[dict[str, Any]]) -> dict[str, Any] | None:
    """What a person must do for the run to go on (``None``: nothing; it moves or ended)."""
    run_id, status = info["run_id"], info["status"]
    if status == "waiting_confirmation":
        request = info.get("confirmation_request") or {}
        proposal_hash = request.get("proposal_hash")
        return {
            "kind": "confirmation",
            "tool": request.get("tool"),
            "proposal_hash": proposal_hash,
            "expires_at": request.get("expires_at"),
            "command": f"warrant run confirm {run_id} --proposal-hash {proposal_hash} --by NAME",
        }
    if status == "waiting_grant":
        grant = info.get("waiting_for_grant") or {}
        resources = [str(r) for r in grant.get("resources") or []]
        scope = resources[0] if len(resources) == 1 else "SCOPE"
        return {
            "kind": "grant",
            "tool": grant.get("tool"),
            "capability": grant.get("capability"),
            "resources": resources,
            "step": grant.get("step"),
            "proposal_hash": grant.get("proposal_hash"),
            "command": f"warrant run grant {run_id} --capability {grant.get('capability')} "
            f"--scope {scope} --by NAME",
        }
    if status == "needs_input":
        return {
            "kind": "answer",
            "question": info.get("answer"),
            "command": f'warrant run answer {run_id} --text "..." --by NAME',
        }
    if status == "handoff":
        created = [e for e in events if e["event"] == "handoff.created"]
        handoff = (created[-1].get("details") or {}).get("handoff_id") if created else None
        return {
            "kind": "handoff",
            "handoff_id": handoff,
            "command": f"warrant handoff show {handoff or run_id}",
        }
    return None


def why(info: dict[str, Any], events: list[dict[str, Any]]) -> dict[str, Any]:
    """``status``, ``stop_reason``, ``last_refusal`` and ``waiting_for`` of the run."""
    return {
        "status": info["status"],
        "stop_reason": info.get("stop_reason"),
        "last_refusal": last_refusal(events),
        "waiting_for": waiting_for(info, events),
    }


def why_lines(reason: dict[str, Any]) -> list[str]:
    """The same, for people: one line each (plain text, no markup)."""
    stop = reason["stop_reason"]
    lines = [f"{reason['status']}" + (f": {stop}" if stop else " (no stop reason yet)")]
    refusal = reason["last_refusal"]
    if refusal is not None:
        lines.append(
            f"last refusal: {refusal['code']} at step {refusal['step']} "
            f"({refusal['event']}): {refusal['message']}"
        )
    wait = reason["waiting_for"]
    if wait is not None:
        subject = {
            "confirmation": f"a person to confirm {wait.get('tool')}",
            "answer": f"an answer to: {wait.get('question')}",
            "handoff": f"a person to resolve handoff {wait.get('handoff_id')}",
            "grant": f"a grant of {wait.get('capability')} for {wait.get('tool')} on "
            f"{', '.join(wait.get('resources') or []) or '?'} (proposal "
            f"{str(wait.get('proposal_hash'))[:12]}, step {wait.get('step')})",
        }[wait["kind"]]
        lines.append(f"waits for {subject}")
        if wait["kind"] != "confirmation":  # `run show` prints the request and its command
            lines.append(f"  {wait['command']}")
    return lines
