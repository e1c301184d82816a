"""``Client.from_env()`` (issue 50): with ``WARRANT_SERVER_URL`` an agent's process gets a client
of ``warrant serve`` with its API token, never the ledger's credentials."""

from __future__ import annotations

import pytest

from warrant.runner.client.api import Client
from warrant.runner.client.remote import RemoteClient
from warrant.runner.errors import TokenInvalid


def test_a_server_url_and_a_token_make_a_remote_client(monkeypatch):
    monkeypatch.setenv("WARRANT_SERVER_URL", "http://127.0.0.1:9")
    monkeypatch.setenv("WARRANT_API_TOKEN", "wrt_not_checked_until_used")
    client = Client.from_env()
    assert isinstance(client, RemoteClient) and client.base_url == "http://127.0.0.1:9"
    client.close()


def test_a_server_url_without_a_token_is_an_error_not_the_database(monkeypatch):
    monkeypatch.setenv("WARRANT_SERVER_URL", "http://127.0.0.1:9")
    monkeypatch.delenv("WARRANT_API_TOKEN", raising=False)
    with pytest.raises(TokenInvalid):
        Client.from_env()
