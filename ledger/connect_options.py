"""The libpq parameters of every ledger connection (no SQLAlchemy: the CLI's fast reads use
them with psycopg alone; :func:`warrant.ledger.db.connect_args` for the engines)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, urlsplit

if TYPE_CHECKING:
    from warrant.runner.settings import WarrantSettings

__all__ = ["libpq_url", "timeout_args"]


def libpq_url(url: str) -> str:
    """The URL as libpq reads it (``postgresql+psycopg://`` → ``postgresql://``)."""
    for prefix in ("postgresql+psycopg://", "postgres://"):
        if url.startswith(prefix):
            return "postgresql://" + url[len(prefix) :]
    return url


def timeout_args(
    url: str, settings: WarrantSettings, *, server: dict[str, str] | None = None
) -> dict[str, Any]:
    """libpq parameters so that a server or network that goes silent is given up on within a
    bound: ``connect_timeout``, TCP keepalives and ``tcp_user_timeout`` (ignored by libpq on a
    Unix socket, where the kernel sees the peer die), and the server-side
    ``statement_timeout`` and ``idle_in_transaction_session_timeout`` (a session whose client
    vanished inside a transaction is ended, its locks released), and the same keepalives and
    user timeout on the *server's* side of the connection (``tcp_keepalives_*``,
    ``tcp_user_timeout``): a session whose host vanished while it sat idle is ended within
    about the larger of ``idle + interval * count`` and the user timeout (30 s by default;
    measured 30.7 s, ``tests/integration/test_hosts.py``) instead of the system's two hours.
    ``server``: more server settings (``-c name=value``). A parameter the URL sets itself is
    left as the URL says."""
    s = settings
    args: dict[str, Any] = {
        "connect_timeout": s.db_connect_timeout_s,
        "keepalives": 1,
        "keepalives_idle": s.db_keepalives_idle_s,
        "keepalives_interval": s.db_keepalives_interval_s,
        "keepalives_count": s.db_keepalives_count,
        "tcp_user_timeout": round(s.db_tcp_user_timeout_s * 1000),
    }
    query = parse_qs(urlsplit(libpq_url(url)).query)
    args = {k: v for k, v in args.items() if k not in query}
    gucs = {
        "statement_timeout": str(round(s.db_statement_timeout_s * 1000)),
        "idle_in_transaction_session_timeout": str(
            round(s.db_idle_in_transaction_timeout_s * 1000)
        ),
        "tcp_keepalives_idle": str(s.db_keepalives_idle_s),
        "tcp_keepalives_interval": str(s.db_keepalives_interval_s),
        "tcp_keepalives_count": str(s.db_keepalives_count),
        "tcp_user_timeout": str(round(s.db_tcp_user_timeout_s * 1000)),
        **(server or {}),
    }
    options = " ".join(f"-c {name}={value}" for name, value in gucs.items())
    theirs = query.get("options")
    if theirs:  # the URL's own options come last: they win
        options += " " + " ".join(theirs)
    return {**args, "options": options}
