"""The pure parts of a tool's precondition read (``warrant.tools._contract``): the
fingerprint, its summary, what counts as moved, and how a request and ``run show`` show it."""

from __future__ import annotations

import pytest

from warrant.runner.cli.run_shown import precondition_line
from warrant.tools._contract import fingerprint_of, moved


def test_the_fingerprint_is_stable_whatever_the_key_order():
    one = fingerprint_of({"balance_cents": 700, "status": "open"})
    two = fingerprint_of({"status": "open", "balance_cents": 700})
    assert one == two and len(one.digest) == 64
    assert one.summary == {"balance_cents": "700", "status": "open"}


def test_any_change_of_state_changes_the_fingerprint():
    base = fingerprint_of({"balance_cents": 700, "status": "open"})
    assert fingerprint_of({"balance_cents": 701, "status": "open"}).digest != base.digest
    assert fingerprint_of({"balance_cents": 700.0, "status": "open"}).digest == base.digest
    assert fingerprint_of({"balance_cents": "700", "status": "open"}).digest != base.digest


def test_a_string_is_a_state_of_its_own():
    said = fingerprint_of("v42")
    assert said.summary == {"state": "v42"}
    assert said.digest == fingerprint_of({"state": "v42"}).digest


def test_the_summary_is_bounded_and_printable():
    said = fingerprint_of({f"k{i:02}": "x" * 500 + "\x00\n" for i in range(30)})
    assert len(said.summary) == 20
    assert all(len(v) == 200 and v.isprintable() for v in said.summary.values())
    nested = fingerprint_of({"order": {"status": "paid", "items": [1, 2]}})
    assert nested.summary == {"order": '{"items": [1, 2], "status": "paid"}'}


@pytest.mark.parametrize("answer", [None, 42, ["open"], {"at": object()}, {"x": float("nan")}])
def test_an_answer_that_is_no_state_is_refused(answer):
    with pytest.raises(ValueError):
        fingerprint_of(answer)


def test_moved_compares_with_the_approved_fingerprint_and_fails_closed_without_one():
    now = fingerprint_of({"balance_cents": 700})
    assert not moved(now.digest, now)
    assert moved(fingerprint_of({"balance_cents": 701}).digest, now)
    assert moved(None, now)  # no state was shown: the person must see one first


def test_the_request_shows_the_precondition():
    from tests.precondition_tool import WITHDRAW
    from warrant.runner.gate import AwaitConfirmation
    from warrant.runner.spec import ToolProposal

    args = {"account": "a.json", "amount_cents": 5, "ledger": "l"}
    state = fingerprint_of({"balance_cents": 700}).shown()
    asked = AwaitConfirmation(
        proposal=ToolProposal(
            kind="tool", proposal_id="w1", tool="withdraw", tool_version="1", arguments=args
        ),
        tool=WITHDRAW,
        arguments=args,
        proposal_hash="h",
        resource="a.json",
        events=[],
        precondition=state,
    )
    assert asked.request()["precondition"] == state
    assert (
        "precondition"
        not in AwaitConfirmation(**{**asked.__dict__, "precondition": None}).request()
    )


def test_run_show_says_the_state_or_why_it_is_unknown():
    state = fingerprint_of({"balance_cents": 700, "status": "open"}).shown()
    assert precondition_line(state) == (
        f"balance_cents=700, status=open (fingerprint {state['fingerprint'][:16]})"
    )
    unread = {"fingerprint": None, "error": "PRECONDITION_UNREADABLE"}
    assert precondition_line(unread) == "unreadable (PRECONDITION_UNREADABLE)"
