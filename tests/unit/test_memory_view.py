"""The planner's view says what it left out (issue 34, visible truncation): a cut list ends
with how many items are missing, the view counts the older observations it omits, and a tool
output's paging fields survive the cut of a long item."""

from __future__ import annotations

import json

from warrant.runner.memory_view import ObservationRecord, build_view
from warrant.runner.planners.openai_compatible import render_view


def goal() -> ObservationRecord:
    return ObservationRecord(
        observation_id="user-1", kind="user", source="user", step=0, content={"goal": "g"}
    )


def result(n: int, output: dict) -> ObservationRecord:
    return ObservationRecord(
        observation_id=f"tool-{n}",
        kind="tool-result",
        source="trusted-tool",
        step=n,
        content={"tool": "t", "status": "succeeded", "output": output},
    )


def view(*observations: ObservationRecord, **limits):
    return build_view(
        run_id="r",
        step=99,
        observations=[goal(), *observations],
        tools=[],
        budgets={},
        preferences={},
        **limits,
    )


def test_a_cut_list_says_how_many_items_it_left_out():
    (item,) = view(result(1, {"rows": list(range(50))})).items
    rows = json.loads(item.content)["output"]["rows"]
    assert rows[:20] == list(range(20)) and rows[20] == "…[30 more items]" and len(rows) == 21
    (whole,) = view(result(1, {"rows": list(range(20))})).items
    assert json.loads(whole.content)["output"]["rows"] == list(range(20))


def test_the_view_counts_the_older_observations_it_omits():
    shown = view(*(result(n, {"n": n}) for n in range(1, 12)), max_items=8)
    assert shown.items[0].item_id == "tool-4" and shown.omitted_items == 3
    assert view(result(1, {"n": 1})).omitted_items == 0


def test_paging_fields_survive_the_cut_of_a_long_item():
    long = {"text": "x" * 399, "pages": ["y" * 399] * 10, "next_cursor": "c-42", "truncated": True}
    (item,) = view(result(1, long), max_item_chars=300).items
    assert "more chars]" in item.content
    assert item.content.endswith('paging: {"next_cursor": "c-42", "truncated": true}')


def test_each_item_carries_when_the_ledger_recorded_its_observation():
    made = ObservationRecord(
        observation_id="tool-1",
        kind="tool-result",
        source="trusted-tool",
        step=1,
        content={"tool": "t", "status": "succeeded", "output": {}},
        observed_at="2026-12-07T13:45:01.123456Z",
    )
    shown = view(made)
    assert shown.items[0].observed_at == "2026-12-07T13:45:01.123456Z"
    assert "observed 2026-12-07T13:45:01.123456Z" in render_view(shown)
