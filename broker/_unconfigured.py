"""The broker transport of an app built without a broker URL: it fails on first use.

``warrant.broker.app`` builds its Celery app at import (``celery -A warrant.broker.app``,
``@app.task`` in :mod:`warrant.broker.tasks`), so importing it must work without
configuration (``--help``, tools checks, tests that build their own app). What must not happen
is a silent fallback to some default broker (Celery's own default is an AMQP server on
localhost): a worker or publisher would then talk to whatever happens to listen there. With
nothing configured the app uses this transport instead, and the first connection — a worker
starting, a message published, a control broadcast — raises
:class:`~warrant.runner.errors.ServiceUnavailable` ``SERVICES_NOT_CONFIGURED`` naming what to
set. It is not a *connection* error, so Celery does not retry it: the worker stops at once.
"""

from __future__ import annotations

from typing import Any

from kombu.transport import base

from warrant.runner.errors import ServiceUnavailable

__all__ = ["TRANSPORT", "Transport", "not_configured"]

#: ``broker_transport`` value naming this transport.
TRANSPORT = "warrant.broker._unconfigured:Transport"

_MESSAGE = (
    "no broker configured: set WARRANT_BROKER_URL (and WARRANT_DATABASE_URL), "
    "or start the embedded stack with `warrant up`"
)


def not_configured() -> ServiceUnavailable:
    return ServiceUnavailable(_MESSAGE, code="SERVICES_NOT_CONFIGURED")


class Transport(base.Transport):
    """Refuses to connect: see the module docstring."""

    driver_type = driver_name = "unconfigured"

    def establish_connection(self) -> Any:
        raise not_configured()

    def create_channel(self, connection: Any) -> Any:
        raise not_configured()

    def driver_version(self) -> str:
        return "n/a"
