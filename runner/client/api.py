"""The Python API (client side): start runs, read them, wait for them.

client = Client.from_env()
run_id = client.start_run(spec_dict)
info = client.wait(run_id, timeout=30)

:class:`Client` gathers its methods by concern: runs (start, read, wait, cancel;
:mod:`~warrant.runner.client.runs`), people's actions (confirm, decline, answer, grant;
:mod:`~warrant.runner.client.approvals`), handoffs (:mod:`~warrant.runner.client.handoffs`) and
the approval inbox's reads (:mod:`~warrant.runner.client.inbox`) and the proposals of a caller
that runs its own loop (:mod:`~warrant.runner.client.proposals`), and replays and policy
reviews (:mod:`~warrant.runner.client.replays`).
"""

from __future__ import annotations

from typing import Literal, overload

from warrant.broker import telemetry
from warrant.ledger.db import engine_for
from warrant.runner.client.approvals import ApprovalsClient
from warrant.runner.client.contract import RunnerClient
from warrant.runner.client.handoffs import HandoffsClient
from warrant.runner.client.inbox import InboxClient
from warrant.runner.client.proposals import ProposalsClient
from warrant.runner.client.remote import remote_from_settings
from warrant.runner.client.replays import ReplaysClient
from warrant.runner.client.runs import RunInfo
from warrant.runner.settings import load_settings, resolved_urls

__all__ = ["Client", "RunInfo", "RunnerClient"]


class Client(ApprovalsClient, HandoffsClient, InboxClient, ProposalsClient, ReplaysClient):
    """Talks to the ledger and publishes the first planner message of a run."""

    @overload
    @classmethod
    def from_env(cls, *, service_name: str = ..., database_only: Literal[True]) -> Client: ...

    @overload
    @classmethod
    def from_env(
        cls, *, service_name: str = ..., database_only: Literal[False] = ...
    ) -> RunnerClient: ...

    @classmethod
    def from_env(
        cls, *, service_name: str = "warrant-client", database_only: bool = False
    ) -> RunnerClient:
        """A client from the environment: with ``WARRANT_SERVER_URL`` set, a
        :class:`~warrant.runner.client.remote.RemoteClient` of that ``warrant serve`` with
        ``WARRANT_API_TOKEN`` (an agent's process holds a producer token, never the ledger's
        credentials, and cannot confirm its own calls); else (or ``database_only``: the server
        and the workers) a database-backed :class:`Client`. With tracing on (``OTEL_*``), its
        spans are ``service_name``'s (``warrant-serve`` for the HTTP API); the command-line
        client (``warrant-client``) spends at most ``telemetry.CLIENT_EXIT_FLUSH_S`` exporting
        them (at exit): a command must not wait on a collector that is slow or not there."""
        if not database_only and (remote := remote_from_settings(load_settings())) is not None:
            return remote
        _, database_url = resolved_urls()
        short_lived = service_name == telemetry.SERVICE_NAMES["client"]
        telemetry.configure(
            service_name=service_name,
            exit_flush_s=telemetry.CLIENT_EXIT_FLUSH_S if short_lived else None,
        )
        return cls(engine=engine_for(database_url), publisher_factory=_publisher)


_conforms: type[RunnerClient] = Client
"""mypy checks that :class:`Client` is a :class:`RunnerClient` (as ``remote.py`` does for
:class:`~warrant.runner.client.remote.RemoteClient`)."""


def _publisher() -> object:
    """The Celery app's fail-fast publisher (imported only when a command publishes)."""
    from warrant.broker.app import app  # lazy: Celery's import, for a command that publishes
    from warrant.broker.publish import Publisher  # lazy: likewise

    return Publisher.fail_fast(app)
