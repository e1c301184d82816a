"""Each worker records its registry in the ledger; the policy stage reads them back.

A worker step writes the worker process's identity (unique across hosts), its node, roles,
queues and registry fingerprint when the worker starts, refreshes it every
:data:`~warrant.ledger.workers.HEARTBEAT_S` and removes its own row (never another process's)
when the worker stops. The policy stage's load hands the gate the live registrations
(:func:`warrant.ledger.workers.live_registrations`, plain data) and the gate asks whether the
workers serving a tool's queue have that tool (``tools._deployment.lacking_role``): a proposal
no worker can run is refused ``TOOL_NOT_DEPLOYED``, naming the role.
"""

from __future__ import annotations

import logging
import os
from typing import Any

from celery import bootsteps
from sqlalchemy import Engine

from warrant.broker.process_identity import this_process
from warrant.ledger.db import engine_for, session_scope
from warrant.ledger.operator import policy_approvals
from warrant.ledger.workers import HEARTBEAT_S, register_worker, unregister_worker
from warrant.runner.policy_version import approval_hash
from warrant.runner.settings import load_settings, resolved_urls
from warrant.tools._deployment import roles_of
from warrant.tools._plugins import registry_for
from warrant.tools._registry import Registry

__all__ = ["RegisterWorker", "say_policy"]

log = logging.getLogger(__name__)


def _engine() -> Engine:
    return engine_for(resolved_urls()[1])


class RegisterWorker(bootsteps.StartStopStep):
    """A worker step (registered by :func:`warrant.broker.app.make_app`)."""

    requires = {"celery.worker.components:Timer"}

    def __init__(self, worker: Any, **kwargs: Any) -> None:
        super().__init__(worker, **kwargs)
        self.tref: Any = None
        self.process = this_process().label
        self.registration: dict[str, Any] = {}

    def start(self, worker: Any) -> None:
        registry = registry_for()
        queues = sorted(worker.app.amqp.queues.consume_from or worker.app.amqp.queues)
        node = worker.hostname
        self.process = this_process().label
        self.registration = {
            "process": self.process,
            "node": node,
            "roles": roles_of(queues),
            "queues": queues,
            "fingerprint": registry.fingerprint,
            "tools": registry.keys(),
            "pid": os.getpid(),
        }
        try:
            register_worker(_engine(), **self.registration)
        except Exception as exc:  # the ledger may be down at start: the heartbeat inserts it
            log.warning("could not record this worker's registry (retried each heartbeat): %s", exc)
        if "policy" in self.registration["roles"]:
            say_policy(registry)
        self.tref = worker.timer.call_repeatedly(HEARTBEAT_S, self._touch, (self.registration,))

    @staticmethod
    def _touch(registration: dict[str, Any]) -> None:
        try:
            register_worker(_engine(), **registration, refresh=True)
        except Exception as exc:
            log.warning("could not refresh this worker's registration: %s", exc)

    def stop(self, worker: Any) -> None:
        if self.tref is not None:
            self.tref.cancel()
            self.tref = None
        try:
            unregister_worker(_engine(), self.process)
        except Exception as exc:
            log.warning("could not remove this worker's registration: %s", exc)


def say_policy(registry: Registry) -> str | None:
    """A policy worker says at start whether its deployment policy is approved, when
    ``WARRANT_POLICY_APPROVAL=required`` (a warning when not: it refuses every proposal
    ``POLICY_NOT_APPROVED`` until an operator approves it). Returns what it logged."""
    policy_hash = approval_hash(registry, load_settings())
    if policy_hash is None:
        return None
    try:
        with session_scope(_engine()) as s:
            approval, _ = policy_approvals(s, policy_hash)
    except Exception as exc:  # the ledger may be down at start: the gate reads it per proposal
        log.warning("could not read whether policy %s is approved: %s", policy_hash[:12], exc)
        return None
    if approval is None:
        said = (
            f"policy {policy_hash[:12]} is not approved: every proposal is refused "
            f"POLICY_NOT_APPROVED until an operator runs "
            f"`warrant policy approve {policy_hash} --by NAME`"
        )
        log.warning(said)
        return said
    said = (
        f"policy {policy_hash[:12]} approved by {approval['approved_by']} "
        f"at {approval['approved_at']}"
    )
    log.info(said)
    return said
