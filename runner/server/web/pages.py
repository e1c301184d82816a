"""The pages under ``/ui``: log in, the approval inbox, runs, one run, the handoff queue.

Every form works without JavaScript (a plain POST answered with a redirect, or with the page
and the refusal's code); the script only adds live updates and the time left. Decisions go
through the same client calls as the CLI and the API, so a refusal carries the same stable code
(``CONFIRMATION_HASH_MISMATCH``, ``CONFIRMATION_EXPIRED``, ``RUN_NOT_WAITING_CONFIRMATION``,
``FORBIDDEN``, ...), shown on the page."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Annotated, Any

from fastapi import APIRouter, Form, Query, Request
from fastapi.responses import RedirectResponse, Response

from warrant.runner.authz import Action, Identity, require
from warrant.runner.errors import TokenInvalid, WarrantError
from warrant.runner.server.http.auth import Deps, deps, origin
from warrant.runner.server.http.errors import status_for
from warrant.runner.server.web import session, views
from warrant.runner.server.web.views import page

__all__ = ["router"]

router = APIRouter(prefix="/ui", include_in_schema=False)

FormStr = Annotated[str, Form(max_length=4_000)]
Csrf = Annotated[str, Form(max_length=128)]
Decision = Annotated[str, Form(pattern="^(approve|decline)$")]
SeenState = Annotated[str | None, Form(max_length=128)]
RunId = Annotated[str, Query(max_length=64, pattern=r"^[A-Za-z0-9_-]*$")]


def _see_other(path: str) -> RedirectResponse:
    return RedirectResponse(path, status_code=303)


def _refused(exc: WarrantError) -> dict[str, Any]:
    return {"code": exc.code, "message": str(exc)}


@router.get("")
@router.get("/")
def home() -> RedirectResponse:
    return _see_other("/ui/inbox")


@router.get("/login")
def login_form(request: Request, next: str = "/ui/inbox") -> Response:
    return page(request, "login.html", {"next": session.safe_next(next)}, who=None)


@router.post("/login")
def login(request: Request, token: FormStr, next: FormStr = "/ui/inbox") -> Response:
    """Check the token, keep it in the session cookie, go where the person was going."""
    try:
        deps(request).tokens.authenticate(token.strip())
    except TokenInvalid as exc:
        context = {"next": session.safe_next(next), "error": _refused(exc)}
        return page(request, "login.html", context, who=None, status_code=401)
    response = _see_other(session.safe_next(next))
    session.remember(response, request, token.strip())
    return response


@router.post("/logout")
def logout(request: Request, csrf: Csrf) -> Response:
    session.identity(request)
    session.check_form(request, csrf)
    response = _see_other("/ui/login")
    session.forget(response)
    return response


def _view(request: Request, name: str, who: Identity, **params: Any) -> dict[str, Any]:
    loader, _ = views.VIEWS[name]
    return {"view": name, "live": params, **loader(deps(request).client, who, **params)}


def _reader(request: Request) -> Identity:
    who = session.identity(request)
    require(who, Action.READ)
    return who


def _act(
    request: Request,
    csrf: str,
    action: Action,
    do: Callable[[Deps, Identity], Any],
    view: str,
    done: str,
    **shown: Any,
) -> Response:
    """A form's change: checked (CSRF, the role may take ``action``), made, then a redirect to
    ``done``; refused, the ``view``'s page again with the refusal's code and its status."""
    who = session.identity(request)
    try:
        session.check_form(request, csrf)
        require(who, action)
        do(deps(request), who)
    except WarrantError as exc:
        context = {**_view(request, view, who), "error": _refused(exc), **shown}
        return page(request, f"{view}.html", context, who=who, status_code=status_for(exc))
    return _see_other(done)


@router.get("/inbox")
def inbox(request: Request, done: RunId = "", decision: str = "") -> Response:
    """The pending confirmations, oldest first, each with approve and decline."""
    who = _reader(request)
    context = _view(request, "inbox", who)
    if done and decision in ("approved", "declined", "granted", "decided", "corrected"):
        context["notice"] = f"Run {done}: {decision}."
        short = [p for p in context.get("items", []) if p.run_id == done and p.approved_by]
        if decision == "approved" and short:  # M of N: the request stays, with its counter
            n, m = len(short[0].approved_by), short[0].approvals_required
            context["notice"] = f"Run {done}: approval recorded ({n} of {m}); it waits for more."
    return page(request, "inbox.html", context, who=who)


@router.post("/runs/{run_id}/decide")
def decide(
    request: Request,
    run_id: str,
    decision: Decision,
    proposal_hash: FormStr,
    csrf: Csrf,
    precondition: SeenState = None,
) -> Response:
    """Approve or decline exactly the proposal the form was rendered with (and, approving, the
    state it showed: a moved one is refused ``PRECONDITION_CHANGED``)."""

    def do(d: Deps, who: Identity) -> None:
        how = {"by": who.label, "origin": origin(request, "web")}
        if decision == "approve":
            d.client.confirm(run_id, proposal_hash=proposal_hash, precondition=precondition, **how)
        else:
            d.client.decline(run_id, proposal_hash=proposal_hash, **how)

    done = f"/ui/inbox?done={run_id}&decision={'approved' if decision == 'approve' else 'declined'}"
    return _act(request, csrf, Action.CONFIRM, do, "inbox", done, failed_run=run_id)


@router.post("/runs/{run_id}/correct")
def correct(
    request: Request,
    run_id: str,
    proposal_hash: FormStr,
    csrf: Csrf,
    field: Annotated[list[str], Form()] = [],  # noqa: B006 (a form list)
    value: Annotated[list[str], Form()] = [],  # noqa: B006
    reason: Annotated[str, Form(max_length=500)] = "",
) -> Response:
    """Edit the proposal the form was rendered with: each argument's field as the person
    left it (JSON, or else a string); the unchanged ones change nothing. The new proposal is
    gated again (``ApprovalsClient.correct``)."""
    changes = {name: _form_value(text) for name, text in zip(field, value, strict=False)}

    def do(d: Deps, who: Identity) -> None:
        how = {"by": who.label, "origin": origin(request, "web")}
        d.client.correct(run_id, proposal_hash=proposal_hash, changes=changes, reason=reason, **how)

    done = f"/ui/inbox?done={run_id}&decision=corrected"
    return _act(request, csrf, Action.CONFIRM, do, "inbox", done, failed_run=run_id)


def _form_value(text: str) -> Any:
    """A form's value: JSON when it reads as JSON (``42``, ``"007"``), else the text."""
    try:
        return json.loads(text)
    except ValueError:
        return text


@router.post("/runs/{run_id}/decide-set")
def decide_set(
    request: Request,
    run_id: str,
    csrf: Csrf,
    choice: Annotated[list[str], Form()] = [],  # noqa: B006 (a form list)
    seen: Annotated[list[str], Form()] = [],  # noqa: B006
) -> Response:
    """Approve and decline several calls of a parallel step at once, each by its hash
    (``approve:<hash>`` / ``decline:<hash>``; an empty choice leaves that call for later)."""
    picked = [c.partition(":") for c in choice if c]
    approve = [h for what, _, h in picked if what == "approve"]
    decline = [h for what, _, h in picked if what == "decline"]
    shown = dict(item.partition(":")[::2] for item in seen)

    def do(d: Deps, who: Identity) -> None:
        how = {"by": who.label, "origin": origin(request, "web")}
        d.client.decide(
            run_id,
            approve=approve,
            decline=decline,
            seen={h: shown[h] for h in approve if h in shown},
            **how,
        )

    done = f"/ui/inbox?done={run_id}&decision=decided"
    return _act(request, csrf, Action.CONFIRM, do, "inbox", done, failed_run=run_id)


@router.post("/runs/{run_id}/grant")
def grant(
    request: Request,
    run_id: str,
    capability: FormStr,
    resource_scope: FormStr,
    csrf: Csrf,
    widen: Annotated[bool, Form()] = False,
) -> Response:
    """Grant what a ``waiting_grant`` run lacks (an operator): the same proposal is checked
    again by the gate. Wider than a standing grant: only with the ``widen`` box ticked."""

    def do(d: Deps, who: Identity) -> None:
        d.client.add_grant(
            run_id,
            capability=capability,
            resource_scope=resource_scope,
            granted_by=who.label,
            operator_token=d.operator_token,
            widen=widen,
        )

    done = f"/ui/inbox?done={run_id}&decision=granted"
    return _act(request, csrf, Action.GRANT, do, "inbox", done, failed_run=run_id)


@router.get("/runs")
def runs(request: Request, status: str = "") -> Response:
    """The newest runs with their live status."""
    who = _reader(request)
    return page(request, "runs.html", _view(request, "runs", who, status=status), who=who)


@router.get("/runs/{run_id}")
def run(request: Request, run_id: str) -> Response:
    """One run: its status, budgets and trace timeline."""
    who = _reader(request)
    try:
        context = _view(request, "run", who, run_id=run_id)
    except WarrantError as exc:
        context = {"error": _refused(exc), "title": "Run not found"}
        return page(request, "error.html", context, who=who, status_code=status_for(exc))
    return page(request, "run.html", context, who=who)


@router.get("/handoffs")
def handoffs(request: Request, resolved: RunId = "") -> Response:
    """The runs handed to a person: each bundle, and a form to end the run."""
    who = _reader(request)
    context = _view(request, "handoffs", who)
    if resolved:
        context["notice"] = f"Handoff {resolved} resolved."
    return page(request, "handoffs.html", context, who=who)


@router.post("/handoffs/{handoff_id}/resolve")
def resolve(
    request: Request, handoff_id: str, outcome: FormStr, reason: FormStr, csrf: Csrf
) -> Response:
    def do(d: Deps, who: Identity) -> None:
        d.client.resolve_handoff(handoff_id, outcome=outcome, by=who.label, reason=reason)

    done = f"/ui/handoffs?resolved={handoff_id}"
    return _act(request, csrf, Action.RESOLVE_HANDOFF, do, "handoffs", done)
