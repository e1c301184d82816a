"""Settings, from ``WARRANT_*`` environment variables (pydantic-settings).

:class:`WarrantSettings` is the fields of its groups, one per role (:data:`GROUPS`, in the
order ``docs/settings.md`` shows them): each a frozen pydantic model declaring its fields once
(type, default, bounds and the docstring the settings page shows), each field read from its flat
``WARRANT_<FIELD>`` into a flat attribute (``settings.lease_margin_s``). Production code takes
them from :func:`load_settings`, which reads and validates the environment once per process (as
the process starts: a bad value is ``SettingsInvalid`` ``SETTINGS_INVALID`` there, naming the
variable), at each edge (the CLI's root, a worker's Celery app, the HTTP app factory) that
passes them down; tests that change a variable get it read again (or call
:func:`reload_settings`).

When neither URL is set, the CLI's ``up``/``demo`` start embedded servers and record their
URLs in ``<data_dir>/services.json``; every other command then finds them there.
"""

from __future__ import annotations

import difflib
import json
import logging
import os
import threading
from pathlib import Path
from typing import Any, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from warrant.runner.errors import ServiceUnavailable, SettingsInvalid

__all__ = [
    "DEFAULT_DATA_DIR",
    "DEFAULT_VISIBILITY_TIMEOUT_S",
    "GROUPS",
    "Api",
    "Approvals",
    "Connections",
    "Limits",
    "Plugins",
    "Reconciler",
    "WarrantSettings",
    "Webhooks",
    "Workers",
    "load_settings",
    "reload_settings",
    "resolved_urls",
    "settings_invalid",
]

#: Where embedded Redis/PostgreSQL keep their data.
DEFAULT_DATA_DIR = Path.home() / ".local" / "share" / "warrant"
#: Redis visibility timeout: how long after its worker's last renewal an unacknowledged
#: message is given back to its queue (``broker._redis_transport``).
DEFAULT_VISIBILITY_TIMEOUT_S = 45


class _Group(BaseModel):
    """A group's fields; frozen (the settings never change under their reader)."""

    model_config = ConfigDict(frozen=True, use_attribute_docstrings=True)


class Connections(_Group):
    """Where the broker, the ledger and the embedded servers' data are, and how long a silent
    peer is waited for."""

    broker_url: str | None = None
    """Celery broker (``redis://...``, ``redis+socket://...`` or ``amqp://...``); unset: the
    embedded Redis that ``warrant up`` starts."""
    database_url: str | None = None
    """PostgreSQL ledger (``postgresql://...``, psycopg 3); unset: the embedded PostgreSQL."""
    data_dir: Path = DEFAULT_DATA_DIR
    """Embedded servers' data, ``services.json`` and the workers' logs."""
    visibility_timeout_s: int = Field(default=DEFAULT_VISIBILITY_TIMEOUT_S, ge=15)
    """Seconds after its worker last renewed it (every 5 s while the worker lives, however
    long the task runs) before Redis gives an unacknowledged message back to its queue: how
    soon a killed worker's messages run elsewhere. Longer than any broker stall a live worker
    should ride out."""
    db_connect_timeout_s: int = Field(default=5, ge=0)
    """libpq ``connect_timeout``: give up on a connection (TCP and start-up) after this long
    (0: never)."""
    db_keepalives_idle_s: int = Field(default=10, ge=1)
    """TCP keepalive: idle seconds before the first probe (TCP connections only) ..."""
    db_keepalives_interval_s: int = Field(default=5, ge=1)
    """... seconds between probes ..."""
    db_keepalives_count: int = Field(default=3, ge=1)
    """... unanswered probes before the connection is dropped."""
    db_tcp_user_timeout_s: float = Field(default=30.0, ge=0)
    """``tcp_user_timeout``: a connection whose sent data stays unacknowledged this long is
    dropped (a vanished server or network; 0: the kernel's default, about 15 minutes)."""
    db_statement_timeout_s: float = Field(default=60.0, ge=0)
    """Server-side ``statement_timeout`` of every session (0: none); migrations and retention
    turn it off for their own transactions."""
    db_idle_in_transaction_timeout_s: float = Field(default=60.0, ge=0)
    """Server-side ``idle_in_transaction_session_timeout`` (0: none): a session whose client
    went silent inside a transaction is ended, and its locks released, after this long."""
    broker_socket_timeout_s: float = Field(default=10.0, gt=1)
    """Redis: a command waiting this long for its reply fails (the worker reconnects)."""
    broker_connect_timeout_s: float = Field(default=5.0, gt=0)
    """Redis and AMQP: a connection attempt gives up after this long (then it is retried)."""
    broker_health_check_interval_s: int = Field(default=10, ge=1)
    """Redis: PING an idle connection before use, and drop a consumer connection whose
    BRPOP reply is overdue by this long."""

    @property
    def services_file(self) -> Path:
        return self.data_dir / "services.json"

    @field_validator("broker_url")
    @classmethod
    def _broker_scheme(cls, url: str | None) -> str | None:
        return _with_scheme(url, BROKER_SCHEMES, "a broker")

    @field_validator("database_url")
    @classmethod
    def _database_scheme(cls, url: str | None) -> str | None:
        return _with_scheme(url, DATABASE_SCHEMES, "a PostgreSQL")


#: The broker URL schemes warrant runs on (Redis, RabbitMQ; ``memory`` for in-process tests).
BROKER_SCHEMES = (
    "redis",
    "rediss",
    "redis+socket",
    "sentinel",
    "amqp",
    "amqps",
    "pyamqp",
    "memory",
)
#: The ledger's URL schemes (PostgreSQL through psycopg 3).
DATABASE_SCHEMES = ("postgresql", "postgres", "postgresql+psycopg")


def _with_scheme(url: str | None, schemes: tuple[str, ...], what: str) -> str | None:
    """``url`` unchanged if empty or of one of ``schemes``: a URL nothing can connect to is
    refused as the process starts (``SETTINGS_INVALID``), before anything is written."""
    if not url:
        return url
    scheme, sep, _ = url.partition("://")
    if not sep or scheme.lower() not in schemes:
        raise ValueError(
            f"not {what} URL (scheme {scheme if sep else '(none)'!r}; use one of "
            + ", ".join(f"{s}://" for s in schemes)
            + ")"
        )
    return url


class Reconciler(_Group):
    """The reconciler's sweeps, and the leases and heartbeats by which a lost attempt is
    recognised."""

    reconcile_interval_s: float = Field(default=10.0, gt=0)
    """How often beat schedules a reconciler sweep."""
    stall_after_s: float = Field(default=60.0, gt=0)
    """A non-waiting run with no progress for this long gets its expected message again;
    again after twice as long, and so on, at most every 60 s."""
    lease_margin_s: float = Field(default=30.0, ge=0)
    """A ``started`` command older than its time limit plus this is presumed lost."""
    sweep_batch: int = Field(default=100, ge=1)
    """Items per category per sweep."""
    max_reconcile_attempts: int = Field(default=5, ge=1)
    """Still-unknown reconciliations before the run is handed to a person."""
    sweep_lock_timeout_s: float = Field(default=30.0, ge=2)
    """A sweep's exclusion is a transaction-scoped lock whose session the server ends once it
    has been idle this long: a reconciler that vanishes (host lost, process frozen) holds it
    at most this long; a live one renews it every third of it."""
    lease_heartbeat_s: float = Field(default=1.0, gt=0, le=60)
    """How often a threads-pool tool worker renews the lease of its running attempts (one
    statement per process per beat) and checks whether their runs are being cancelled: the
    bound on how long a cancel takes to reach a running concurrent tool call."""
    lease_heartbeat_timeout_s: float = Field(default=15.0, gt=0, le=3600)
    """A concurrent attempt whose heartbeat is older than this is presumed lost. Its worker
    interrupts its attempts when it has not renewed them for half of this, and ends itself
    before this has passed (nobody judges a live attempt lost)."""

    @model_validator(mode="after")
    def _heartbeat_fits(self) -> Self:
        if self.lease_heartbeat_timeout_s < 4 * self.lease_heartbeat_s:
            raise ValueError(
                "WARRANT_LEASE_HEARTBEAT_TIMEOUT_S must be at least 4 x WARRANT_LEASE_HEARTBEAT_S "
                f"(got {self.lease_heartbeat_timeout_s} and {self.lease_heartbeat_s})"
            )
        return self


class Workers(_Group):
    """How much one worker process holds in flight, and what it remembers and reports."""

    planner_concurrency: int = Field(default=512, ge=1, le=1024)
    """Model calls one planner worker process holds in flight (the threads of its Celery
    threads pool) when ``warrant worker``/``warrant up`` are not told otherwise."""
    tool_concurrency: int = Field(default=128, ge=1, le=1024)
    """Tool calls one ``tool`` worker process holds in flight (threads of its Celery threads
    pool; tools of ``isolation="process"`` run on the ``tool-process`` role's prefork pool)."""
    revoked_runs_kept: int = Field(default=1000, ge=1)
    """Revoked runs each worker remembers (drops their queued messages on delivery); older
    ones are forgotten, which is safe: a stage ignores a cancelled run's stale messages."""
    task_events: bool = True
    """Workers send task events and producers ``task-sent`` events (what Flower shows). Off,
    workers still start sending them when Flower (or ``celery control enable_events``) asks."""


class Limits(_Group):
    """Model prices, shared rate limits, and which model endpoints may be called."""

    model_prices: dict[str, dict[str, float]] = Field(default_factory=dict)
    """Per-model prices, e.g. ``{"gpt-4o-mini": {"prompt_per_1k": 0.00015,
    "completion_per_1k": 0.0006}}`` (JSON in ``WARRANT_MODEL_PRICES``)."""
    model_limits: dict[str, Any] = Field(default_factory=dict)
    """Shared limits per model endpoint or API-key variable name, e.g.
    ``{"http://host/v1": {"requests_per_minute": 500, "tokens_per_minute": 200000}}`` (JSON
    in ``WARRANT_MODEL_LIMITS``; checked at start, see ``warrant.runner.limits``)."""
    tool_limits: dict[str, Any] = Field(default_factory=dict)
    """Per-deployment tool limits replacing the contracts' (``Tool.max_in_flight``,
    ``Tool.max_calls_per_minute``), e.g. ``{"search_public": {"max_in_flight": 2}}``."""
    limits_url: str | None = None
    """The Redis that keeps the shared limits; default: the broker's, when it is Redis."""
    limits_window_s: int = Field(default=60, ge=1, le=3600)
    """The length of a limit's "minute" in seconds (60; tests shorten it)."""
    allow_remote_models: bool = False
    """Allow non-loopback model endpoints (off by default: tests can never call out)."""


class Api(_Group):
    """The remote server the CLI talks to, and the credentials presented or required."""

    server_url: str | None = None
    """A remote ``warrant serve`` (``http://host:port``): set, the CLI's run commands
    (``warrant run …``, ``handoff resolve``) go through its HTTP API with ``api_token``
    instead of the database; the administrators' commands keep using the database."""
    api_token: str | None = None
    """The API token the CLI presents to ``server_url`` (``warrant token create``); what the
    server records as who acted, whatever ``--by`` says."""
    operator_token: str | None = None
    """If set, grants added through the API must present it (an operator credential)."""


class Plugins(_Group):
    """Where tools, planners and their deps come from."""

    tools: str = ""
    """Extra tool sources, ``module:attr[,module:attr]`` (a Tool, a list, a Registry or a
    Plugin); the demo and benchmark tools are ``warrant_demo:plugin``."""
    plugin_entry_points: bool = True
    """Load the tools every installed distribution registers under the entry-point group
    ``warrant.tools`` (and planners under ``warrant.planners``)."""
    tool_deps: str | None = None
    """``module:factory`` building the deps object of plug-in tools that bring no factory of
    their own (called once per worker process with a ``DepsContext``)."""
    planners: str = ""
    """Extra planner kinds, ``module:attr[,module:attr]`` (a ``PlannerKind`` or a list)."""
    mcp_config: Path | None = None
    """A JSON or TOML file listing MCP servers and the operator's declaration of each tool
    they expose (see docs/your-own-tools.md, "MCP servers as tools")."""


class Approvals(_Group):
    """Who must confirm what, and which tools the gate only observes."""

    approver_may_approve_own_runs: bool = False
    """Whether whoever started a run may also confirm or decline its proposals (the
    deployment-wide opt-out; each use traced as ``confirmation.self_approved``). Off (the
    default), a decision by the principal that started the run (``started_by``: an API
    token's name whatever its role) raises ``Forbidden`` ``OWN_RUN_APPROVAL_FORBIDDEN``: a
    second person must decide (four eyes). A tool may allow it (``self_approval_allowed``)."""
    relax_confirmation: str = ""
    """Tools (``name[,name]``) whose side-effect class does not force a person's confirmation:
    by default every ``irreversible`` and ``compensatable-write`` call needs one (or a
    pre-approval of that exact proposal). Shown by ``warrant tools list``; every relaxed call
    is traced (``policy.confirmation.relaxed``)."""
    observe_tools: str = ""
    """Tools (``name[,name]`` or ``*``) in observe mode, off by default: the gate traces a
    refusal for lack of a grant as ``gate.would_refuse`` and lets the call through; every
    other refusal stands (``docs/observe-mode.md``). Workers warn at start."""
    approvals_required: str = ""
    """Tools that need more distinct approvers than they declare, ``name=M[,name=M]`` (M ≥ 1;
    the larger of this and the tool's own count applies)."""
    policy_approval: Literal["off", "required"] = "off"
    """``required``: a policy worker decides only under a deployment policy (every tool
    contract and the settings above, one hash: ``warrant policy show``) an operator approved
    (``warrant policy approve HASH --by NAME``); under another it refuses every proposal
    ``POLICY_NOT_APPROVED`` and says so in its log at start. ``off``: not checked."""

    @property
    def relaxed_tools(self) -> frozenset[str]:
        return frozenset(
            name.strip() for name in self.relax_confirmation.split(",") if name.strip()
        )

    @property
    def observed_tools(self) -> frozenset[str]:
        """``observe_tools`` as names (``{"*"}``: every tool)."""
        return frozenset(n.strip() for n in self.observe_tools.split(",") if n.strip())

    @property
    def approvals_floor(self) -> dict[str, int]:
        """``approvals_required`` as ``{tool: M}``."""
        out: dict[str, int] = {}
        for item in self.approvals_required.split(","):
            name, _, count = item.partition("=")
            if name.strip():
                out[name.strip()] = int(count)
        return out

    @model_validator(mode="after")
    def _observe_is_names_or_all(self) -> Self:
        if "*" in self.observed_tools and len(self.observed_tools) > 1:
            raise ValueError(f"WARRANT_OBSERVE_TOOLS: '*' stands alone ({self.observe_tools!r})")
        return self

    @model_validator(mode="after")
    def _approvals_are_counts(self) -> Self:
        for item in self.approvals_required.split(","):
            name, sep, count = item.partition("=")
            if item.strip() and not (
                name.strip() and sep and count.strip().isdigit() and int(count) >= 1
            ):
                raise ValueError(f"WARRANT_APPROVALS_REQUIRED: {item.strip()!r} is not name=M")
        return self


class Webhooks(_Group):
    """Signed calls announcing a run's end."""

    webhook_secret: str | None = None
    """The HMAC key that signs every webhook call (``X-Warrant-Signature``); without it a
    spec with a ``webhook`` is refused at start. A deployment setting, never in a spec."""
    webhook_max_attempts: int = Field(default=8, ge=1, le=100)
    """Attempts of one webhook call before it is marked ``failed``."""
    webhook_timeout_s: float = Field(default=5.0, gt=0, le=60)
    """Timeout of one webhook call (connect and read)."""
    webhook_retry_base_s: float = Field(default=5.0, ge=0)
    """Backoff of a failed webhook call: full jitter up to ``base * 2**(attempt-1)`` ..."""
    webhook_retry_cap_s: float = Field(default=3600.0, ge=0)
    """... and never more than this."""


#: The groups in the order the settings page shows them: (the group's name, its class, the
#: page's heading).
GROUPS: tuple[tuple[str, type[BaseModel], str], ...] = (
    ("connections", Connections, "Connections"),
    ("reconciler", Reconciler, "Reconciler and leases"),
    ("workers", Workers, "Concurrency and workers"),
    ("limits", Limits, "Models, limits and costs"),
    ("api", Api, "HTTP API and auth"),
    ("plugins", Plugins, "Tools, plug-ins and MCP"),
    ("approvals", Approvals, "Approvals and policy"),
    ("webhooks", Webhooks, "Webhooks"),
)


class WarrantSettings(
    Connections, Reconciler, Workers, Limits, Api, Plugins, Approvals, Webhooks, BaseSettings
):
    """Every setting: the fields of each group. Frozen: one instance is shared by the whole
    process (:func:`load_settings`)."""

    model_config = SettingsConfigDict(env_prefix="WARRANT_", extra="ignore", frozen=True)


log = logging.getLogger(__name__)

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
    for name, known in misspelt_names(dict(environment)):
        log.warning("%s is not a warrant setting (ignored): did you mean %s?", name, known)
    return settings


#: ``WARRANT_*`` prefixes that are not settings: the test suite's, the benchmarks', the fault
#: injection's and the demo plug-in's own variables.
OTHER_PREFIXES = (
    "WARRANT_TEST_",
    "WARRANT_BENCH_",
    "WARRANT_CHAOS_",
    "WARRANT_CRASH_",
    "WARRANT_DEMO_",
)


def misspelt_names(environment: dict[str, str]) -> list[tuple[str, str]]:
    """``WARRANT_*`` variables that name no setting but are close to one, each with the
    closest setting's name: a typo (``WARRANT_STAL_AFTER_S``) is told, not silently ignored.
    A variable close to no setting, or under a prefix kept for other programs
    (:data:`OTHER_PREFIXES`: tests, benchmarks, the demo plug-in), is left alone."""
    known = sorted(f"WARRANT_{name.upper()}" for name in WarrantSettings.model_fields)
    found = []
    for name in sorted(environment):
        upper = name.upper()
        if not upper.startswith("WARRANT_") or upper in known or upper.startswith(OTHER_PREFIXES):
            continue
        close = difflib.get_close_matches(upper, known, n=1, cutoff=0.85)
        if close:
            found.append((name, close[0]))
    return found


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
        f"WARRANT_{'_'.join(map(str, e['loc'])).upper()}: "
        + str(e["msg"]).removeprefix("Value error, ")
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
