"""A counting semaphore shared by every process and host that reaches one Redis.

One sorted set per semaphore: its members are the holders (a random id per acquisition),
each scored with the end of its lease on the Redis server's clock (``TIME``: no host's clock
is trusted). Acquiring first drops expired holders, so the slot of a holder that crashed, or
whose host vanished, frees itself once its lease ends; a live holder's lease is renewed by
:class:`Renewer` (one thread per process) every third of it. Each operation is one Lua script:
atomic on the server.
"""

from __future__ import annotations

import logging
import os
import threading

import redis

__all__ = ["DEFAULT_LEASE_S", "RedisSemaphore", "Renewer"]

log = logging.getLogger("warrant.limits")

#: A holder's lease; renewed every third of it while the holder lives.
DEFAULT_LEASE_S = 30.0

_NOW = "local t = redis.call('TIME') local now = tonumber(t[1]) + tonumber(t[2]) / 1000000\n"
_ACQUIRE = (
    _NOW
    + """
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if redis.call('ZSCORE', KEYS[1], ARGV[1]) or redis.call('ZCARD', KEYS[1]) < tonumber(ARGV[2]) then
  redis.call('ZADD', KEYS[1], now + tonumber(ARGV[3]), ARGV[1])
  return 1
end
return 0
"""
)
_RENEW = (
    _NOW
    + """
local score = redis.call('ZSCORE', KEYS[1], ARGV[1])
if score and tonumber(score) > now then
  redis.call('ZADD', KEYS[1], 'XX', now + tonumber(ARGV[2]), ARGV[1])
  return 1
end
return 0
"""
)
_EXPIRE = (
    _NOW
    + """
if redis.call('ZSCORE', KEYS[1], ARGV[1]) then
  redis.call('ZADD', KEYS[1], 'XX', now + tonumber(ARGV[2]), ARGV[1])
end
return 1
"""
)
_HOLDERS = _NOW + "return redis.call('ZCOUNT', KEYS[1], '(' .. now, '+inf')\n"


class RedisSemaphore:
    def __init__(self, client: redis.Redis, *, lease_s: float = DEFAULT_LEASE_S) -> None:
        self.client = client
        self.lease_s = lease_s
        self._acquire = client.register_script(_ACQUIRE)
        self._renew = client.register_script(_RENEW)
        self._holders = client.register_script(_HOLDERS)
        self._expire = client.register_script(_EXPIRE)

    def acquire(self, key: str, holder: str, *, limit: int) -> bool:
        """Take one of ``limit`` slots for ``holder`` (already held: renewed)."""
        return bool(self._acquire(keys=[key], args=[holder, limit, self.lease_s]))

    def renew(self, key: str, holder: str) -> bool:
        """Extend the lease; False if it had already ended (the slot may be someone's)."""
        return bool(self._renew(keys=[key], args=[holder, self.lease_s]))

    def release(self, key: str, holder: str) -> None:
        self.client.zrem(key, holder)

    def expire(self, key: str, holder: str, *, after_s: float) -> None:
        """The holder's slot ends ``after_s`` seconds from now, not renewed any more."""
        self._expire(keys=[key], args=[holder, after_s])

    def holders(self, key: str) -> int:
        """Holders whose lease has not ended."""
        return int(self._holders(keys=[key]))


class Renewer:
    """Renews the leases this process holds, every third of the lease, on one daemon thread
    (started on first use, again in a forked child)."""

    def __init__(self, semaphore: RedisSemaphore) -> None:
        self.semaphore = semaphore
        self._held: dict[tuple[str, str], None] = {}
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._pid: int | None = None

    def hold(self, key: str, holder: str) -> None:
        with self._lock:
            self._held[(key, holder)] = None
            if self._pid != os.getpid():
                self._pid = os.getpid()
                threading.Thread(target=self._run, name="warrant-slot-lease", daemon=True).start()

    def drop(self, key: str, holder: str) -> None:
        with self._lock:
            self._held.pop((key, holder), None)

    def _run(self) -> None:
        pid = os.getpid()
        while not self._wake.wait(self.semaphore.lease_s / 3) and pid == os.getpid():
            with self._lock:
                held = list(self._held)
            for key, holder in held:
                self._renew_one(key, holder)

    def _renew_one(self, key: str, holder: str) -> None:
        try:
            if not self.semaphore.renew(key, holder):
                log.warning("the lease of slot %s (%s) had ended before its renewal", key, holder)
        except redis.RedisError as exc:
            log.warning("renewing slot %s failed: %s", key, exc)
