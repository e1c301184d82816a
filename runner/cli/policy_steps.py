"""Which policy decided each step of a run: the ``policy_versions`` of ``warrant run show
--json``, read off the run's ``policy.versioned`` trace events (one per gate decision)."""

from __future__ import annotations

from typing import Any

from warrant.runner.cli.why import why
from warrant.runner.observe import would_refusals

__all__ = ["policy_versions", "trace_facts"]


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
    """One entry per gate decision, in order: ``step``, ``proposal_id``, ``decision``
    (``accepted``, ``refused``, ``needs_confirmation``, ``halted``), ``policy_version`` and
    the hashes of its parts (``contract_hash``, ``grants_hash``, ``settings_hash``)."""
    return [
        {"step": e.get("step"), "proposal_id": e.get("proposal_id"), **(e.get("details") or {})}
        for e in events
        if e.get("event") == "policy.versioned"
    ]
