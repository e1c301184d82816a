"""Running warrant on one machine: ``local`` (``warrant up``: embedded servers and one worker
process per role), ``embedded`` (a real Redis and PostgreSQL owned by this process),
``supervisor`` (restarts with back-off), ``roles`` (each role's queues and ``celery`` command
line). ``warrant demo``'s scenarios are the demo distribution's
(``examples/demo_plugin``, ``warrant_demo``)."""

__layer__ = "client, server, CLI and stack"
