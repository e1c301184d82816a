"""Business effect keys (``Tool.effect_key``, ``commands.effect_key``, migration 0023): the
earlier commands a call's key is compared with, and the lock two policy workers take on a key
before the command that carries it is written.

The policy stage reads :func:`effects_for` in its one load (:class:`~warrant.ledger.stage_loads.
PolicyLoad`) for the keys :func:`keys_of` finds in the pending proposal; the gate's effects layer
decides (:func:`warrant.runner.policy.earlier_effect`). Across runs (a tool's
``effect_window_s``) two workers may decide at once: each write takes the key's transaction
advisory lock and reads again (:func:`recheck`); a command that appeared meanwhile makes the
write raise :class:`EffectMoved`, and the stage decides again on the fresh facts.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from sqlalchemy import String, bindparam, text
from sqlalchemy.dialects.postgresql import ARRAY

from warrant.ledger.repo import StaleVersion
from warrant.runner.fan_in import tool_observation_id
from warrant.runner.views import EffectView
from warrant.tools._registry import Registry

__all__ = ["EffectMoved", "effects_for", "keys_of", "lock_keys", "recheck"]

#: The earlier commands read per load (newest first): the gate needs the newest that blocks.
MAX_EFFECTS = 50

_EFFECTS = text(
    """
SELECT c.effect_key, c.run_id, c.step, c.branch, c.id, c.status,
       o.status AS outcome, o.resolved_status,
       extract(epoch FROM now() - c.created_at)::float8 AS age_s
  FROM commands c
  LEFT JOIN LATERAL (SELECT x.status, x.resolved_status FROM outcomes x
                      WHERE x.command_id = c.id ORDER BY x.id DESC LIMIT 1) o ON true
 WHERE c.effect_key = ANY(:keys)
   AND (c.run_id = :run_id OR c.created_at > now() - :window * interval '1 second')
 ORDER BY c.created_at DESC, c.branch DESC
 LIMIT :limit
"""
).bindparams(bindparam("keys", type_=ARRAY(String)))

_LOCK = text("SELECT pg_advisory_xact_lock(hashtextextended(k, 0)) FROM unnest(:keys) AS k")
_LOCK = _LOCK.bindparams(bindparam("keys", type_=ARRAY(String)))


class EffectMoved(StaleVersion):
    """Another run's command with the same business effect key was written between this
    stage's read and its write: nothing was written; decide again on fresh facts."""


def keys_of(proposal: dict[str, Any], registry: Registry) -> tuple[list[str], float]:
    """The business effect keys of a pending proposal's calls (its own, or each call's of a
    parallel step) whose tools declare one, formatted over the arguments as the gate
    validates them; and the widest window of those tools (0: this run only). A call the
    schema refuses has no key (the gate refuses it)."""
    raw = proposal.get("raw")
    calls: Iterable[Any] = [raw]
    if proposal.get("kind") == "parallel" and isinstance(raw, dict):
        listed = raw.get("calls")
        calls = listed if isinstance(listed, list) else []
    keys: list[str] = []
    window = 0.0
    for call in calls:
        if not isinstance(call, dict) or not isinstance(call.get("arguments"), dict):
            continue
        tool = registry.get(str(call.get("tool")), str(call.get("tool_version")))
        if tool is None or tool.effect_key is None:
            continue
        try:
            arguments = tool.parse_input(call["arguments"]).model_dump(mode="json")
        except Exception:  # refused by the schema layer: no effect to compare
            continue
        key = tool.effect_key_of(arguments)
        if key is not None and key not in keys:
            keys.append(key)
            window = max(window, tool.effect_window_s)
    return keys, window


def effects_for(conn: Any, run_id: str, keys: Sequence[str], window: float) -> list[EffectView]:
    """The earlier commands with one of ``keys``: the run's own, and other runs' issued less
    than ``window`` seconds ago (by the database's clock), newest first."""
    if not keys:
        return []
    params = {"keys": list(keys), "run_id": run_id, "window": window, "limit": MAX_EFFECTS}
    return [
        EffectView(
            key=r.effect_key,
            run_id=r.run_id,
            step=r.step,
            branch=r.branch,
            command_id=r.id,
            status=(r.outcome or r.status) if r.status == "completed" else r.status,
            resolved=r.resolved_status,
            age_s=float(r.age_s),
            observation_id=tool_observation_id(r.step, r.branch) if r.outcome else None,
        )
        for r in conn.execute(_EFFECTS, params)
    ]


def lock_keys(conn: Any, keys: Iterable[str]) -> None:
    """Take each key's transaction advisory lock (in a sorted order: two writers never wait
    for each other's); held until the transaction ends."""
    ordered = sorted(set(keys))
    if ordered:
        conn.execute(_LOCK, {"keys": ordered}).all()


def recheck(
    conn: Any, run_id: str, keys: Sequence[str], window: float, *, known: Iterable[EffectView]
) -> None:
    """Under the keys' locks (:func:`lock_keys`): raise :class:`EffectMoved` when a command
    with one of ``keys`` exists now that the decision did not see (``known``)."""
    seen = {e.command_id for e in known}
    fresh = [e for e in effects_for(conn, run_id, keys, window) if e.command_id not in seen]
    if fresh:
        raise EffectMoved(f"run {run_id}: another command with the same effect key was issued")
