"""Shared limits, the Redis side: every worker process and host that reaches one Redis (the
broker's, or ``WARRANT_LIMITS_URL``) shares them. What is limited is
:mod:`warrant.runner.limits`; how the stages wait for them, :mod:`warrant.broker.limit_waits`.

Algorithms (keys under ``warrant:limits:``):

* requests per minute and tool calls per minute: the ``limits`` library's **moving window**
  (exact: never more than N starts in any window; its entries carry the host's clock, so
  hosts keep NTP time);
* tokens per minute: its **sliding-window counter** (two counters on the Redis server's
  clock, O(1) whatever the cost; approximate at a window's edge). A call reserves an
  estimate first (:func:`~warrant.runner.limits.estimate_tokens`), and the reply's usage
  then replaces it (the current window's counter is corrected);
* tool calls in flight: :mod:`warrant.broker.semaphore` (leased slots, renewed while held).

The keys include each limit's value: workers must share one configuration (a worker with
another value counts on its own keys).

Redis unreachable: **fail open**. The call goes on unlimited, with a warning in the log and a
``limit.unavailable`` span event, rather than waiting on a store that may not come back (a
limit must never lose a run; the model's own 429 still backs off). A slot taken before Redis
went away frees itself when its lease ends.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import redis
from limits import RateLimitItem, RateLimitItemPerSecond
from limits.errors import StorageError
from limits.storage import RedisStorage
from limits.strategies import MovingWindowRateLimiter, SlidingWindowCounterRateLimiter

from warrant.broker import telemetry
from warrant.broker.semaphore import DEFAULT_LEASE_S, RedisSemaphore, Renewer
from warrant.runner.limits import (
    LimitTable,
    ModelLimit,
    ToolLimit,
    check_storage,
    limit_table,
    limits_url,
)
from warrant.runner.settings import WarrantSettings, resolved_urls
from warrant.tools._registry import Registry

__all__ = [
    "FAILURES",
    "Blocked",
    "SharedLimits",
    "Taken",
    "shared_limits",
    "unavailable",
]

log = logging.getLogger("warrant.limits")

PREFIX = "warrant:limits"
#: A tool message that found no free slot comes back after about this long (jittered).
SLOT_POLL_S = 0.25
#: A waiting model call looks again at least this often.
MAX_SLEEP_S = 1.0
#: Redis errors and connection problems: the limit is skipped (fail open).
FAILURES: tuple[type[BaseException], ...] = (StorageError, redis.RedisError, OSError)
#: A command's wait record (when it began waiting, how often it was deferred) lives this long.
WAIT_RECORD_TTL_S = 86_400

_ADJUST = """
if redis.call('EXISTS', KEYS[1]) == 1 then
  if redis.call('INCRBY', KEYS[1], ARGV[1]) < 0 then redis.call('SET', KEYS[1], 0, 'KEEPTTL') end
end
return 1
"""
_NOW = "local t = redis.call('TIME') local now = tonumber(t[1]) + tonumber(t[2]) / 1000000\n"
_NOTE_WAIT = (
    _NOW
    + """
local first = redis.call('HSETNX', KEYS[1], 'since', now)
redis.call('HINCRBY', KEYS[1], 'deferrals', 1)
redis.call('HSET', KEYS[1], 'limit', ARGV[1], 'key', ARGV[2], 'step', ARGV[3], 'proposal', ARGV[4])
redis.call('EXPIRE', KEYS[1], ARGV[5])
return first
"""
)
_TAKE_WAIT = (
    _NOW
    + """
local since = redis.call('HGET', KEYS[1], 'since')
if not since then return nil end
local record = redis.call('HMGET', KEYS[1], 'limit', 'key', 'step', 'proposal', 'deferrals')
redis.call('DEL', KEYS[1])
return {tostring(now - tonumber(since)), record[1], record[2], record[3], record[4], record[5]}
"""
)


@dataclass(frozen=True)
class Blocked:
    """A limit that is full now: which, and when to look again."""

    limit: str
    key: str
    retry_in_s: float


Taken = list[tuple[RateLimitItem, str, int]]
"""Token reservations of one model call: (item, key, tokens)."""


def _storage_uri(url: str) -> str:
    return "redis+unix://" + url[len("redis+socket://") :] if url.startswith("redis+") else url


class SharedLimits:
    """One process's view of the shared limits: the table, the Redis client and limiters."""

    def __init__(self, table: LimitTable, url: str, *, lease_s: float = DEFAULT_LEASE_S) -> None:
        self.table = table
        self.storage = RedisStorage(
            _storage_uri(url),
            key_prefix=PREFIX,
            wrap_exceptions=True,
            socket_timeout=2.0,
            socket_connect_timeout=2.0,
        )
        client: Any = self.storage.get_connection()
        self.moving = MovingWindowRateLimiter(self.storage)
        self.sliding = SlidingWindowCounterRateLimiter(self.storage)
        self.semaphore = RedisSemaphore(client, lease_s=lease_s)
        self.renewer = Renewer(self.semaphore)
        self._adjust = client.register_script(_ADJUST)
        self._note_wait = client.register_script(_NOTE_WAIT)
        self._take_wait = client.register_script(_TAKE_WAIT)

    def rate(self, amount: int) -> RateLimitItem:
        return RateLimitItemPerSecond(amount, self.table.window_s, namespace="rate")

    def _retry_in(self, limiter: Any, item: RateLimitItem, *ids: str) -> float:
        reset = limiter.get_window_stats(item, *ids).reset_time
        return min(max(reset - time.time(), 0.02), MAX_SLEEP_S)

    # --- model calls ------------------------------------------------------------------------

    def take_model(
        self, held: Sequence[tuple[str, ModelLimit]], tokens: int
    ) -> tuple[Blocked | None, Taken]:
        """Tokens of every token limit, then a request of every request limit; all or none
        (a refused one gives back the tokens taken)."""
        taken: Taken = []
        for key, limit in held:
            if limit.tokens_per_minute:
                item, cost = (
                    self.rate(limit.tokens_per_minute),
                    min(tokens, limit.tokens_per_minute),
                )
                if not self.sliding.hit(item, "tokens", key, cost=cost):
                    self.settle(taken, 0)
                    wait = self._retry_in(self.sliding, item, "tokens", key)
                    return Blocked("tokens_per_minute", key, wait), []
                taken.append((item, key, cost))
        for key, limit in held:
            if limit.requests_per_minute:
                item = self.rate(limit.requests_per_minute)
                if not self.moving.hit(item, "requests", key):
                    self.settle(taken, 0)
                    wait = self._retry_in(self.moving, item, "requests", key)
                    return Blocked("requests_per_minute", key, wait), []
        return None, taken

    def settle(self, taken: Taken, used: int) -> None:
        """Replace each reservation by ``used`` tokens (0: give it back)."""
        for item, key, cost in taken:
            current = self.storage._current_window_key(item.key_for("tokens", key))
            delta = min(used, item.amount) - cost
            if delta:
                self._adjust(keys=[self.storage.prefixed_key(current)], args=[delta])

    # --- tool calls -------------------------------------------------------------------------

    def slot_key(self, tool: str) -> str:
        return f"{PREFIX}:in_flight:tool:{tool}"

    def take_tool(self, tool: str, limit: ToolLimit, holder: str) -> Blocked | None:
        """A slot (if capped), then a call of the per-minute budget (if limited)."""
        if limit.max_in_flight:
            key = self.slot_key(tool)
            if not self.semaphore.acquire(key, holder, limit=limit.max_in_flight):
                return Blocked("max_in_flight", f"tool:{tool}", SLOT_POLL_S)
            self.renewer.hold(key, holder)
        if limit.max_calls_per_minute:
            item = self.rate(limit.max_calls_per_minute)
            if not self.moving.hit(item, "calls", f"tool:{tool}"):
                self.release_tool(tool, holder)
                wait = self._retry_in(self.moving, item, "calls", f"tool:{tool}")
                return Blocked("max_calls_per_minute", f"tool:{tool}", wait)
        return None

    def release_tool(self, tool: str, holder: str, *, after_s: float = 0.0) -> None:
        """Free the slot now, or ``after_s`` seconds from now (on the Redis server's clock)."""
        key = self.slot_key(tool)
        self.renewer.drop(key, holder)
        try:
            if after_s > 0:
                self.semaphore.expire(key, holder, after_s=after_s)
            else:
                self.semaphore.release(key, holder)
        except FAILURES as exc:  # its lease ends it
            log.warning("releasing slot %s failed (%s): its lease frees it", key, exc)

    def note_wait(self, command_id: str, blocked: Blocked, *, step: int, proposal: str) -> bool:
        """Count a deferral of ``command_id``; True for its first."""
        args: list[Any] = [blocked.limit, blocked.key, step, proposal, WAIT_RECORD_TTL_S]
        return bool(self._note_wait(keys=[f"{PREFIX}:wait:{command_id}"], args=args))

    def take_wait(self, command_id: str) -> dict[str, Any] | None:
        """The command's wait (ended now), or None if it never waited."""
        found = self._take_wait(keys=[f"{PREFIX}:wait:{command_id}"])
        if not found:
            return None
        waited, limit, key, step, proposal, deferrals = (_text(v) for v in found)
        return {
            "limit": limit,
            "key": key,
            "waited_s": round(float(waited), 3),
            "deferrals": int(deferrals or 0),
            "step": int(step or 0),
            "proposal_id": proposal or None,
        }


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value or "")


def unavailable(exc: BaseException, *, what: str) -> None:
    """Fail open: the call goes on unlimited."""
    log.warning("shared limits unavailable (%s): %s goes on unlimited", exc, what)
    telemetry.note("limit.unavailable", what=what, error=type(exc).__name__)


def _broker_url(settings: WarrantSettings) -> str | None:
    if settings.broker_url:
        return settings.broker_url
    try:
        return resolved_urls(settings)[0]
    except Exception:  # SERVICES_NOT_CONFIGURED: then there is no Redis either
        return None


def shared_limits(settings: WarrantSettings, registry: Registry) -> SharedLimits | None:
    """This process's shared limits, checked (valid, with a Redis to keep them); None when
    none are declared."""
    table = limit_table(settings, registry)
    url = limits_url(settings, _broker_url(settings))
    check_storage(table, url)
    if table.empty:
        return None
    assert url is not None, "check_storage refuses limits without a Redis"
    return SharedLimits(table, url)
