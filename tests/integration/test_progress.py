"""Progress on real workers (issue 34): a cycle of different proposals with no new observation
stops, and so do steps that add nothing whatever they are."""

from __future__ import annotations

import pytest
from warrant_demo import scenarios as sc

from tests import facts
from tests.integration.test_tool_execution import LOOKUP, lookup

pytestmark = [pytest.mark.services, pytest.mark.slow]


def test_an_a_b_c_cycle_without_new_observations_stops(engine, run_to_end):
    # the first pass adds three observations; the second adds none; the third repeats it
    cycle = [lookup(q, pid=f"p{i}") for i, q in enumerate("abcabcabc" + "abc", start=1)]
    info = run_to_end(
        sc.spec(
            [*cycle, sc.final("done", "tool-1")],
            grants=[LOOKUP],
            max_steps=20,
            max_tool_calls=20,
            max_model_calls=20,
        )
    )
    assert (info.status, info.stop_reason) == ("failed", "PROPOSAL_OSCILLATION_DETECTED"), info
    [detected] = facts.events(engine, info.run_id, "proposal.oscillation_detected")
    assert detected.details == {"window": 6, "period": 3}
    assert info.step == 9 and facts.commands(engine, info.run_id) == 8  # the ninth never ran


def test_distinct_steps_that_add_nothing_stop_after_the_specs_limit(engine, run_to_end):
    # two lookups whose results repeat, in an order that forms no cycle and no triple repeat:
    # after the first two, every step adds nothing new
    queries = ["a", "b", "a", "a", "b", "b", "a"]
    steps = [lookup(q, pid=f"p{i}") for i, q in enumerate(queries, start=1)]
    spec = sc.spec(
        [*steps, sc.final("done", "tool-1")],
        grants=[LOOKUP],
        max_steps=20,
        max_tool_calls=20,
        max_model_calls=20,
        max_repeated_proposal=5,
        max_steps_without_new_observation=3,
    )
    info = run_to_end(spec)
    assert (info.status, info.stop_reason) == ("failed", "STEPS_WITHOUT_NEW_OBSERVATION"), info
    [stopped] = facts.events(engine, info.run_id, "proposal.no_progress")
    assert stopped.details == {"steps": 4}
