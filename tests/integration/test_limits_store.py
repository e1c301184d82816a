"""The shared limits' Redis side on a real Redis, without workers: leased slots, token
reservations settled by the reply's usage, slots released on every way out, and fail-open
when Redis cannot be reached."""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest
import redis

from tests.conftest import wait_for
from tests.services import Services
from warrant.broker.limit_waits import ModelGate, tool_slot
from warrant.broker.limits import SharedLimits
from warrant.broker.semaphore import RedisSemaphore
from warrant.runner.limits import LimitTable, ModelLimit, ToolLimit
from warrant.runner.planner_protocol import PlannerFailure

pytestmark = pytest.mark.services


@pytest.fixture
def redis_url(services: Services) -> str:
    url = services.broker_url or ""
    if not url.startswith("redis://"):
        pytest.skip("the shared limits live in Redis")
    return url


def _gate(shared: SharedLimits, recorded: list[Any]) -> ModelGate:
    return ModelGate(shared, record=recorded.extend, touch=lambda: None, touch_every_s=60)


def test_a_crashed_holders_slot_frees_itself_and_a_live_one_is_renewed(redis_url: str) -> None:
    semaphore = RedisSemaphore(redis.Redis.from_url(redis_url), lease_s=1.0)
    key = f"test:slots:{uuid.uuid4().hex}"
    assert semaphore.acquire(key, "crashed", limit=2)
    assert semaphore.acquire(key, "live", limit=2)
    assert not semaphore.acquire(key, "third", limit=2)
    # "live" renews its lease, "crashed" never does: its slot frees itself
    wait_for(
        lambda: semaphore.renew(key, "live") and semaphore.acquire(key, "third", limit=2),
        timeout=5,
        what="the crashed holder's lease to end",
    )
    assert not semaphore.renew(key, "crashed")
    assert semaphore.holders(key) == 2
    semaphore.release(key, "live")
    semaphore.release(key, "third")
    assert semaphore.holders(key) == 0


def test_the_token_reservation_is_replaced_by_the_usage(redis_url: str) -> None:
    key = f"http://tokens-{uuid.uuid4().hex[:8]}/v1"
    table = LimitTable(models={key: ModelLimit(tokens_per_minute=1000)}, window_s=60)
    shared = SharedLimits(table, redis_url)
    held = table.for_model(base_url=key, api_key_env=None)
    blocked, first = shared.take_model(held, 600)
    assert blocked is None
    blocked, _ = shared.take_model(held, 600)
    assert blocked is not None and blocked.limit == "tokens_per_minute"
    shared.settle(first, 100)  # the reply used 100 of the 600 reserved
    blocked, second = shared.take_model(held, 600)
    assert blocked is None and second


def test_a_model_call_waits_for_its_window_until_the_deadline(redis_url: str) -> None:
    key = f"http://requests-{uuid.uuid4().hex[:8]}/v1"
    table = LimitTable(models={key: ModelLimit(requests_per_minute=1)}, window_s=1)
    recorded: list[Any] = []
    gate = _gate(SharedLimits(table, redis_url), recorded)
    with gate.reserve(base_url=key, api_key_env=None, tokens=10, deadline_at=time.time() + 5):
        pass
    began = time.monotonic()
    with gate.reserve(base_url=key, api_key_env=None, tokens=10, deadline_at=time.time() + 5):
        waited = time.monotonic() - began
    assert 0.5 < waited < 2.5
    assert [(name, d["limit"], d["key"]) for name, d in recorded] == [
        ("limit.waited", "requests_per_minute", f"endpoint:{key}")
    ]
    assert recorded[0][1]["waited_s"] > 0.5
    with (
        pytest.raises(PlannerFailure) as caught,
        gate.reserve(base_url=key, api_key_env=None, tokens=10, deadline_at=time.time() + 0.2),
    ):
        pass
    assert (caught.value.code, caught.value.calls) == ("DEADLINE_REACHED", 0)


class _Ctx:
    def __init__(self, limits: SharedLimits) -> None:
        self.limits = limits


def test_the_slot_is_released_when_the_stage_raises(redis_url: str) -> None:
    tool = f"tool-{uuid.uuid4().hex[:8]}"
    shared = SharedLimits(LimitTable(tools={tool: ToolLimit(max_in_flight=1)}), redis_url)
    ctx = _Ctx(shared)
    with (
        pytest.raises(RuntimeError),
        tool_slot(ctx, tool=tool, run_id="r", version=1, command_id="c") as slot,
    ):
        assert slot.deferred is None
        assert shared.semaphore.holders(shared.slot_key(tool)) == 1
        raise RuntimeError("the tool stage failed")
    assert shared.semaphore.holders(shared.slot_key(tool)) == 0


def test_an_abandoned_call_keeps_its_slot_until_its_deadline(redis_url: str) -> None:
    """A call the stage gave up on (unknown, interrupted) may still be served: its slot stays
    taken for the time its deadline had left, then frees itself (issue 47, item 2)."""
    tool = f"tool-{uuid.uuid4().hex[:8]}"
    shared = SharedLimits(LimitTable(tools={tool: ToolLimit(max_in_flight=1)}), redis_url)
    with tool_slot(_Ctx(shared), tool=tool, run_id="r", version=1, command_id="c") as slot:
        slot.keep_until(1.5)
    key = shared.slot_key(tool)
    assert shared.semaphore.holders(key) == 1
    assert not shared.semaphore.acquire(key, "next", limit=1)  # the next caller waits
    wait_for(lambda: shared.semaphore.holders(key) == 0, timeout=5, what="the slot expired")
    assert shared.semaphore.acquire(key, "next", limit=1)


def test_an_unreachable_redis_fails_open() -> None:
    """No Redis answers on port 1: the calls go on, unlimited (a warning, no wait, no loss)."""
    table = LimitTable(
        models={"http://m/v1": ModelLimit(requests_per_minute=1)},
        tools={"t": ToolLimit(max_in_flight=1, max_calls_per_minute=1)},
    )
    shared = SharedLimits(table, "redis://127.0.0.1:1/0")
    recorded: list[Any] = []
    gate = _gate(shared, recorded)
    for _ in range(3):
        with gate.reserve(
            base_url="http://m/v1", api_key_env=None, tokens=5, deadline_at=time.time() + 5
        ) as settle:
            settle(7)
        with tool_slot(_Ctx(shared), tool="t", run_id="r", version=1, command_id="c") as slot:
            assert slot.deferred is None
    assert recorded == []
