"""The approval inbox in a real browser: Debian's Chromium, driven by Playwright, against
``warrant serve``'s pages on a real uvicorn server over the real stack (PostgreSQL, Redis, a
Celery worker). Facts are read back from the ledger."""

from __future__ import annotations

import os
import re
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from warrant_demo import scenarios as sc

from tests import facts
from tests.approvals_tool import CAPABILITY as PAY_CAPABILITY
from tests.approvals_tool import proposal as pay_proposal
from tests.browser import launch
from tests.conftest import wait_for
from tests.integration.test_gate_pipeline import memory_spec, save
from tests.integration.test_http_api import LiveServer, call, wait_until
from tests.integration.test_reconciler import settle
from tests.integration.test_sub_runs import children
from warrant.ledger.models import Confirmation

pytestmark = [pytest.mark.services, pytest.mark.slow]

SCREENSHOT = Path(__file__).parents[2] / "docs" / "inbox.png"
PHONE = {"width": 375, "height": 740}


@pytest.fixture(scope="module")
def api(client: Any) -> Iterator[str]:
    from warrant.runner.server.http import create_app

    with LiveServer(create_app(client=client)) as server:
        yield server.url


@pytest.fixture(scope="module")
def browser(api: str) -> Iterator[Any]:
    yield from launch()


@pytest.fixture(scope="module")
def people(engine: Any) -> dict[str, str]:
    """A token per person: an approver, a second approver, a viewer, a producer, an operator."""
    from warrant.runner.client.tokens import Tokens

    suffix = uuid.uuid4().hex[:6]
    made = {}
    for who, role in [
        ("alice", "approver"),
        ("bob", "approver"),
        ("vic", "viewer"),
        ("pat", "producer"),
        ("olga", "operator"),
    ]:
        name = f"{who}-{suffix}"
        made[who], _ = Tokens(engine).create(name, role, created_by="tests")
        made[f"label:{who}"] = f"{name} ({role})"
    return made


def log_in(context: Any, api: str, token: str, *, to: str = "/ui/inbox") -> Any:
    page = context.new_page()
    page.goto(api + to)
    assert page.url.startswith(api + "/ui/login"), page.url
    page.fill("#token", token)
    page.click("button[type=submit]")
    page.wait_for_url(api + to)
    return page


def _start(api: str, people: dict[str, str], outputs: list[dict[str, Any]]) -> tuple[str, str]:
    subject = f"inbox-{uuid.uuid4().hex[:8]}"
    spec = memory_spec(outputs, subject)
    r = call(api, people["pat"], "POST", "/v1/runs", json=spec)
    assert r.status_code == 201, r.text
    return r.json()["run_id"], subject


def cited_save(value: str, pid: str) -> dict[str, Any]:
    proposal = save(value, pid=pid)
    proposal["source_observation_ids"] = ["user-1", "tool-1"]
    proposal["reason_summary"] = "the user asked for answers in this language"
    return proposal


def test_an_approver_sees_a_request_appear_approves_it_and_watches_the_run_complete(
    api, browser, people, engine, worker, tmp_path
):
    context = browser.new_context()
    requested: list[str] = []
    context.on("request", lambda r: requested.append(r.url))
    page = log_in(context, api, people["alice"])
    assert page.locator("h1").inner_text() == "Approval inbox"  # others' requests may wait
    page.evaluate("window.loadedOnce = true")  # gone if the page reloads

    outputs = [sc.search("p1"), cited_save("zh-CN", "p2"), sc.final("Saved.", "tool-1", "tool-2")]
    run_id, subject = _start(api, people, outputs)
    card = page.locator(f"#req-{run_id}")
    card.wait_for(timeout=30_000)  # pushed by the live stream: nobody reloads
    assert page.evaluate("window.loadedOnce") is True

    # What the approver is shown: the exact proposal, the sensitive value included.
    assert card.locator(".tool").inner_text() == "save_preference"
    assert card.locator(".goal").inner_text() == sc.GOAL
    assert card.locator(".resource").inner_text() == f"memory:{subject}/answer_language"
    assert card.locator("[data-param=value] .value").inner_text() == '"zh-CN"'
    assert card.locator("[data-param=value] .tag").inner_text() == "sensitive"
    assert card.locator("[data-param=key] .value").inner_text() == '"answer_language"'
    assert card.locator(".badge.se-idempotent-write").is_visible()
    undo = card.locator(".undo").inner_text()  # no promise about an undo that does not exist
    assert "there is no undo" in undo and "no further effect" in undo
    assert re.fullmatch(r"(\d+ min )?\d+ s left", card.locator(".left").inner_text())
    expiry = card.locator("time.local").first.inner_text()  # the reader's zone, named
    assert re.search(r"\d{1,2}:\d{2}:\d{2}.*\s(UTC|GMT[+-]?[\d:]*|[A-Z]{2,5})$", expiry), expiry
    assert card.locator("[data-observation=user-1]").get_attribute("class") == "trusted"
    assert card.locator("[data-observation=tool-1] .badge.untrusted").count() == 1
    stored = call(api, people["vic"], "GET", f"/v1/runs/{run_id}").json()["confirmation_request"]
    assert stored["parameters"]["value"] == "<sensitive>"  # what the API and webhooks carry
    hash_fields = card.locator("input[name=proposal_hash]")  # the decision and the edit form
    assert hash_fields.count() == 2
    assert {h.get_attribute("value") for h in hash_fields.all()} == {stored["proposal_hash"]}
    assert card.locator(".impact").inner_text() == "not declared"  # save_preference has none

    page.set_viewport_size({"width": 1100, "height": 900})
    shot = tmp_path / "inbox.png"
    page.screenshot(path=str(shot), full_page=True)
    assert shot.stat().st_size > 10_000
    if os.environ.get("WARRANT_UPDATE_SCREENSHOTS") == "1":  # make screenshots
        SCREENSHOT.parent.mkdir(exist_ok=True)
        shutil.copyfile(shot, SCREENSHOT)

    runs_page = context.new_page()
    runs_page.goto(f"{api}/ui/runs")
    row = runs_page.locator(f"#run-{run_id} .status")
    assert row.inner_text() == "waiting_confirmation"
    runs_page.evaluate("window.loadedOnce = true")

    # Keyboard only: Tab to the approve button, press Enter.
    _tab_to(page, f"approve-{run_id}")
    page.keyboard.press("Enter")
    page.wait_for_url(re.compile(r".*/ui/inbox\?done=.*"))
    assert "approved" in page.locator("#notice").inner_text()
    assert page.locator(f"#req-{run_id}").count() == 0  # answered: no longer in the inbox

    row.filter(has_text="completed").wait_for(timeout=30_000)  # the list follows, live
    assert runs_page.evaluate("window.loadedOnce") is True
    run_page = context.new_page()
    run_page.goto(f"{api}/ui/runs/{run_id}")
    run_page.locator("#run-status", has_text="completed").wait_for(timeout=30_000)
    assert run_page.locator("#stop-reason").inner_text() == "FINAL_ANSWER_VALIDATED"
    assert run_page.locator("[data-event='confirmation.approved']").count() == 1
    assert run_page.locator("table.budgets th", has_text="tool calls").count() == 1

    [approved] = facts.events(engine, run_id, "confirmation.approved")
    assert approved.details["by"] == people["label:alice"]
    assert (approved.details["via"], approved.details["from"]) == ("web", "127.0.0.1")
    assert "Chrome" in approved.details["user_agent"]
    assert facts.count(engine, Confirmation, run_id=run_id, decided_by=people["label:alice"]) == 1
    assert requested and all(u.startswith(api) for u in requested), requested  # nothing else
    context.close()


def _tab_to(page: Any, element_id: str, *, limit: int = 200) -> None:
    page.locator("body").focus()
    for _ in range(limit):
        page.keyboard.press("Tab")
        if page.evaluate("document.activeElement && document.activeElement.id") == element_id:
            return
    raise AssertionError(f"#{element_id} cannot be reached with the keyboard")


def test_a_stale_page_cannot_approve_a_changed_proposal(api, browser, people, engine, worker):
    """Without JavaScript and on a phone-sized screen: the form works; the page drawn for one
    proposal cannot approve the next one."""
    context = browser.new_context(java_script_enabled=False, viewport=PHONE)
    outputs = [
        sc.search("p1"),
        cited_save("zh-CN", "p2"),
        cited_save("fr-FR", "p3"),
        sc.final("Saved.", "tool-1"),
    ]
    run_id, _ = _start(api, people, outputs)
    first = wait_until(api, people["alice"], run_id, {"waiting_confirmation", "failed"})
    stale = log_in(context, api, people["alice"])
    assert stale.locator(f"#req-{run_id} [data-param=value] .value").inner_text() == '"zh-CN"'
    width = stale.evaluate("[document.documentElement.scrollWidth, window.innerWidth]")
    assert width[0] <= width[1], f"the page scrolls sideways on a phone: {width}"

    # Another approver declines; the planner proposes something else, also to be confirmed.
    h = first["confirmation_request"]["proposal_hash"]
    r = call(api, people["bob"], "POST", f"/v1/runs/{run_id}/decline", json={"proposal_hash": h})
    assert r.status_code == 200, r.text
    second = wait_until(api, people["alice"], run_id, {"waiting_confirmation", "failed"})
    while second["version"] <= first["version"] + 1 or second["status"] != "waiting_confirmation":
        second = wait_until(api, people["alice"], run_id, {"waiting_confirmation", "failed"})
    assert second["confirmation_request"]["proposal_hash"] != h

    stale.click(f"#approve-{run_id}")  # the page still shows zh-CN
    refusal = stale.locator("#refusal")
    assert refusal.locator(".code").inner_text() == "CONFIRMATION_HASH_MISMATCH"
    assert facts.count(engine, Confirmation, run_id=run_id, approved=True) == 0
    # The page now shows the current proposal, which can be approved.
    fresh = stale.locator(f"#req-{run_id}")
    assert fresh.locator("[data-param=value] .value").inner_text() == '"fr-FR"'
    stale.click(f"#approve-{run_id}")
    assert "approved" in stale.locator("#notice").inner_text()
    done = wait_until(api, people["alice"], run_id, {"completed", "failed"})
    assert done["status"] == "completed", done
    context.close()


def test_forms_are_bound_to_the_session_and_roles(api, people, engine, worker):
    """CSRF, origin and role checks, in plain HTTP with the browser's cookie."""
    outputs = [sc.search("p1"), cited_save("de-DE", "p2"), sc.final("Saved.", "tool-1")]
    run_id, _ = _start(api, people, outputs)
    waiting = wait_until(api, people["alice"], run_id, {"waiting_confirmation", "failed"})
    h = waiting["confirmation_request"]["proposal_hash"]

    opened: list[httpx.Client] = []

    def session(who: str) -> httpx.Client:
        c = httpx.Client(base_url=api, timeout=30)
        opened.append(c)
        r = c.post("/ui/login", data={"token": people[who], "next": "/ui/inbox"})
        assert r.status_code == 303 and "warrant_token" in r.cookies, r.text
        assert "httponly" in r.headers["set-cookie"].lower()
        assert "samesite=strict" in r.headers["set-cookie"].lower()
        return c

    def csrf(c: httpx.Client) -> str:
        page = c.get("/ui/inbox")
        assert page.status_code == 200
        assert "default-src 'none'" in page.headers["content-security-policy"]
        found = re.search(r'name="csrf" value="([0-9a-f]{64})"', page.text)
        assert found, "no CSRF value on the page"
        return found.group(1)

    decide = f"/ui/runs/{run_id}/decide"
    alice = session("alice")
    form = {"decision": "approve", "proposal_hash": h, "csrf": "0" * 64}
    assert alice.post(decide, data=form).status_code == 403
    form["csrf"] = csrf(alice)
    other_site = alice.post(decide, data=form, headers={"Origin": "https://evil.example"})
    assert other_site.status_code == 403 and "CSRF_FAILED" in other_site.text
    # A form field never names who decides: the token does.
    vic = session("vic")
    page = vic.get("/ui/inbox").text
    assert "&#34;de-DE&#34;" not in page and "hidden from your role" in page  # viewer: masked
    viewer_form = {**form, "csrf": csrf(vic), "by": people["label:alice"]}
    refused = vic.post(decide, data=viewer_form)
    assert refused.status_code == 403 and "FORBIDDEN" in refused.text
    assert facts.count(engine, Confirmation, run_id=run_id) == 0
    # No cookie: the login form, and the API's own tokens do not open pages.
    anonymous = httpx.get(api + "/ui/inbox", timeout=30)
    assert anonymous.status_code == 303 and anonymous.headers["location"].startswith("/ui/login")
    ok = alice.post(decide, data=form)
    assert ok.status_code == 303 and ok.headers["location"].endswith("decision=approved")
    assert wait_until(api, people["alice"], run_id, {"completed", "failed"})["status"] == (
        "completed"
    )
    for c in opened:
        c.close()


def test_the_handoff_queue_resolves_a_run(api, browser, people, engine, client, worker):
    run_spec = sc.spec([sc.search(f"p{i}") for i in range(6)])
    run_spec["handoff"] = {"on_repeated_proposal": True}
    info = client.wait(client.start_run(run_spec), timeout=30)
    assert info.status == "handoff", info
    handoff_id = client.handoff(info.run_id)["handoff_id"]

    context = browser.new_context()
    page = log_in(context, api, people["olga"], to="/ui/handoffs")
    item = page.locator(f"#handoff-{handoff_id}")
    item.locator("summary", has_text="Bundle").click()
    assert "pending_proposal" in item.locator(".bundle").inner_text()
    item.locator("input[value=failed]").check()
    item.locator("textarea").fill("checked by hand: nothing to do")
    item.locator("button", has_text="Resolve").click()
    assert "resolved" in page.locator("#notice").inner_text()
    assert page.locator(f"#handoff-{handoff_id}").count() == 0
    [event] = facts.events(engine, info.run_id, "handoff.resolved")
    assert (event.details["by"], event.details["outcome"]) == (people["label:olga"], "failed")
    context.close()


def test_an_operator_grants_what_a_waiting_run_lacks_from_the_inbox(
    api, browser, people, engine, client, worker
):
    write = {
        "kind": "tool",
        "proposal_id": "p1",
        "tool": "write_artifact",
        "tool_version": "1",
        "arguments": {"path": "run-output/inbox-grant.md", "content": "hi"},
        "reason_summary": "",
        "source_observation_ids": [],
    }
    run_spec = sc.spec([write, sc.final("written", "tool-1")])
    run_spec["policy"] = {"on_missing_grant": "ask"}
    info = client.wait(client.start_run(run_spec), timeout=30)
    assert info.status == "waiting_grant", info

    viewer = browser.new_context()
    page = log_in(viewer, api, people["vic"])
    item = page.locator(f"#grant-{info.run_id}")
    assert "artifact:write" in item.locator(".capability").inner_text()
    assert item.locator("form").count() == 0  # a viewer reads, never grants
    viewer.close()

    context = browser.new_context()
    page = log_in(context, api, people["olga"])
    item = page.locator(f"#grant-{info.run_id}")
    assert item.locator(".resource").inner_text() == "run-output/inbox-grant.md"
    assert item.locator("input[name=resource_scope]").input_value() == "run-output/inbox-grant.md"
    item.locator("button", has_text="Grant").click()
    assert "granted" in page.locator("#notice").inner_text()
    done = wait_until(api, people["olga"], info.run_id, {"completed", "failed", "cancelled"})
    assert (done["status"], done["model_calls"]) == ("completed", 2)
    assert facts.commands(engine, info.run_id) == 1
    [added] = facts.events(engine, info.run_id, "grant.added")
    assert added.details["by"] == people["label:olga"]
    context.close()


def test_a_parallel_steps_calls_are_decided_together_from_the_inbox(
    api, browser, people, engine, worker
):
    """Two calls of one step need a person (issue 49): they wait together, each with its own
    hash; the API refuses a hash outside the set and an empty decision; the approver approves
    one and declines the other in one action from the page; only the approved one runs."""
    fan = {
        "kind": "parallel",
        "proposal_id": "two-saves",
        "calls": [cited_save("zh-CN", "s1"), cited_save("fr-FR", "s2")],
        "merge": "any",
    }
    run_id, _ = _start(api, people, [sc.search("p1"), fan, sc.final("Saved.", "tool-2.1")])
    waiting = wait_until(api, people["vic"], run_id, {"waiting_confirmation"})
    calls = waiting["confirmation_request"]["parallel"]["calls"]
    assert [c["status"] for c in calls] == ["needs_person", "needs_person"]
    first, second = (c["proposal_hash"] for c in calls)
    assert first != second and calls[1]["approvals_required"] == 1

    stray = call(
        api, people["bob"], "POST", f"/v1/runs/{run_id}/decisions", json={"approve": ["0" * 64]}
    )
    assert (stray.status_code, stray.json()["error"]["code"]) == (409, "CONFIRMATION_HASH_MISMATCH")
    empty = call(api, people["bob"], "POST", f"/v1/runs/{run_id}/decisions", json={})
    assert empty.json()["error"]["code"] == "DECISION_EMPTY", empty.text
    assert facts.count(engine, Confirmation, run_id=run_id) == 0

    context = browser.new_context()
    page = log_in(context, api, people["alice"])
    card = page.locator(f"#req-{run_id}")
    card.wait_for(timeout=30_000)
    assert card.locator("section.parallel li").count() == 2
    assert card.locator(f"#approve-{run_id}").count() == 0  # the set is decided as a set
    card.locator(f"#choice-{run_id}-1").select_option(f"approve:{first}")
    card.locator(f"#choice-{run_id}-2").select_option(f"decline:{second}")
    card.locator(f"#decide-set-{run_id}").click()
    page.wait_for_url(re.compile(r".*/ui/inbox\?done=.*"))
    assert "decided" in page.locator("#notice").inner_text()

    done = wait_until(api, people["alice"], run_id, {"completed", "failed", "cancelled"})
    assert done["status"] == "completed", done
    decided = {
        (e.event, e.details["branch"], e.details["by"])
        for e in facts.events(engine, run_id)
        if e.event in ("confirmation.approved", "confirmation.declined")
    }
    label = people["label:alice"]
    assert decided == {("confirmation.approved", 1, label), ("confirmation.declined", 2, label)}
    assert facts.commands(engine, run_id) == 2  # the search and the approved save, no other
    [merged] = facts.events(engine, run_id, "step.merged")
    statuses = {b["branch"]: b["status"] for b in merged.details["branches"]}
    assert statuses == {1: "succeeded", 2: "refused"}, merged.details
    context.close()


def test_a_sub_runs_request_shows_its_parents_goal_and_is_approved_from_the_inbox(
    api, browser, people, engine, client, worker, reconciler_worker
):
    """Issue 53: a child waiting for a person shows in the inbox with its parent's goal; the
    approval lets the child end, and the parent observes its result."""
    subject = f"inbox-{uuid.uuid4().hex[:8]}"
    child = {
        "goal": "Save the answer language.",
        "planner": {"kind": "fixture", "outputs": [save(pid="c1"), sc.final("Saved.", "tool-1")]},
        "grants": [{"capability": "memory:write", "resource_scope": f"memory:{subject}/*"}],
        "budgets": {"max_refused_finals": 0},
    }
    call_child = {
        "kind": "tool",
        "proposal_id": "p1",
        "tool": "delegate",
        "tool_version": "1",
        "arguments": child,
        "reason_summary": "",
        "source_observation_ids": [],
    }
    spec = memory_spec([call_child, sc.final("Done.", "job-1")], subject)
    spec["grants"].append({"capability": "runs:delegate"})
    spec["goal"] = "From now on, answer me in zh-CN."
    run_id = client.start_run(spec)
    [child_id] = wait_for(lambda: [c.id for c in children(engine, run_id)], what="the child")

    context = browser.new_context()
    page = log_in(context, api, people["alice"])
    card = page.locator(f"#req-{child_id}")
    card.wait_for(timeout=30_000)
    assert card.locator(".goal").inner_text() == "Save the answer language."
    assert card.locator(".parent-goal").inner_text() == "From now on, answer me in zh-CN."
    assert card.locator(".parent a").get_attribute("href") == f"/ui/runs/{run_id}"
    _tab_to(page, f"approve-{child_id}")
    page.keyboard.press("Enter")
    page.wait_for_url(re.compile(r".*/ui/inbox\?done=.*"))
    context.close()

    info = settle(client, run_id, timeout=60)
    assert (info.status, info.answer) == ("completed", "Done.")
    assert client.get_run(child_id).status == "completed"
    assert facts.count(engine, Confirmation, run_id=child_id) == 1


def test_an_approver_corrects_a_parameter_from_the_inbox_and_only_the_edit_runs(
    api, browser, people, engine, worker, tmp_path
):
    """The request shows the call's estimated impact; the edit form sends a corrected amount:
    a new proposal, gated again, approved by the edit; the original never runs."""
    ledger = tmp_path / "payments"
    outputs = [pay_proposal(ledger, 500), sc.final("Paid.", "tool-2")]
    spec = sc.spec(outputs, grants=[{"capability": PAY_CAPABILITY}])
    r = call(api, people["pat"], "POST", "/v1/runs", json=spec)
    assert r.status_code == 201, r.text
    run_id = r.json()["run_id"]
    context = browser.new_context()
    page = log_in(context, api, people["alice"])
    card = page.locator(f"#req-{run_id}")
    card.wait_for(timeout=30_000)
    assert card.locator(".impact").inner_text() == "pay 5.00 to acme"
    card.locator("details.correct summary").click()
    page.fill(f"#set-{run_id}-amount_cents", "250")
    page.fill(f"#reason-{run_id}", "only half")
    page.click(f"#correct-{run_id}")
    page.wait_for_url(re.compile(r".*/ui/inbox\?done=.*decision=corrected"))
    assert "corrected" in page.locator("#notice").inner_text()
    done = wait_until(api, people["alice"], run_id, {"completed", "failed"})
    assert done["status"] == "completed", done
    assert ledger.read_text().splitlines() == ["acme 250"]  # one payment, the corrected one
    [edit] = facts.events(engine, run_id, "proposal.corrected")
    assert (edit.details["by"], edit.details["via"]) == (people["label:alice"], "web")
    assert (edit.details["changed"], edit.details["reason"]) == (["amount_cents"], "only half")
    context.close()
