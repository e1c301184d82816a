"""The settings are grouped by role (``warrant.runner.settings``) without any variable
changing its name, and a process reads and validates them once (``load_settings``)."""

from __future__ import annotations

import pydantic
import pytest

from warrant.runner.errors import SettingsInvalid
from warrant.runner.settings import (
    GROUPS,
    Approvals,
    Reconciler,
    WarrantSettings,
    load_settings,
    misspelt_names,
    reload_settings,
)

#: Every variable ``WarrantSettings`` read before it was grouped: compose files, docs, tests and
#: deployments name them, so none may change.
VARIABLES = [
    "BROKER_URL",
    "DATABASE_URL",
    "DATA_DIR",
    "VISIBILITY_TIMEOUT_S",
    "RECONCILE_INTERVAL_S",
    "STALL_AFTER_S",
    "LEASE_MARGIN_S",
    "SWEEP_BATCH",
    "MAX_RECONCILE_ATTEMPTS",
    "SWEEP_LOCK_TIMEOUT_S",
    "LEASE_HEARTBEAT_S",
    "LEASE_HEARTBEAT_TIMEOUT_S",
    "PLANNER_CONCURRENCY",
    "TOOL_CONCURRENCY",
    "DB_CONNECT_TIMEOUT_S",
    "DB_KEEPALIVES_IDLE_S",
    "DB_KEEPALIVES_INTERVAL_S",
    "DB_KEEPALIVES_COUNT",
    "DB_TCP_USER_TIMEOUT_S",
    "DB_STATEMENT_TIMEOUT_S",
    "DB_IDLE_IN_TRANSACTION_TIMEOUT_S",
    "BROKER_SOCKET_TIMEOUT_S",
    "BROKER_CONNECT_TIMEOUT_S",
    "BROKER_HEALTH_CHECK_INTERVAL_S",
    "MODEL_PRICES",
    "MODEL_LIMITS",
    "TOOL_LIMITS",
    "LIMITS_URL",
    "LIMITS_WINDOW_S",
    "ALLOW_REMOTE_MODELS",
    "SERVER_URL",
    "API_TOKEN",
    "OPERATOR_TOKEN",
    "APPROVER_MAY_APPROVE_OWN_RUNS",
    "REVOKED_RUNS_KEPT",
    "TASK_EVENTS",
    "TOOLS",
    "PLUGIN_ENTRY_POINTS",
    "TOOL_DEPS",
    "PLANNERS",
    "MCP_CONFIG",
    "RELAX_CONFIRMATION",
    "OBSERVE_TOOLS",
    "APPROVALS_REQUIRED",
    "POLICY_APPROVAL",
    "WEBHOOK_SECRET",
    "WEBHOOK_MAX_ATTEMPTS",
    "WEBHOOK_TIMEOUT_S",
    "WEBHOOK_RETRY_BASE_S",
    "WEBHOOK_RETRY_CAP_S",
]


@pytest.fixture(autouse=True)
def _fresh_settings():
    """Each test starts and ends with the settings read again (the environment it set)."""
    reload_settings()
    yield
    reload_settings()


def test_every_field_is_in_exactly_one_group_and_no_variable_changed_its_name():
    grouped = [name for _, group, _ in GROUPS for name in group.model_fields]
    assert len(grouped) == len(set(grouped))
    assert set(grouped) == set(WarrantSettings.model_fields)
    assert sorted(f"{name.upper()}" for name in grouped) == sorted(VARIABLES)
    attributes = [attribute for attribute, _, _ in GROUPS]
    assert not set(attributes) & set(WarrantSettings.model_fields)  # no view hides a field
    for attribute, group, heading in GROUPS:
        assert heading and group.__doc__, attribute


def test_the_settings_are_frozen(monkeypatch):
    """Production code reads the flat fields; the group views it never read are gone (issue 48),
    the values stay one frozen object."""
    monkeypatch.setenv("WARRANT_LEASE_MARGIN_S", "7")
    monkeypatch.setenv("WARRANT_DB_CONNECT_TIMEOUT_S", "3")
    monkeypatch.setenv("WARRANT_RELAX_CONFIRMATION", "pay, refund")
    settings = load_settings()
    assert settings.lease_margin_s == 7
    assert settings.db_connect_timeout_s == 3
    assert settings.relaxed_tools == {"pay", "refund"}
    for attribute, _, _ in GROUPS:
        assert not hasattr(settings, attribute)
    with pytest.raises(pydantic.ValidationError):
        settings.lease_margin_s = 1  # type: ignore[misc]  # shared by the process: frozen


def test_a_group_validates_its_own_fields_together():
    with pytest.raises(pydantic.ValidationError, match="WARRANT_LEASE_HEARTBEAT_S"):
        Reconciler(lease_heartbeat_s=10, lease_heartbeat_timeout_s=15)
    with pytest.raises(pydantic.ValidationError, match="WARRANT_OBSERVE_TOOLS"):
        Approvals(observe_tools="*,pay")


def test_the_environment_is_read_once_and_again_only_when_it_changed(monkeypatch):
    reads = []
    real_init = WarrantSettings.__init__

    def counting_init(self, **values):
        reads.append(values)
        real_init(self, **values)

    monkeypatch.setattr(WarrantSettings, "__init__", counting_init)
    monkeypatch.setenv("WARRANT_STALL_AFTER_S", "12")
    first = load_settings()
    assert load_settings() is first and load_settings() is first
    assert (len(reads), first.stall_after_s) == (1, 12)
    monkeypatch.setenv("WARRANT_STALL_AFTER_S", "13")  # a test's (never a deployment's) change
    second = load_settings()
    assert (len(reads), second.stall_after_s, first.stall_after_s) == (2, 13, 12)
    assert load_settings() is second
    third = reload_settings()
    assert third is not second and third == second and len(reads) == 3
    monkeypatch.setenv("SOMETHING_ELSE", "1")  # not a WARRANT_* variable: not read again
    assert load_settings() is third and len(reads) == 3


def test_an_invalid_value_is_settings_invalid_naming_its_variable(monkeypatch):
    monkeypatch.setenv("WARRANT_LEASE_HEARTBEAT_S", "-1")
    with pytest.raises(SettingsInvalid, match="WARRANT_LEASE_HEARTBEAT_S") as caught:
        load_settings()
    assert caught.value.code == "SETTINGS_INVALID"
    assert caught.value.to_dict()["code"] == "SETTINGS_INVALID"
    with pytest.raises(SettingsInvalid):  # a refused environment is not remembered as good
        load_settings()
    monkeypatch.setenv("WARRANT_LEASE_HEARTBEAT_S", "2")
    monkeypatch.setenv("WARRANT_LEASE_HEARTBEAT_TIMEOUT_S", "5")
    with pytest.raises(SettingsInvalid, match="WARRANT_LEASE_HEARTBEAT_TIMEOUT_S must be"):
        load_settings()
    monkeypatch.setenv("WARRANT_LEASE_HEARTBEAT_TIMEOUT_S", "8")
    assert load_settings().lease_heartbeat_s == 2


def test_secrets_are_not_shown_in_the_message(monkeypatch):
    monkeypatch.setenv("WARRANT_WEBHOOK_MAX_ATTEMPTS", "s3cr3t-value")
    with pytest.raises(SettingsInvalid) as caught:
        load_settings()
    assert "WARRANT_WEBHOOK_MAX_ATTEMPTS" in str(caught.value)
    assert "s3cr3t-value" not in str(caught.value)


@pytest.mark.parametrize(
    ("variable", "url"),
    [
        ("WARRANT_BROKER_URL", "foo://nowhere"),
        ("WARRANT_BROKER_URL", "127.0.0.1:6379"),
        ("WARRANT_DATABASE_URL", "mysql://db/ledger"),
    ],
)
def test_a_url_nothing_can_connect_to_is_refused_as_the_process_starts(monkeypatch, variable, url):
    monkeypatch.setenv(variable, url)
    with pytest.raises(SettingsInvalid, match=variable) as caught:
        load_settings()
    assert "Value error" not in str(caught.value) and "://" in str(caught.value)


@pytest.mark.parametrize(
    "url", ["redis://127.0.0.1:6379/0", "redis+socket:///tmp/r.sock", "amqp://guest@h//"]
)
def test_the_brokers_warrant_runs_on_are_accepted(monkeypatch, url):
    monkeypatch.setenv("WARRANT_BROKER_URL", url)
    monkeypatch.setenv("WARRANT_DATABASE_URL", "postgresql+psycopg://postgres@127.0.0.1/x")
    assert load_settings().broker_url == url


def test_a_misspelt_variable_is_told_with_the_closest_setting(monkeypatch, caplog):
    environment = {
        "WARRANT_STAL_AFTER_S": "5",
        "WARRANT_BROKER_UR": "redis://x",
        "WARRANT_TEST_BROKER_URL": "redis://x",  # the test suite's own, not a typo
        "WARRANT_SOMETHING_ELSE_ENTIRELY": "1",
        "WARRANT_STALL_AFTER_S": "5",
    }
    assert misspelt_names(environment) == [
        ("WARRANT_BROKER_UR", "WARRANT_BROKER_URL"),
        ("WARRANT_STAL_AFTER_S", "WARRANT_STALL_AFTER_S"),
    ]
    monkeypatch.setenv("WARRANT_STAL_AFTER_S", "5")
    with caplog.at_level("WARNING", logger="warrant.runner.settings"):
        reload_settings()
    assert "WARRANT_STAL_AFTER_S is not a warrant setting" in caplog.text
    assert "did you mean WARRANT_STALL_AFTER_S?" in caplog.text
