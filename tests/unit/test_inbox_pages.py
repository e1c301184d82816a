"""The inbox's pure parts: what is masked for whom, where a login may lead, the CSRF value,
the event stream's framing, and escaping of what runs and planners wrote."""

from __future__ import annotations

import re
from types import SimpleNamespace

import pytest

from warrant.runner.client.inbox import (
    CitedObservation,
    Parameter,
    PendingConfirmation,
    _parameters,
    _revealed,
)
from warrant.runner.server.web import live, session, views
from warrant.runner.server.web import views as render

SECRET, SENSITIVE = frozenset({"password"}), frozenset({"body"})
ARGS = {"to": "bob@example.com", "body": "hello", "password": "hunter2"}


def shown(*, reveal: bool, hidden=(SECRET, SENSITIVE)) -> dict[str, Parameter]:
    proposal = SimpleNamespace(arguments=ARGS)
    request = {"parameters": {**ARGS, "body": "<sensitive>", "password": "<sensitive>"}}
    return {p.name: p for p in _parameters(proposal, request, hidden, reveal)}  # type: ignore[arg-type]


def test_an_approver_sees_sensitive_values_and_nobody_sees_secrets():
    approver = shown(reveal=True)
    assert approver["body"] == Parameter("body", '"hello"', None, sensitive=True)
    assert approver["to"].value == '"bob@example.com"'
    assert approver["password"].masked == "secret" and "hunter2" not in approver["password"].value
    viewer = shown(reveal=False)
    assert viewer["body"].masked == "sensitive" and "hello" not in viewer["body"].value
    assert viewer["password"].masked == "secret"


def test_a_tool_gone_from_the_registry_shows_the_stored_masked_request():
    gone = shown(reveal=True, hidden=None)
    assert gone["body"].value == '"<sensitive>"' and gone["password"].value == '"<sensitive>"'


def revealed(hidden=(SECRET, SENSITIVE)):
    request = {"tool": "send", "tool_version": "1", "parameters": {**ARGS, "body": "<sensitive>"}}
    proposal = SimpleNamespace(
        arguments=ARGS,
        confirmation_request=request,
        proposal_hash="h1",
        tool="send",
        tool_version="1",
    )
    return _revealed(SimpleNamespace(id="run-1"), proposal, hidden)  # type: ignore[arg-type]


def test_a_reveal_shows_sensitive_values_as_json_values_and_never_a_secret():
    shown = revealed()
    assert shown.arguments == {"to": "bob@example.com", "body": "hello", "password": "<secret>"}
    assert (shown.fields, shown.proposal_hash, shown.tool_version) == (["body"], "h1", "1")
    gone = revealed(hidden=None)  # the tool left the registry: only the stored, masked request
    assert gone.arguments["body"] == "<sensitive>" and gone.fields == []


@pytest.mark.parametrize(
    ("asked", "goes"),
    [
        ("/ui/runs/abc", "/ui/runs/abc"),
        ("//evil.example/ui/", "/ui/inbox"),
        ("https://evil.example/ui/", "/ui/inbox"),
        ("/v1/runs", "/ui/inbox"),
        ("/ui/\\evil", "/ui/inbox"),
        (None, "/ui/inbox"),
    ],
)
def test_a_login_only_leads_to_our_pages(asked, goes):
    assert session.safe_next(asked) == goes


def test_the_csrf_value_is_bound_to_the_token():
    a, b = session.csrf_for("wrt_a"), session.csrf_for("wrt_b")
    assert re.fullmatch("[0-9a-f]{64}", a) and a != b and a == session.csrf_for("wrt_a")


def test_an_event_carries_every_line_of_its_fragment():
    assert live.event("fragment", "<p>\n1</p>") == "event: fragment\ndata: <p>\ndata: 1</p>\n\n"
    assert live.event("logout", "") == "event: logout\ndata: \n\n"


def test_time_left_reads_plainly():
    assert views.left(100.0, now=100.0) == "expired"
    assert views.left(145.0, now=100.0) == "45 s left"
    assert views.left(100.0 + 600, now=100.0) == "about 10 min left"
    assert views.clock(0) == "1970-01-01 00:00:00 UTC"


def test_what_a_planner_or_a_web_page_wrote_is_escaped():
    hostile = "<script>alert(1)</script>"
    item = PendingConfirmation(
        run_id="r1",
        version=3,
        goal=hostile,
        subject="s",
        started_by=None,
        step=2,
        tool="send",
        tool_version="1",
        action=hostile,
        resource=hostile,
        side_effect="irreversible",
        reversible=False,
        undo="Cannot be undone.",
        proposal_hash="a" * 64,
        expires_at=0.0,
        reason=hostile,
        parameters=[Parameter("to", f'"{hostile}"')],
        cited=[CitedObservation("tool-1", "tool-result", "untrusted-content", 1, hostile, True)],
        estimated_impact={"target": hostile},
    )
    context = {"items": [item], "may_confirm": True, "csrf": "c", "who": None}
    html = render.fragment("_inbox.html", context)
    # the six fields, the impact and the edit form's value
    assert "<script>" not in html and html.count("&lt;script&gt;") == 8
    assert 'name="proposal_hash" value="' + "a" * 64 in html
    assert "untrusted content: data, not instructions" in html


def _waiting_grant_run(goal: str = "write the report") -> SimpleNamespace:
    return SimpleNamespace(
        run_id="r9",
        version=4,
        goal=goal,
        waiting_for_grant={
            "tool": "write_artifact",
            "tool_version": "1",
            "capability": "artifact:write",
            "resources": ["run-output/<b>.md"],
            "code": "MISSING_CAPABILITY",
            "step": 1,
            "proposal_hash": "b" * 64,
        },
    )


def test_a_run_waiting_for_a_grant_shows_what_it_lacks_and_an_operator_form():
    run = _waiting_grant_run("<script>x</script>")
    context = {"items": [], "grants": [run], "may_grant": True, "csrf": "c", "who": None}
    html = render.fragment("_inbox.html", context)
    assert 'id="grant-r9"' in html and 'data-mark="grant:r9:4"' in html
    assert "artifact:write" in html and "MISSING_CAPABILITY" in html
    assert "run-output/&lt;b&gt;.md" in html and "<script>" not in html
    assert 'action="/ui/runs/r9/grant"' in html and 'name="resource_scope"' in html
    assert 'name="widen"' in html  # widening a standing grant is an explicit act
    assert "bbbbbbbbbbbb" in html and "Nothing is waiting" not in html
    viewer = SimpleNamespace(role="viewer")
    html = render.fragment("_inbox.html", {**context, "may_grant": False, "who": viewer})
    assert "/grant" not in html and "An operator grants it" in html


def test_a_tools_own_refusal_shows_what_the_tool_said():
    run = _waiting_grant_run()
    run.waiting_for_grant |= {
        "code": "TOOL_PERMISSION_DENIED",
        "source": "tool",
        "capability": "crm:contacts.update",
        "resources": ["contacts/7"],
        "message": "403: <i>not</i> allowed",
    }
    context = {"items": [], "grants": [run], "may_grant": True, "csrf": "c", "who": None}
    html = render.fragment("_inbox.html", context)
    assert "TOOL_PERMISSION_DENIED</code> by the tool" in html
    assert '<q class="said">403: &lt;i&gt;not&lt;/i&gt; allowed</q>' in html
    assert 'name="capability" value="crm:contacts.update"' in html
    assert 'name="resource_scope" value="contacts/7"' in html
    gate = render.fragment("_inbox.html", {**context, "grants": [_waiting_grant_run()]})
    assert "by the tool" not in gate


def test_the_inbox_view_lists_waiting_grant_runs_and_marks_them():
    asked = []

    class Fake:
        def pending_confirmations(self, *, reveal_sensitive):
            return []

        def list_runs(self, *, limit, status):
            asked.append(status)
            return [_waiting_grant_run()]

    from warrant.runner.authz import Role

    operator = SimpleNamespace(role=Role.OPERATOR)
    context = views.inbox(Fake(), operator)
    assert asked == ["waiting_grant"] and context["may_grant"] is True
    assert context["keys"] == ["grant:r9:4"]


def _request(**kw):
    base = dict(
        run_id="r2",
        version=4,
        goal="pay",
        subject="s",
        started_by="dave (producer)",
        step=1,
        tool="pay",
        tool_version="1",
        action="pay acme",
        resource="acme",
        side_effect="irreversible",
        reversible=False,
        undo="Cannot be undone.",
        proposal_hash="b" * 64,
        expires_at=0.0,
        reason="",
    )
    return PendingConfirmation(**{**base, **kw})  # type: ignore[arg-type]


def test_the_inbox_shows_who_has_approved_so_far():
    item = _request(approvals_required=2, approved_by=["alice (approver)"])
    context = {"items": [item], "may_confirm": True, "csrf": "c", "who": None}
    html = render.fragment("_inbox.html", context)
    assert "1 of 2 approvals: alice (approver)" in html
    one = render.fragment("_inbox.html", {**context, "items": [_request()]})
    assert "approvals" not in one  # a single approval needs no counter
    fake = SimpleNamespace(pending_confirmations=lambda **_: [item], list_runs=lambda **_: [])
    marks = views.inbox(fake, _who())["keys"]
    assert marks == [f"r2:4:{'b' * 64}:1"]  # a new approval redraws the request


def _who():
    from warrant.runner.authz import Identity, Role

    return Identity(token_id="t", name="carol", role=Role.APPROVER)


def test_the_inbox_says_which_values_a_third_party_the_user_pointed_at_supplied():
    """A vouched value (from an item whose author the goal names) and a reply's recipient (an
    item's author) are shown as such, the naming word escaped: what that author wrote is
    believed, so the approver is told whose words they are."""
    origins = {
        "iban": {"origin": "vouched", "observation_id": "tool-1.messages[1]", "named_as": "<b>Bob"},
        "to[0]": {"origin": "author", "observation_id": "tool-1.messages[0]"},
        "amount_cents": {"origin": "trusted"},
    }
    item = _request(flagged={"flagged": [], "origins": origins})
    html = render.fragment("_inbox.html", {"items": [item], "may_confirm": True, "csrf": "c"})
    assert "From a third party you pointed at" in html
    assert "<code>iban</code> (in <code>tool-1.messages[1]</code>" in html
    assert "&ldquo;&lt;b&gt;Bob&rdquo;" in html
    assert "the author of <code>tool-1.messages[0]</code>" in html
    assert "amount_cents" not in html.split("From a third party")[1].split("</p>")[0]
    plain = render.fragment("_inbox.html", {"items": [_request()], "may_confirm": True})
    assert "From a third party" not in plain


def test_the_inbox_says_when_a_write_is_not_read_back():
    """A call of an ``unverified`` write: the approver is told its success will be the
    tool's word only, and why (the contract's reason, escaped); a checked write says nothing."""
    item = _request(unverified_reason="the <relay> has no read API")
    html = render.fragment("_inbox.html", {"items": [item], "may_confirm": True, "csrf": "c"})
    assert "its success will be the tool's word only" in html
    assert "(the &lt;relay&gt; has no read API)" in html
    plain = render.fragment("_inbox.html", {"items": [_request()], "may_confirm": True})
    assert 'class="unverified"' not in plain
