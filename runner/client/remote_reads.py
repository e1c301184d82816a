"""The reads and the memory methods of :class:`~warrant.runner.client.remote.RemoteClient`
(observations, budgets, the approval inbox, handoffs, long-term memory): the same signatures
and records as :class:`~warrant.runner.client.api.Client`, over ``/v1``."""

from __future__ import annotations

from dataclasses import fields
from typing import Any

from warrant.runner.client.contract import DEFAULT_INBOX_LIMIT
from warrant.runner.client.inbox import CitedObservation, Parameter, PendingConfirmation

__all__ = ["RemoteReads", "pending_confirmation"]


class RemoteReads:
    _call: Any  # RemoteClient's transport

    def observations(self, run_id: str) -> list[dict[str, Any]]:
        """``GET /v1/runs/{id}/observations``: the run's observations in order."""
        found: list[dict[str, Any]] = self._call("GET", f"/runs/{run_id}/observations")[
            "observations"
        ]
        return found

    def budgets(self, run_id: str) -> list[dict[str, Any]]:
        """``GET /v1/runs/{id}/budgets``: each budget's ``name``, ``used`` and ``limit``."""
        rows: list[dict[str, Any]] = self._call("GET", f"/runs/{run_id}/budgets")["budgets"]
        return rows

    def pending_confirmations(
        self, *, reveal_sensitive: bool, limit: int = DEFAULT_INBOX_LIMIT
    ) -> list[PendingConfirmation]:
        """``GET /v1/confirmations``: the runs waiting for a confirmation, longest waiting
        first (``reveal_sensitive``: a token whose role may confirm, else
        ``REVEAL_FORBIDDEN``)."""
        params = {"reveal_sensitive": "true" if reveal_sensitive else "false", "limit": limit}
        data = self._call("GET", "/confirmations", params=params)
        return [pending_confirmation(p) for p in data["confirmations"]]

    def handoffs(self, *, open_only: bool = True, limit: int = 50) -> list[dict[str, Any]]:
        """``GET /v1/handoffs``: the runs handed to a person, newest first."""
        params = {"open_only": "true" if open_only else "false", "limit": limit}
        found: list[dict[str, Any]] = self._call("GET", "/handoffs", params=params)["handoffs"]
        return found

    def handoff(self, handoff_id: str) -> dict[str, Any]:
        """``GET /v1/handoffs/{id}``: one handoff (or the newest of a run, given its id)."""
        found: dict[str, Any] = self._call("GET", f"/handoffs/{handoff_id}")
        return found

    # --- long-term memory ----------------------------------------------------------------

    def memory_records(
        self, subject: str, *, include_inactive: bool = False
    ) -> list[dict[str, Any]]:
        """``GET /v1/memory?subject=``: a subject's records (an operator token's role)."""
        params = {"subject": subject, "include_inactive": "true" if include_inactive else "false"}
        found: list[dict[str, Any]] = self._call("GET", "/memory", params=params)["records"]
        return found

    def revoke_memory(self, record_id: int, *, by: str) -> dict[str, Any]:
        """``DELETE /v1/memory/{id}``. ``by`` is ignored (the token's identity)."""
        revoked: dict[str, Any] = self._call("DELETE", f"/memory/{record_id}")
        return revoked


def pending_confirmation(data: dict[str, Any]) -> PendingConfirmation:
    """A :class:`PendingConfirmation` from a ``/v1/confirmations`` item."""
    known = {f.name for f in fields(PendingConfirmation)}
    values = {k: v for k, v in data.items() if k in known}
    values["parameters"] = [Parameter(**p) for p in values.get("parameters") or []]
    values["cited"] = [CitedObservation(**c) for c in values.get("cited") or []]
    return PendingConfirmation(**values)
