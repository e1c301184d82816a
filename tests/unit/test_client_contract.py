"""One client contract (issue 48): :class:`Client` and :class:`RemoteClient` offer every method
of :class:`RunnerClient` with the very same signature (mypy checks that both conform; this
checks that neither is merely compatible: same names, kinds, defaults and annotations)."""

from __future__ import annotations

import inspect

import pytest

from warrant.runner.client.api import Client
from warrant.runner.client.contract import RunnerClient
from warrant.runner.client.remote import RemoteClient

MEMBERS = sorted(
    name
    for name, value in vars(RunnerClient).items()
    if not name.startswith("_") and inspect.isfunction(value)
)


def _shape(fn: object) -> list[tuple[str, object, object, object]]:
    sig = inspect.signature(fn)  # type: ignore[arg-type]
    shape = [(p.name, p.kind, p.default, p.annotation) for p in sig.parameters.values()]
    return [*shape, ("return", None, None, sig.return_annotation)]


def test_the_contract_names_what_the_cli_uses():
    assert {"start_run", "get_run", "wait_change", "policy_tools", "propose", "decision"} <= set(
        MEMBERS
    )


@pytest.mark.parametrize("name", MEMBERS)
def test_both_clients_have_the_contracts_signature(name):
    expected = _shape(getattr(RunnerClient, name))
    assert _shape(getattr(Client, name)) == expected
    assert _shape(getattr(RemoteClient, name)) == expected


def test_the_remote_client_reads_no_worker_registrations():
    with RemoteClient("http://127.0.0.1:9", "token") as remote:
        assert remote.policy_tools(seen_within_s=90.0) is None
