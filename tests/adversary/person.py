"""A person at the confirmation prompt, and the loop that drives one run to its end.

The scenario says who answers (``Scenario.person``): a ``careful`` person approves a request
only if it is exactly one of the calls the task needs (tool and every visible parameter; a
masked one cannot be checked and proves nothing either way) and declines anything else, so the
planner goes on; ``declines-flagged`` approves whatever the gate does not flag as coming from
untrusted content (its ``provenance`` flags) and declines the rest; ``approves-all`` approves
everything. What each request showed is kept for the report.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tests.adversary.scenario import PERSON, Call, Scenario
from warrant.runner.client.runs import SETTLED
from warrant.runner.errors import SpecError

__all__ = ["Decision", "Drive", "approves", "drive", "flagged_arguments", "matching_call"]

MASKED = "<sensitive>"
#: More requests than this in one run means the run is stuck asking: stop answering.
MAX_DECISIONS = 20


@dataclass(frozen=True)
class Decision:
    tool: str
    parameters: dict[str, Any]
    proposal_hash: str
    approved: bool
    call: str | None
    """The legitimate call the request matched, if any."""
    flagged: tuple[str, ...]
    """Arguments the request's provenance flags as coming only from untrusted content."""


@dataclass
class Drive:
    run_id: str
    status: str
    stop_reason: str | None
    pre_approved_refused: str | None = None
    """Why the spec with ``pre_approved`` was refused (the run then started without it)."""
    decisions: list[Decision] = field(default_factory=list)


def flagged_arguments(request: dict[str, Any] | None) -> tuple[str, ...]:
    """The argument paths a confirmation request flags (``provenance.flagged[].argument``)."""
    provenance = (request or {}).get("provenance")
    if not isinstance(provenance, dict):
        return ()
    flagged = provenance.get("flagged") or []
    return tuple(str(f.get("argument")) for f in flagged if isinstance(f, dict))


def matching_call(request: dict[str, Any], legit: list[Call]) -> Call | None:
    """The legitimate call the request is exactly (visible parameters), or ``None``."""
    shown = request.get("parameters") or {}
    for call in legit:
        if call.tool != request.get("tool"):
            continue
        masked = {k for k, v in shown.items() if v == MASKED}
        visible = {k: v for k, v in shown.items() if k not in masked}
        wanted = {k: v for k, v in call.arguments.items() if k not in masked}
        if visible == wanted:
            return call
    return None


def approves(person: str, request: dict[str, Any], call: Call | None) -> bool:
    """Does ``person`` approve this request (``call``: the task's call it matches, if any)?"""
    if person == "approves-all":
        return True
    if person == "declines-flagged":
        return not flagged_arguments(request)
    return call is not None


def _start(client: Any, scenario: Scenario) -> tuple[str, str | None]:
    if scenario.approval != "pre-approved":
        return client.start_run(scenario.spec(pre_approved=False)), None
    try:
        return client.start_run(scenario.spec(pre_approved=True)), None
    except SpecError as exc:
        fields = [e.get("field", "") for e in exc.errors]
        if not any(f.startswith("pre_approved") for f in fields):
            raise
        refused = f"{exc.code}: {', '.join(fields)}"
        return client.start_run(scenario.spec(pre_approved=False)), refused


def drive(
    client: Any,
    scenario: Scenario,
    *,
    timeout: float = 60.0,
    sweep: Callable[[], None] | None = None,
) -> Drive:
    """Start the scenario's run and answer its confirmation requests until it settles.
    With ``sweep``, a run waiting for reconciliation gets a reconciler sweep (what beat would
    schedule) each time it is seen there."""
    run_id, refused = _start(client, scenario)
    legit = scenario.legit_calls()
    decisions: list[Decision] = []
    end = time.monotonic() + timeout
    until = set(SETTLED) | ({"reconciling"} if sweep is not None else set())
    while True:
        info = client.wait(run_id, timeout=max(0.1, end - time.monotonic()), until=until)
        if info.status == "reconciling" and sweep is not None and time.monotonic() < end:
            sweep()
            client.wait(run_id, timeout=0.5, until=SETTLED)
            continue
        if info.status != "waiting_confirmation" or len(decisions) >= MAX_DECISIONS:
            break
        request = info.confirmation_request or {}
        call = matching_call(request, legit)
        phash = str(request.get("proposal_hash"))
        if approves(scenario.person, request, call):
            client.confirm(run_id, proposal_hash=phash, by=PERSON)
        else:
            client.decline(run_id, proposal_hash=phash, by=PERSON)
        decisions.append(
            Decision(
                tool=str(request.get("tool")),
                parameters=dict(request.get("parameters") or {}),
                proposal_hash=phash,
                approved=approves(scenario.person, request, call),
                call=call.name if call is not None else None,
                flagged=flagged_arguments(request),
            )
        )
    return Drive(run_id, info.status, info.stop_reason, refused, decisions)
