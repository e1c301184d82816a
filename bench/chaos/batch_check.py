"""The chaos checker's view of batch tools: each item of a ``payout_batch`` command against the
service's ``demo_payouts`` rows (keyed by the item's own token, ``warrant.tools._batches``)."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from sqlalchemy import Engine, inspect, text

from warrant.tools._batches import applied_keys, item_token

__all__ = ["BATCH_TOOLS", "check_batches"]

#: Batch tools the checker can see: tool -> (items argument, key field, service table).
BATCH_TOOLS: dict[str, tuple[str, str, str]] = {
    "payout_batch": ("payouts", "payout_id", "demo_payouts"),
}


def _item_verdict(key: str, outcomes: list[Any]) -> str:
    """The ledger's final word on one item: applied, not_applied, handoff, unresolved."""
    if key in applied_keys(o.output for o in outcomes):
        return "applied"
    if not outcomes:
        return "not_applied"
    last = outcomes[-1]
    if last.status == "succeeded" or last.resolved_status == "applied":
        return "applied"  # every item applied (a reconciliation found the rest)
    if last.status in ("failed", "rejected"):
        return "not_applied"
    if last.resolved_status in ("handoff", "not_applied"):
        return str(last.resolved_status)
    return "unresolved"


def check_batches(
    service: Engine,
    commands: list[Any],
    by_cmd: dict[str, list[Any]],
    *,
    run_ids: set[str] | None = None,
) -> list[tuple[str, str, str | None, dict[str, Any]]]:
    """Findings ``(category, kind, run_id, detail)``: an item whose verdict disagrees with the
    service (``unexpected``), an item paid twice in one run (``duplicated``), a payout no
    command's item explains (``unexpected``/``orphan_effect``)."""
    found: list[tuple[str, str, str | None, dict[str, Any]]] = []
    for tool, (items_arg, key_field, table) in BATCH_TOOLS.items():
        if not inspect(service).has_table(table):
            continue
        with service.connect() as conn:
            rows = conn.execute(text(f"SELECT idempotency_key, recipient FROM {table}")).all()
        paid = {r[0]: r[1] for r in rows}
        explained: set[str] = set()
        for cmd in commands:
            if cmd.tool != tool:
                continue
            recipients: dict[str, int] = defaultdict(int)
            outs = by_cmd.get(cmd.id, [])
            for item in (cmd.arguments or {}).get(items_arg) or []:
                key = str(item[key_field])
                token = item_token(cmd.idempotency_token, key)
                explained.add(token)
                verdict = _item_verdict(key, outs)
                if token in paid:
                    recipients[paid[token]] += 1
                if verdict in ("applied", "not_applied") and (verdict == "applied") != (
                    token in paid
                ):
                    detail = {"command_id": cmd.id, "item": key, "ledger": verdict}
                    found.append(("unexpected", "item_mismatch", cmd.run_id, detail))
            for recipient, n in recipients.items():
                if n > 1:
                    detail = {"recipient": recipient, "effects": n}
                    found.append(("duplicated", tool, cmd.run_id, detail))
        if run_ids is None:
            for token in set(paid) - explained:
                found.append(("unexpected", "orphan_effect", None, {"tool": tool, "token": token}))
    return found
