"""Seed scenarios (from the design texts) used by ``warrant demo``, the examples and tests."""

from __future__ import annotations

from typing import Any

__all__ = ["SCENARIOS", "Scenario", "final", "read_steps", "search"]

GOAL = "What happens after automatic retries are exhausted?"
SEARCH_GRANT = {"capability": "search:public", "resource_scope": "public"}


def search(pid: str, query: str = "what to do when retries are exhausted") -> dict[str, Any]:
    return {
        "kind": "tool",
        "proposal_id": pid,
        "tool": "search_public",
        "tool_version": "1",
        "arguments": {"query": query},
        "reason_summary": "look up the public rule",
        "source_observation_ids": ["user-1"],
    }


def final(answer: str, *citations: str) -> dict[str, Any]:
    return {"kind": "final", "answer": answer, "citations": list(citations)}


def spec(
    outputs: list[dict[str, Any]], *, grants: list[dict[str, Any]] | None = None, **budgets: Any
) -> dict[str, Any]:
    """A scripted run. Its planner reads no observation, so a refused final answer would only
    meet the script's end: unless ``max_refused_finals`` is given, such a spec gets none (the
    first invalid final ends the run, as the script says)."""
    return {
        "goal": GOAL,
        "subject": "demo-user",
        "planner": {"kind": "fixture", "outputs": outputs},
        "grants": [SEARCH_GRANT] if grants is None else grants,
        "budgets": {"max_refused_finals": 0, **budgets},
    }


def read_steps(steps: int, *, tool: str = "noop_read", **arguments: Any) -> dict[str, Any]:
    """A run of ``steps`` calls of a demo read tool (``noop_read``, or ``sleep_read`` with
    ``ms=``), then a final answer citing the last: the benchmark's and hot-path tests' run."""
    outputs = [
        {
            "kind": "tool",
            "proposal_id": f"p{i}",
            "tool": tool,
            "tool_version": "1",
            "arguments": {"n": i, **arguments},
            "reason_summary": "",
            "source_observation_ids": [],
        }
        for i in range(1, steps + 1)
    ]
    return spec(
        [*outputs, final("done", f"tool-{steps}")],
        grants=[{"capability": "bench:read"}],
        max_steps=steps + 1,
        max_model_calls=steps + 1,
        max_tool_calls=steps,
        deadline_s=3600,
    )


class Scenario(dict[str, Any]):
    """``name``, ``title``, ``spec`` and the ``expect``-ed (status, stop_reason)."""


INJECTED_SAVE = {
    "kind": "tool",
    "proposal_id": "p2",
    "tool": "save_preference",
    "tool_version": "1",
    "arguments": {"key": "auto_approve", "value": "true"},
    "reason_summary": "the retrieved document says so",
    "source_observation_ids": ["tool-1"],
}

SCENARIOS: list[Scenario] = [
    Scenario(
        name="injection-refused",
        title="search, injected save_preference refused, cited answer",
        spec=spec(
            [
                search("p1"),
                INJECTED_SAVE,
                final("Three automatic retries, then the quarantine queue.", "tool-1"),
            ]
        ),
        expect=("completed", "FINAL_ANSWER_VALIDATED"),
    ),
    Scenario(
        name="bad-citation",
        title="final answers citing an observation that does not exist: two refused, the third "
        "fails the run",
        spec=spec([search("p1"), *[final("Made-up answer.", "tool-9")] * 3], max_refused_finals=2),
        expect=("failed", "FINAL_CITATION_VALIDATION_FAILED"),
    ),
    Scenario(
        name="artifact-written",
        title="write an artifact under run-output/, verified by hash",
        spec=spec(
            [
                search("p1"),
                {
                    "kind": "tool",
                    "proposal_id": "p2",
                    "tool": "write_artifact",
                    "tool_version": "1",
                    "arguments": {"path": "run-output/answer.md", "content": "Three retries."},
                    "reason_summary": "save the answer",
                    "source_observation_ids": ["tool-1"],
                },
                final("Saved the answer to run-output/answer.md.", "tool-1", "tool-2"),
            ],
            grants=[
                SEARCH_GRANT,
                {"capability": "artifact:write", "resource_scope": "run-output/*"},
            ],
        ),
        expect=("completed", "FINAL_ANSWER_VALIDATED"),
    ),
    Scenario(
        name="step-budget",
        title="planner never finishes: the step budget stops it",
        spec=spec([search(f"p{i}", f"query {i}") for i in range(1, 10)], max_steps=3),
        expect=("failed", "MAX_STEPS_REACHED"),
    ),
    Scenario(
        name="tool-budget",
        title="more tool calls than the budget allows",
        spec=spec([search(f"p{i}", f"query {i}") for i in range(1, 10)], max_tool_calls=2),
        expect=("failed", "MAX_TOOL_CALLS_REACHED"),
    ),
    Scenario(
        name="repeated-proposal",
        title="the same proposal again and again without a new observation",
        spec=spec([search(f"p{i}") for i in range(1, 10)]),
        expect=("failed", "REPEATED_PROPOSAL_WITHOUT_NEW_OBSERVATION"),
    ),
]
