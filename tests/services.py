"""Finding real Redis/RabbitMQ and PostgreSQL for the tests (embedded ones as fallback).

Locally, service-backed tests are skipped when nothing can be reached; under ``CI=true``
they fail instead.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

#: This checkout's own names (a digest of its path): two checkouts on one machine (a working
#: copy and a CI clone) never share the test database, the Redis db or the RabbitMQ vhost, and
#: the session's dropping and migrating of its database touches nobody else's.
CHECKOUT = hashlib.sha256(str(Path(__file__).resolve().parent.parent).encode()).hexdigest()[:8]
DEFAULT_TEST_DATABASE = f"postgresql://postgres@127.0.0.1:5432/warrant_test_{CHECKOUT}"
DEFAULT_TEST_BROKER = f"redis://127.0.0.1:6379/{1 + int(CHECKOUT, 16) % 15}"
DEFAULT_TEST_VHOST = f"warrant_test_{CHECKOUT}"


@dataclass
class Services:
    broker_url: str | None
    database_url: str | None
    problem: str | None = None
    embedded: object | None = None

    @property
    def ok(self) -> bool:
        return self.problem is None


def _admin_url(database_url: str) -> tuple[str, str]:
    from sqlalchemy.engine import make_url

    url = make_url(database_url.replace("postgresql+psycopg://", "postgresql://"))
    return url.set(database="postgres").render_as_string(hide_password=False), url.database or ""


def ensure_database(database_url: str) -> None:
    import psycopg

    admin, name = _admin_url(database_url)
    with psycopg.connect(admin, autocommit=True, connect_timeout=3) as conn:
        if not conn.execute("SELECT 1 FROM pg_database WHERE datname=%s", (name,)).fetchone():
            conn.execute(f'CREATE DATABASE "{name}"')


def broker_reachable(url: str) -> None:
    from kombu import Connection

    with Connection(url, connect_timeout=3) as conn:
        conn.ensure_connection(max_retries=1)


def discover() -> Services:
    database = os.environ.get("WARRANT_TEST_DATABASE_URL", DEFAULT_TEST_DATABASE)
    broker = os.environ.get("WARRANT_TEST_BROKER_URL", DEFAULT_TEST_BROKER)
    try:
        ensure_database(database)
        broker_reachable(broker)
        return Services(broker, database)
    except Exception as exc:
        first_problem = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
    explicit = os.environ.get("WARRANT_TEST_DATABASE_URL") or os.environ.get(
        "WARRANT_TEST_BROKER_URL"
    )
    if os.environ.get("WARRANT_TEST_NO_EMBEDDED") or explicit:
        # Asked for specific services (e.g. RabbitMQ): never swap in embedded ones.
        return Services(None, None, first_problem)
    try:
        from warrant.runner.stack.embedded import EmbeddedServices

        data = Path(os.environ.get("WARRANT_TEST_DATA_DIR") or tempfile.mkdtemp(prefix="wt-"))
        emb = EmbeddedServices(data).start()
        broker_reachable(emb.broker_url)
        return Services(emb.broker_url, emb.database_url, embedded=emb)
    except Exception as exc:
        return Services(None, None, f"{first_problem}; embedded fallback failed: {exc}")


def ensure_vhost(vhost: str, *, host: str = "127.0.0.1") -> str | None:
    """Create RabbitMQ's ``vhost`` (guest may use it) through the management API, else
    ``rabbitmqctl``; ``None`` when it exists or was made, else why it could not be."""
    import httpx

    api = f"http://{host}:15672/api"
    auth = ("guest", "guest")
    everything = {"configure": ".*", "write": ".*", "read": ".*"}
    try:
        httpx.put(f"{api}/vhosts/{vhost}", auth=auth, timeout=5).raise_for_status()
        httpx.put(f"{api}/permissions/{vhost}/guest", json=everything, auth=auth, timeout=5)
        return None
    except httpx.HTTPError as exc:
        by_api = f"management API: {exc}"
    try:
        subprocess.run(["rabbitmqctl", "add_vhost", vhost], capture_output=True, timeout=60)
        made = subprocess.run(
            ["rabbitmqctl", "set_permissions", "-p", vhost, "guest", ".*", ".*", ".*"],
            capture_output=True,
            timeout=60,
        )
        return None if made.returncode == 0 else f"{by_api}; rabbitmqctl: {made.stderr!r}"
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"{by_api}; rabbitmqctl: {exc}"


#: The example distributions the tests load, by folder and package.
EXAMPLES = {"demo_plugin": "warrant_demo", "weather_plugin": "warrant_weather"}


def use_examples_in_place() -> list[str]:
    """Make the example plug-ins importable without installing them (``make install-dev``
    installs them; a plain ``pip install -e '.[dev]'`` does not): each one missing is put on
    ``sys.path`` and on ``PYTHONPATH`` (the workers the tests start inherit it). Returns the
    folders added. Their entry points exist only once installed."""
    import importlib.util
    import sys

    root = Path(__file__).resolve().parent.parent / "examples"
    added = []
    for folder, package in EXAMPLES.items():
        if importlib.util.find_spec(package) is None and (root / folder / package).is_dir():
            sys.path.insert(0, str(root / folder))
            added.append(str(root / folder))
    if added:
        paths = [*added, *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
        os.environ["PYTHONPATH"] = os.pathsep.join(paths)
    return added
