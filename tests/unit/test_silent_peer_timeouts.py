"""The timeouts warrant sets wherever a peer can go silent (issue 30): on every ledger
connection (libpq and server-side) and on every Redis connection of Celery."""

from __future__ import annotations

import socket

from warrant.runner.settings import WarrantSettings


def test_every_ledger_connection_gives_up_on_a_silent_server():
    from warrant.ledger.db import connect_args

    args = connect_args("postgresql://u@db:5432/ledger", WarrantSettings())
    assert args["connect_timeout"] == 5
    assert (args["keepalives"], args["keepalives_idle"]) == (1, 10)
    assert (args["keepalives_interval"], args["keepalives_count"]) == (5, 3)
    assert args["tcp_user_timeout"] == 30_000
    assert args["options"] == (
        "-c statement_timeout=60000 -c idle_in_transaction_session_timeout=60000 "
        "-c tcp_keepalives_idle=10 -c tcp_keepalives_interval=5 -c tcp_keepalives_count=3 "
        "-c tcp_user_timeout=30000"  # the server's side: a vanished host's session ends
    )


def test_the_url_and_the_settings_override_the_ledger_defaults():
    from warrant.ledger.db import connect_args

    settings = WarrantSettings(db_statement_timeout_s=0, db_connect_timeout_s=2)
    url = "postgresql://u@db/ledger?connect_timeout=9&options=-c%20statement_timeout%3D5s"
    args = connect_args(url, settings, server={"synchronous_commit": "off"})
    assert "connect_timeout" not in args  # the URL's own is kept
    assert args["options"] == (
        "-c statement_timeout=0 -c idle_in_transaction_session_timeout=60000 "
        "-c tcp_keepalives_idle=10 -c tcp_keepalives_interval=5 -c tcp_keepalives_count=3 "
        "-c tcp_user_timeout=30000 "
        "-c synchronous_commit=off -c statement_timeout=5s"  # the URL's last: it wins
    )


def test_every_redis_connection_of_celery_has_timeouts_and_health_checks():
    from warrant.broker.celery_app import transport_options

    options = transport_options(WarrantSettings())
    assert options["socket_timeout"] == 10
    assert options["socket_connect_timeout"] == 5
    assert options["health_check_interval"] == 10
    assert options["socket_keepalive"] is True
    keepalive = options["socket_keepalive_options"]
    assert isinstance(keepalive, dict)
    if hasattr(socket, "TCP_USER_TIMEOUT"):
        assert keepalive[socket.TCP_USER_TIMEOUT] == 10_000
        assert keepalive[socket.TCP_KEEPIDLE] == 10
