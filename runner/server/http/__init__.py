"""The HTTP API (``warrant serve``): :func:`~warrant.runner.server.http.app.create_app`.

``app`` (the factory, ``/v1/tokens/me``, ``/metrics``, ``/healthz``), ``runs`` (start, list and its
cursor, read, trace, view, long-poll wait), ``actions`` (confirm, decline, answer, cancel, grants,
pre-approvals, handoff resolution, memory revocation), ``auth`` (bearer tokens and roles),
``errors`` (error bodies and statuses), ``models`` (request and response bodies).
"""

from warrant.runner.server.http.app import create_app

__all__ = ["create_app"]
