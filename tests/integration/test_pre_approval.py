"""Pre-approved proposals on the real pipeline: an unattended run uses each one once; the rest
still waits for a person; ``warrant run show`` lists what was pre-approved and used."""

from __future__ import annotations

import json
import uuid

import pytest
from warrant_demo import scenarios as sc

from tests import facts
from tests.integration.test_cli import warrant
from tests.integration.test_reconciler import NOTICES, notice, pre_approved, spec
from warrant.runner.errors import SpecError

pytestmark = [pytest.mark.services, pytest.mark.slow]


def _recipient() -> str:
    return f"{uuid.uuid4().hex[:8]}@example.com"


def test_an_irreversible_write_runs_unattended_once_when_pre_approved(
    engine, client, demo, worker, draft_worker
):
    """``send_notice`` is irreversible: without a person it runs only on a pre-approval of
    exactly that proposal, and the pre-approval is spent by its first use."""
    to = _recipient()
    run_spec = spec(
        [notice(to, "p1"), notice(to, "p2"), sc.final("Sent.", "tool-1")], grants=[NOTICES]
    )
    run_spec["pre_approved"] = [pre_approved(notice(to))]
    run_id = client.start_run(run_spec)
    info = client.wait(run_id, timeout=30, until={"waiting_confirmation", "failed"})
    assert info.status == "waiting_confirmation", info
    assert info.confirmation_request["tool"] == "send_notice"
    assert demo.notice_count(recipient=to) == 1
    [used] = info.pre_approvals
    assert (used["used_by_proposal"], used["approved_by"]) == ("p1", "ops@example.com")
    checked = facts.events(engine, run_id, "policy.confirmation.checked")
    assert [(e.details["why"], e.details["result"]) for e in checked] == [
        ("side-effect", "pre-approved"),
        ("side-effect", "missing"),
    ]


def test_without_a_pre_approval_the_notice_waits_for_a_person(
    engine, client, demo, worker, draft_worker
):
    to = _recipient()
    run_spec = spec([notice(to), sc.final("Sent.", "tool-1")], grants=[NOTICES])
    # the user names the recipient: a planner inside warrant writing an address nothing the
    # run read holds is refused UNTRUSTED_DESTINATION (issue 51), not asked about
    run_spec["goal"] = f"Tell {to} that the refund is on its way."
    run_id = client.start_run(run_spec)
    info = client.wait(run_id, timeout=30, until={"waiting_confirmation", "failed"})
    assert info.status == "waiting_confirmation" and demo.notice_count(recipient=to) == 0
    stranger = _recipient()
    unnamed = client.start_run(
        spec([notice(stranger), sc.final("Sent.", "tool-1")], grants=[NOTICES])
    )
    client.wait(unnamed, timeout=30)
    [checked] = facts.events(engine, unnamed, "policy.provenance.checked")
    assert (checked.details["code"], checked.details["refused"]) == (
        "UNTRUSTED_DESTINATION",
        ["recipient"],
    ), checked.details
    assert demo.notice_count(recipient=stranger) == 0


def test_an_operator_pre_approves_over_the_cli_and_run_show_lists_it(
    client, demo, worker, draft_worker
):
    to = _recipient()
    run_id = client.start_run(
        spec([notice(to), sc.final("Sent.", "tool-1")], grants=[NOTICES]), publish=False
    )
    arguments = json.dumps(notice(to)["arguments"])
    added = warrant(
        "run", "pre-approve", run_id, "--tool", "send_notice", "--tool-version", "1",
        "--arguments", arguments, "--by", "ops@example.com", "--json",
    )  # fmt: skip
    assert added.returncode == 0, added.stderr
    assert json.loads(added.stdout)["pre_approval_id"] > 0
    client.publisher.planner(run_id, 1)
    info = client.wait(run_id, timeout=30)
    assert (info.status, info.answer) == ("completed", "Sent."), info
    assert demo.notice_count(recipient=to) == 1
    shown = warrant("run", "show", run_id, "--json")
    assert shown.returncode == 0, shown.stderr
    pre = json.loads(shown.stdout)["pre_approvals"]
    assert [(p["tool"], p["used_by_proposal"]) for p in pre] == [("send_notice", "p1")]
    table = warrant("run", "show", run_id)
    assert "pre-approved" in table.stdout and "ops@example.com" in table.stdout


def test_a_pre_approval_the_tool_schema_refuses_is_a_spec_error_naming_the_field(client):
    bad = spec([sc.final("x", "user-1")], grants=[NOTICES])
    bad["pre_approved"] = [
        {"tool": "send_notice", "tool_version": "1", "arguments": {"recipient": "a@b.c"},
         "approved_by": "ops"}
    ]  # fmt: skip
    with pytest.raises(SpecError) as err:
        client.start_run(bad, publish=False)
    assert err.value.errors[0]["field"] == "pre_approved.0.arguments"
    cli = warrant(
        "run", "pre-approve", "no-such-run", "--tool", "send_notice", "--tool-version", "1",
        "--arguments", "[1]", "--by", "ops", "--json",
    )  # fmt: skip
    assert cli.returncode == 2  # bad input
    assert json.loads(cli.stdout)["error"]["code"] == "ARGUMENTS_NOT_OBJECT"
