"""The client's runs: start one, read it (state, trace, observations, working memory), wait
for it to settle, cancel it. One part of :class:`warrant.runner.client.api.Client`."""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable
from typing import Any

import psycopg
from sqlalchemy import Engine
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from warrant.broker import telemetry
from warrant.ledger import reads
from warrant.ledger.db import retry_once_on_disconnect, session_scope
from warrant.ledger.db_clock import DatabaseClock
from warrant.ledger.delegation import children_of, children_shown
from warrant.ledger.forks import fork_run
from warrant.ledger.memory_store import MemoryStore
from warrant.ledger.memory_views import load_view
from warrant.ledger.models import Run
from warrant.ledger.operator import (
    approve_policy,
    cancel_locked,
    lock_run,
    policy_approvals,
    switch_tool,
)
from warrant.ledger.runs_create import create_from_spec
from warrant.ledger.stage_loads import autocommit, run_status
from warrant.ledger.workers import live_workers
from warrant.runner.client.idempotency import origin as start_origin
from warrant.runner.client.idempotency import run_for_key
from warrant.runner.client.run_info import SETTLED, RunInfo
from warrant.runner.codes import RunStatus
from warrant.runner.confirmation_rules import pre_approval_record
from warrant.runner.costs import check_priced, deadline_fit
from warrant.runner.errors import InvalidRequest, RunNotFound, SpecError, StateConflict
from warrant.runner.forks import merge_patch
from warrant.runner.grants import check_task_sources
from warrant.runner.policy_version import deployment_policy, form_diff
from warrant.runner.routing import fallback_problem
from warrant.runner.settings import load_settings
from warrant.runner.spec import (
    OpenAIPlannerSpec,
    PluginPlannerSpec,
    RouterPlannerSpec,
    RunSpec,
    parse_run_spec,
)
from warrant.runner.step_decisions import check_success_spec
from warrant.runner.webhook_signing import check_webhook
from warrant.tools._plugins import registry_for

__all__ = ["SETTLED", "RunInfo", "RunsClient", "found_run", "validated_spec"]

#: :meth:`RunsClient.wait_change`'s first and longest pause between two looks at the run.
FIRST_CHANGE_PAUSE_S, MAX_CHANGE_PAUSE_S = 0.05, 0.5
#: The longest tool name and kill-switch reason :meth:`RunsClient.disable_tool` records.
MAX_TOOL_NAME, MAX_SWITCH_REASON = 200, 500

log = logging.getLogger("warrant.client")


class RunsClient:
    """Starts, reads, waits for and cancels runs; holds the ledger's engine and the publisher."""

    def __init__(
        self,
        *,
        engine: Engine,
        publisher: Any = None,
        publisher_factory: Callable[[], Any] | None = None,
    ) -> None:
        self.engine = engine
        self._publisher = publisher
        self._publisher_factory = publisher_factory
        self._db_clock = DatabaseClock(engine)

    @property
    def publisher(self) -> Any:
        """The broker's publisher, made on first use (``publisher_factory``): a command that
        only reads the ledger never imports Celery."""
        if self._publisher is None and self._publisher_factory is not None:
            self._publisher = self._publisher_factory()
        return self._publisher

    def start_run(
        self,
        spec: RunSpec | dict[str, Any] | str,
        *,
        publish: bool = True,
        idempotency_key: str | None = None,
        started_by: str | None = None,
    ) -> str:
        """Validate, record and enqueue a run. A bad spec raises SpecError; nothing is written.

        A broker that cannot be reached raises :class:`~warrant.runner.errors.BrokerUnavailable`
        with the run's id: the run is recorded (running, planning) and the reconciler's
        stalled-run sweep publishes its first message once the broker is back.

        With an ``idempotency_key``, a start that repeats one (the same key and the same
        validated spec) returns the run the first one recorded and publishes nothing; the
        same key with another spec raises :class:`StateConflict` ``IDEMPOTENCY_KEY_REUSED``.
        Two concurrent starts with one key record one run (the unique index decides)."""
        spec = validated_spec(spec)
        origin = start_origin(spec, idempotency_key=idempotency_key, started_by=started_by)
        if (known := run_for_key(self.engine, origin)) is not None:
            return known
        pre = pre_approval_records(spec)
        run_id = str(uuid.uuid4())
        with telemetry.span("run.start", run_id=run_id):
            recorded = self._record_run(
                run_id, spec, pre, trace_id=telemetry.current_trace_id(), origin=origin
            )
            if publish and recorded == run_id:
                self.publisher.planner(run_id, 1)
        return recorded

    def fork_run(
        self,
        run_id: str,
        *,
        at: int,
        spec_patch: dict[str, Any] | None = None,
        publish: bool = True,
        started_by: str | None = None,
    ) -> str:
        """Start a new live run (``kind`` fork) from ``run_id``'s record before step ``at``:
        its observations, proposals, commands and outcomes of those steps copied, its budgets
        and grant uses so far carried, its spec's (merged with ``spec_patch``, a JSON merge
        patch, and validated as a start's: ``SPEC_INVALID``). Nothing before ``at`` is done
        again; the fork plans step ``at`` live. ``RUN_NOT_FOUND``, ``FORK_SOURCE_INVALID``
        (a replay), ``FORK_STEP_INVALID`` (``at`` outside 1 to its last step + 1, or after
        an effect not settled yet) write nothing. Returns the fork's id."""
        if spec_patch is not None and not isinstance(spec_patch, dict):
            raise SpecError(
                "a spec patch is a JSON object",
                errors=[{"field": "spec_patch", "message": "not a JSON object"}],
            )
        with session_scope(self.engine) as s:
            source = found_run(s, run_id)
            merged = merge_patch(dict(source.spec or {}), spec_patch or {})
        spec = validated_spec(merged)
        pre = pre_approval_records(spec)
        fork_id = str(uuid.uuid4())
        with telemetry.span("run.fork", run_id=fork_id):
            with session_scope(self.engine) as s:
                fork_run(
                    s,
                    fork_id=fork_id,
                    source_run_id=run_id,
                    at=at,
                    spec=spec,
                    pre_approvals=pre,
                    trace_id=telemetry.current_trace_id(),
                    started_by=started_by,
                )
            if publish:
                self.publisher.planner(fork_id, 1)
        return fork_id

    def _record_run(
        self,
        run_id: str,
        spec: RunSpec,
        pre: list[dict[str, Any]],
        *,
        trace_id: str | None,
        origin: dict[str, str | None],
    ) -> str:
        """Insert the run; once more if the connection was lost (a database restart). The
        insert is keyed by the run id, so a repeat cannot write it twice: if the first one
        committed before the connection went, the repeat's duplicate key means done. A
        duplicate idempotency key means another start recorded the run: that run's id is
        returned (or ``IDEMPOTENCY_KEY_REUSED`` raised). Returns the id of the run recorded."""
        write = retry_once_on_disconnect(self._insert_run)
        try:
            write(run_id, spec, pre, trace_id=trace_id, origin=origin)
        except (IntegrityError, psycopg.IntegrityError):
            if (known := run_for_key(self.engine, origin)) is not None:
                return known
            with session_scope(self.engine) as s:
                if not reads.run_exists(s, run_id):
                    raise
        return run_id

    def _insert_run(
        self,
        run_id: str,
        spec: RunSpec,
        pre: list[dict[str, Any]],
        *,
        trace_id: str | None,
        origin: dict[str, str | None],
    ) -> None:
        named = {}
        if (unfit := deadline_fit(spec)) is not None:  # the budget cannot all be spent in time
            named["deadline_warning"] = unfit
        with autocommit(self.engine, held=False) as conn:
            create_from_spec(
                conn,
                run_id=run_id,
                spec=spec,
                trace_id=trace_id,
                named=named,
                pre_approvals=pre,
                idempotency_key=origin["idempotency_key"],
                spec_hash=origin["spec_hash"],
                started_by=origin["started_by"],
            )

    @retry_once_on_disconnect
    def get_run(self, run_id: str) -> RunInfo:
        with session_scope(self.engine) as s:
            run = found_run(s, run_id)
            request = None
            if run.status == RunStatus.WAITING_CONFIRMATION:
                pending = reads.pending_proposal(s, run)
                request = pending.confirmation_request if pending else None
            pre = reads.pre_approvals(s, run_id)
            kids = children_shown(s, run_id)
            return RunInfo.of(run, confirmation_request=request, pre_approvals=pre, children=kids)

    @retry_once_on_disconnect
    def working_memory(self, run_id: str) -> dict[str, Any]:
        """The planner's view for the run's next step, rebuilt from the ledger."""
        view = load_view(
            self.engine,
            run_id,
            registry=registry_for(ask_mcp_servers=False),  # no MCP server started for a read
            memory=MemoryStore(self.engine),
        )
        if view is None:
            raise RunNotFound(f"no run {run_id}")
        return view.model_dump(mode="json")

    def memory_records(
        self, subject: str, *, include_inactive: bool = False
    ) -> list[dict[str, Any]]:
        return MemoryStore(self.engine).records(subject, include_inactive=include_inactive)

    def revoke_memory(self, record_id: int, *, by: str) -> dict[str, Any]:
        """Revoke a record: it is never returned to a planner again (kept, marked revoked)."""
        return MemoryStore(self.engine).revoke(record_id, by=by)

    def disable_tool(self, name: str, *, by: str, reason: str = "") -> dict[str, Any]:
        """The kill switch: refuse every call of the tool ``name`` (every version) from the
        next gate decision (``TOOL_DISABLED``), and every command already issued for it that
        has not started from its next claim. Recorded with who and why (``tool.disabled``)."""
        return self._switch(name, disabled=True, by=by, reason=reason)

    def enable_tool(self, name: str, *, by: str) -> dict[str, Any]:
        """Undo :meth:`disable_tool`: the tool's calls go through the gate again from its next
        decision. Recorded with who (``tool.enabled``)."""
        return self._switch(name, disabled=False, by=by)

    def _switch(self, name: str, *, disabled: bool, by: str, reason: str = "") -> dict[str, Any]:
        if not 0 < len(name) <= MAX_TOOL_NAME or not name.isprintable():
            raise InvalidRequest(f"a tool name is 1 to {MAX_TOOL_NAME} printable characters")
        if len(reason) > MAX_SWITCH_REASON:
            raise InvalidRequest(f"a reason is at most {MAX_SWITCH_REASON} characters")
        with session_scope(self.engine) as s:
            switched = switch_tool(s, name, disabled=disabled, by=by, reason=reason)
        log.warning("%s %s by %s (%s)", switched["event"], name, by, reason or "no reason given")
        return switched

    def policy(self) -> dict[str, Any]:
        """This process's deployment policy (its registry and settings: a policy worker of
        the same deployment computes the same): ``policy_hash``, ``required``
        (``WARRANT_POLICY_APPROVAL``), ``approved`` and its ``approval`` (who, when, note),
        the ``form``, and its ``diff`` from the latest other approved policy (``previous``)."""
        settings = load_settings()
        deployed = deployment_policy(registry_for(), settings)
        with session_scope(self.engine) as s:
            approval, latest = policy_approvals(s, deployed.hash)
        return {
            "policy_hash": deployed.hash,
            "required": settings.policy_approval == "required",
            "approved": approval is not None,
            "approval": None if approval is None else _without_form(approval),
            "previous": None if latest is None else latest["policy_hash"],
            "diff": form_diff(None if latest is None else latest["form"], deployed.form),
            "form": deployed.form,
        }

    def approve_policy(
        self, policy_hash: str, *, by: str, note: str | None = None
    ) -> dict[str, Any]:
        """Approve the deployment policy ``policy_hash``: refused ``POLICY_HASH_MISMATCH``
        unless it is this process's (the one reviewed); recorded with who, when, the note
        and the form; ``changed`` False when it already was approved (that approval is
        returned). With the ``diff`` from the latest other approved policy (``previous``)."""
        deployed = deployment_policy(registry_for(), load_settings())
        if policy_hash != deployed.hash:
            raise InvalidRequest(
                f"policy {policy_hash[:64]!r} is not this deployment's policy "
                f"{deployed.hash}: see `warrant policy show`",
                code="POLICY_HASH_MISMATCH",
            )
        if not 0 < len(by) <= MAX_TOOL_NAME or len(note or "") > MAX_SWITCH_REASON:
            raise InvalidRequest(
                f"--by is 1 to {MAX_TOOL_NAME} characters, a note at most {MAX_SWITCH_REASON}"
            )
        with session_scope(self.engine) as s:
            _, latest = policy_approvals(s, deployed.hash)
            approval, changed = approve_policy(
                s, deployed.hash, by=by, form=deployed.form, note=note
            )
        if changed:
            log.warning("policy %s approved by %s", deployed.hash[:12], by)
        return {
            **_without_form(approval),
            "changed": changed,
            "previous": None if latest is None else latest["policy_hash"],
            "diff": form_diff(None if latest is None else latest["form"], deployed.form),
        }

    def policy_tools(self, *, seen_within_s: float) -> frozenset[str] | None:
        """``name@version`` of every tool the policy workers seen within ``seen_within_s``
        registered (the gate runs there); ``None`` when no policy worker is registered."""
        workers = live_workers(self.engine, seen_within_s=seen_within_s)
        policy = [w for w in workers if "policy" in w.roles]
        return frozenset().union(*(w.tools for w in policy)) if policy else None

    def close(self) -> None:
        """Nothing to release: the engine is the process's (:func:`~warrant.ledger.db.
        engine_for`), shared by every client of the same database."""

    def cancel(self, run_id: str, *, by: str, reason: str = "", revoke: bool = True) -> RunInfo:
        """Cancel a run: no stage starts new work for it afterwards.

        Nothing in flight: the run is ``cancelled`` at once and its queued messages are
        dropped. A tool running (or an effect still unknown): the run goes to ``cancelling``,
        the tool is interrupted (revoke with terminate; the tool also sees the ledger flag),
        and the run ends ``cancelled`` only once the effect is known. ``revoke=False`` skips the
        broadcast (the ledger flag alone must then stop the tool).
        """
        in_flight = False
        with session_scope(self.engine) as s:
            run = found_run(s, run_id, lock=True)
            status = RunStatus(run.status)
            if status in (RunStatus.CANCELLING, RunStatus.CANCELLED):
                return RunInfo.of(run)
            if status.terminal or status is RunStatus.HANDOFF:
                raise StateConflict(
                    f"run {run_id} is {status.value}; nothing to cancel", code="RUN_NOT_CANCELLABLE"
                )
            in_flight = cancel_locked(s, run_id, run, status, by=by, reason=reason)
            children = children_of(s, run_id)
        if revoke:
            self.publisher.revoke_run(run_id, terminate=in_flight)
        self._cancel_children(children, by=by, revoke=revoke)
        return self.get_run(run_id)

    def _cancel_children(self, children: list[str], *, by: str, revoke: bool) -> None:
        """Every sub-run still going is cancelled too, and theirs in turn (the same path:
        the ledger's flag, then the revoke broadcast). A child with a person (``handoff``) or
        already ended is left as it is."""
        for child in children:
            try:
                self.cancel(child, by=by, reason="its parent was cancelled", revoke=revoke)
            except StateConflict:
                continue

    @retry_once_on_disconnect
    def ids_like(self, key: str, *, kind: str = "run", min_length: int = 6) -> list[str]:
        """``kind="handoff"``: a handoff's whole id, or a run's with one."""
        with session_scope(self.engine) as s:
            return reads.ids_by_prefix(s, key, kind=kind, min_length=min_length)

    @retry_once_on_disconnect
    def list_runs(self, *, limit: int = 50, status: str | None = None) -> list[RunInfo]:
        with session_scope(self.engine) as s:
            return [RunInfo.of(r) for r in reads.runs(s, limit=limit, status=status)]

    @retry_once_on_disconnect
    def trace(self, run_id: str) -> list[dict[str, Any]]:
        self.get_run(run_id)
        with session_scope(self.engine) as s:
            rows = reads.trace(s, run_id)
            return [
                {
                    "seq": e.seq,
                    "event": e.event,
                    "step": e.step,
                    "proposal_id": e.proposal_id,
                    "details": e.details,
                    "at": e.created_at.isoformat(),
                }
                for e in rows
            ]

    @retry_once_on_disconnect
    def observations(self, run_id: str) -> list[dict[str, Any]]:
        with session_scope(self.engine) as s:
            rows = reads.observations(s, run_id)
            return [
                {
                    "observation_id": o.observation_id,
                    "kind": o.kind,
                    "source": o.source,
                    "step": o.step,
                    "content": o.content,
                    "observation_version": o.observation_version,
                }
                for o in rows
            ]

    def wait(
        self, run_id: str, *, timeout: float = 60.0, until: frozenset[str] | set[str] | None = None
    ) -> RunInfo:
        targets = until or SETTLED
        deadline = time.monotonic() + timeout
        pause = 0.02
        while True:
            status = self._status(run_id)
            if status is None or status in targets or time.monotonic() >= deadline:
                info = self.get_run(run_id)  # no such run: RunNotFound
                if info.status in targets or time.monotonic() >= deadline:
                    return info
            time.sleep(pause)
            pause = min(pause * 1.5, 0.25)

    def wait_change(self, run_id: str, *, version: int | None, timeout: float) -> RunInfo:
        """The ledger polled with a growing pause (:data:`FIRST_CHANGE_PAUSE_S` to
        :data:`MAX_CHANGE_PAUSE_S`)."""
        end = time.monotonic() + timeout
        pause = FIRST_CHANGE_PAUSE_S
        while True:
            info = self.get_run(run_id)
            if info.version != version or info.status in SETTLED or time.monotonic() >= end:
                return info
            time.sleep(min(pause, max(0.0, end - time.monotonic())))
            pause = min(pause * 1.5, MAX_CHANGE_PAUSE_S)

    @retry_once_on_disconnect
    def _status(self, run_id: str) -> str | None:
        """The run's status alone (what :meth:`wait` polls)."""
        with autocommit(self.engine, held=False) as conn:
            return run_status(conn, run_id)


def found_run(s: Session, run_id: str, *, lock: bool = False) -> Run:
    """The run (locked for update with ``lock``); :class:`RunNotFound` if there is none."""
    run = lock_run(s, run_id) if lock else reads.run(s, run_id)
    if run is None:
        raise RunNotFound(f"no run {run_id}")
    return run


def _without_form(approval: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in approval.items() if k != "form"}


def validated_spec(spec: RunSpec | dict[str, Any] | str) -> RunSpec:
    """The spec as a start checks it: parsed, its plug-in planner, webhook, prices, deadline
    and what only the deployment's registry can check (``SPEC_INVALID``, ...)."""
    if not isinstance(spec, RunSpec):
        spec = parse_run_spec(spec)
    if isinstance(spec.planner, PluginPlannerSpec):
        from warrant.runner.planners.kinds import check_planner, planner_kinds  # lazy: httpx

        settings = load_settings()
        kinds = planner_kinds(refs=settings.planners, entry_points=settings.plugin_entry_points)
        check_planner(spec, kinds)
    if spec.webhook is not None:
        check_webhook(spec, load_settings())
    if spec.budgets.max_cost is not None and isinstance(spec.planner, OpenAIPlannerSpec):
        check_priced(spec, load_settings().model_prices)
    deadline_fit(spec)  # SPEC_INVALID when not even one model call fits the deadline
    _check_against_registry(spec)
    return spec


def _check_against_registry(spec: RunSpec) -> None:
    """What of the spec only the deployment's registry can check: the tools its success
    conditions and its task-scoped grants' ``observations:<tool>`` name, a router's fallback
    branch that could write (SpecError)."""
    narrowed = any(g.destinations_from for g in spec.grants)
    routed = isinstance(spec.planner, RouterPlannerSpec) and spec.planner.fallback != "person"
    if spec.success is None and not narrowed and not routed:
        return
    registry = registry_for()
    if isinstance(spec.planner, RouterPlannerSpec):
        problem = fallback_problem(spec.planner, registry)
        if problem is not None:
            field = "planner.fallback"
            raise SpecError(problem, errors=[{"field": field, "message": problem}])
    check_task_sources(spec.grants, registry)
    check_success_spec(spec, registry)


# --- a run spec's pre-approvals as the ledger records them at the run's start --------------------


def pre_approval_records(spec: RunSpec) -> list[dict[str, Any]]:
    """The spec's pre-approvals, normalised and hashed with the deployment's registry."""
    if not spec.pre_approved:
        return []
    registry, floor = registry_for(), load_settings().approvals_floor
    return [
        pre_approval_record(item, registry, field=f"pre_approved.{index}", floor=floor)
        for index, item in enumerate(spec.pre_approved)
    ]
