"""Settings, from ``WARRANT_*`` environment variables (pydantic-settings).

:class:`WarrantSettings` is the fields of its groups, one per role
(:mod:`warrant.runner.settings_groups`: ``connections``, ``reconciler``, ``workers``,
``limits``, ``api``, ``plugins``, ``approvals``, ``webhooks``), each field read from
``WARRANT_<FIELD>``. Production code takes them from :func:`load_settings`, which reads and
validates the environment once per process (as the process starts: a bad value is
``SettingsInvalid`` ``SETTINGS_INVALID`` there, naming the variable), at each edge (the CLI's
root, a worker's Celery app, the HTTP app factory) that passes them down; tests that change a
variable get it read again (or call :func:`reload_settings`).

When neither URL is set, the CLI's ``up``/``demo`` start embedded servers and record their
URLs in ``<data_dir>/services.json``; every other command then finds them there.
"""

from __future__ import annotations

import json
import os
import threading

from pydantic import ValidationError
from pydantic_settings import BaseSettings, SettingsConfigDict

from warrant.runner.errors import ServiceUnavailable, SettingsInvalid
from warrant.runner.settings_groups import (
    DEFAULT_DATA_DIR,
    DEFAULT_VISIBILITY_TIMEOUT_S,
    GROUPS,
    Api,
    Approvals,
    Connections,
    Limits,
    Plugins,
    Reconciler,
    Webhooks,
    Workers,
)

__all__ = [
    "DEFAULT_DATA_DIR",
    "DEFAULT_VISIBILITY_TIMEOUT_S",
    "GROUPS",
    "WarrantSettings",
    "load_settings",
    "reload_settings",
    "resolved_urls",
    "settings_invalid",
]


class WarrantSettings(
    Connections, Reconciler, Workers, Limits, Api, Plugins, Approvals, Webhooks, BaseSettings
):
    """Every setting: the fields of each group (``warrant.runner.settings_groups``), each read
    from ``WARRANT_<FIELD>`` (``settings.lease_margin_s``). Frozen: one instance is shared by
    the whole process (:func:`load_settings`)."""

    model_config = SettingsConfigDict(env_prefix="WARRANT_", extra="ignore", frozen=True)


_LOCK = threading.Lock()
_LOADED: tuple[tuple[tuple[str, str], ...], WarrantSettings] | None = None


def _warrant_environment() -> tuple[tuple[str, str], ...]:
    return tuple(sorted((k, v) for k, v in os.environ.items() if k.upper().startswith("WARRANT_")))


def load_settings() -> WarrantSettings:
    """This process's settings: the environment is read and validated once, and every later
    call returns the same (frozen) instance. Processes call it as they start (the CLI,
    ``warrant worker``/``up``/``serve``, the MCP gateway, a Celery worker's ``worker_init``),
    so a bad value stops them there: :class:`SettingsInvalid` ``SETTINGS_INVALID`` naming the
    variable. Read again only when a ``WARRANT_*`` variable changed since (tests that set one;
    a deployment's environment does not change), or after :func:`reload_settings`."""
    global _LOADED
    environment = _warrant_environment()
    loaded = _LOADED
    if loaded is not None and loaded[0] == environment:
        return loaded[1]
    with _LOCK:
        try:
            settings = WarrantSettings()
        except ValidationError as exc:
            raise settings_invalid(exc) from None
        _LOADED = (environment, settings)
    return settings


def reload_settings() -> WarrantSettings:
    """Forget the loaded settings and read the environment again (tests; a process never needs
    it)."""
    global _LOADED
    with _LOCK:
        _LOADED = None
    return load_settings()


def settings_invalid(exc: ValidationError) -> SettingsInvalid:
    """pydantic's refusal of the environment as :class:`SettingsInvalid`, one
    ``WARRANT_<FIELD>: reason`` per refused value (the value itself is not shown: it may be a
    secret)."""
    problems = "; ".join(
        f"WARRANT_{'_'.join(map(str, e['loc'])).upper()}: {e['msg']}"
        if e["loc"]
        else str(e["msg"]).removeprefix("Value error, ")
        for e in exc.errors(include_url=False)
    )
    return SettingsInvalid(f"invalid setting: {problems or exc.title}")


def _embedded(settings: WarrantSettings) -> dict[str, str]:
    try:
        data = json.loads(settings.services_file.read_text())
    except (OSError, ValueError):
        return {}
    pid = data.get("pid")
    if not isinstance(pid, int):
        return {}
    try:
        os.kill(pid, 0)
    except OSError:
        return {}
    return {k: v for k, v in data.items() if isinstance(v, str)}


def resolved_urls(settings: WarrantSettings | None = None) -> tuple[str, str]:
    """(broker_url, database_url): the environment, else a running ``warrant up``."""
    settings = settings or load_settings()
    embedded = _embedded(settings) if not (settings.broker_url and settings.database_url) else {}
    broker = settings.broker_url or embedded.get("broker_url")
    database = settings.database_url or embedded.get("database_url")
    if not broker or not database:
        raise ServiceUnavailable(
            "no broker/database configured: set WARRANT_BROKER_URL and WARRANT_DATABASE_URL, "
            "or start the embedded stack with `warrant up`",
            code="SERVICES_NOT_CONFIGURED",
        )
    return broker, database
