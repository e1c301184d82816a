"""Which runs take a caller's proposal (``warrant.runner.external``): the checks made
under the run's lock before anything is recorded."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from warrant.runner.errors import InvalidRequest, RunFinished, StateConflict
from warrant.runner.external import check_open as _check_open
from warrant.runner.external import check_shape


def run(status: str, phase: str = "planning", step: int = 2) -> SimpleNamespace:
    return SimpleNamespace(id="r1", status=status, phase=phase, step=step, stop_reason="X")


@pytest.mark.parametrize(
    ("status", "phase", "code"),
    [
        ("running", "policy", "PROPOSAL_IN_FLIGHT"),
        ("running", "tool", "PROPOSAL_IN_FLIGHT"),
        ("waiting_confirmation", "idle", "PROPOSAL_IN_FLIGHT"),
        ("needs_input", "idle", "PROPOSAL_IN_FLIGHT"),
        ("cancelling", "tool", "PROPOSAL_IN_FLIGHT"),
        ("reconciling", "idle", "RUN_RECONCILING"),
        ("completed", "idle", "RUN_FINISHED"),
        ("failed", "idle", "RUN_FINISHED"),
        ("handoff", "idle", "RUN_FINISHED"),
    ],
)
def test_a_run_that_is_not_waiting_for_a_proposal_refuses_one(status, phase, code):
    with pytest.raises(StateConflict) as err:
        _check_open(run(status, phase), None)
    assert err.value.code == code
    assert isinstance(err.value, RunFinished) == (code == "RUN_FINISHED")


def test_a_run_waiting_for_a_proposal_takes_the_next_step_only():
    _check_open(run("running"), None)
    _check_open(run("running"), 3)
    with pytest.raises(StateConflict) as err:
        _check_open(run("running"), 4)
    assert err.value.code == "STEP_MISMATCH"


@pytest.mark.parametrize("raw", [[], "text", 3, None])
def test_a_proposal_is_an_object(raw):
    with pytest.raises(InvalidRequest) as err:
        check_shape(raw)
    assert err.value.code == "PROPOSAL_INVALID"


def test_a_proposal_has_a_size_limit():
    with pytest.raises(InvalidRequest) as err:
        check_shape({"kind": "tool", "arguments": {"text": "x" * 300_000}})
    assert err.value.code == "PROPOSAL_TOO_LARGE"
