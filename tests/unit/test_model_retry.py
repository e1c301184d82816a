"""A busy model is asked again later, never waited for in the worker: the OpenAI planner makes
one HTTP attempt and raises ``PlannerRetryLater``; ``decide_model_retry`` / ``ModelRetries``
decide when (``Retry-After`` capped, else full-jitter backoff) and when not (attempts, budget,
deadline)."""

from __future__ import annotations

import json
import random
import time
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from typing import Any

import pytest

from warrant.runner.codes import Phase, RunStatus
from warrant.runner.errors import WarrantError
from warrant.runner.limits import estimate_tokens
from warrant.runner.memory_view import MemoryItem, WorkingMemoryView
from warrant.runner.planners import PlannerFailure, PlannerRetryLater
from warrant.runner.planners import openai_compatible as openai_planner
from warrant.runner.planners._model_http import ModelResponse
from warrant.runner.planners.openai_compatible import OpenAIPlanner
from warrant.runner.retry import (
    MODEL_RETRY_CAP_S,
    ModelRetries,
    RetryDecision,
    decide_model_retry,
)
from warrant.runner.spec import Budgets, OpenAIPlannerSpec
from warrant.runner.views import RunView

NOW = 1_000_000.0


def answered(
    status: int, *, headers: dict[str, str] | None = None, content: bytes = b""
) -> ModelResponse:
    """An endpoint's answer as ``_model_http.post`` returns it (header names lower-cased)."""
    return ModelResponse(status, {k.lower(): v for k, v in (headers or {}).items()}, content)


def _decide(**overrides: Any) -> RetryDecision:
    args: dict[str, Any] = {
        "attempt": 1,
        "max_attempts": 3,
        "model_calls": 1,
        "max_model_calls": 10,
        "now": NOW,
        "deadline_at": NOW + 600,
        "retry_after_s": None,
        "rng": random.Random(7),
    }
    return decide_model_retry(**{**args, **overrides})


def test_retry_after_is_honoured_and_capped():
    assert _decide(retry_after_s=2.0) == RetryDecision(True, delay_s=2.0)
    assert _decide(retry_after_s=3600.0).delay_s == MODEL_RETRY_CAP_S
    assert _decide(retry_after_s=3600.0, cap_s=5.0).delay_s == 5.0
    assert _decide(retry_after_s=-4.0).delay_s == 0.0


def test_without_retry_after_the_backoff_ceiling_doubles_per_attempt():
    for attempt, ceiling in ((1, 0.5), (2, 1.0), (3, 2.0), (9, MODEL_RETRY_CAP_S)):
        delays = [
            _decide(attempt=attempt, max_attempts=20, rng=random.Random(seed)).delay_s
            for seed in range(200)
        ]
        assert min(delays) >= 0.0 and max(delays) <= ceiling
        assert max(delays) > ceiling * 0.9  # full jitter reaches up to the ceiling


@pytest.mark.parametrize(
    ("overrides", "reason"),
    [
        ({"attempt": 3, "max_attempts": 3}, "attempts"),
        ({"model_calls": 10, "max_model_calls": 10}, "budget"),
        ({"retry_after_s": 20.0, "deadline_at": NOW + 10}, "deadline"),
    ],
)
def test_a_retry_must_fit_the_attempts_the_budget_and_the_deadline(overrides, reason):
    decision = _decide(**overrides)
    assert (decision.retry, decision.reason) == (False, reason)


def test_the_step_knows_its_attempt_and_cost_from_its_retry_events():
    later = PlannerRetryLater("HTTP_503", retry_after_s=None, max_attempts=3)
    retries = ModelRetries()
    run = _run(model_calls=4)
    first = retries.decide(later, run=run, now=NOW, cap_s=30.0, rng=random.Random(1))
    assert first.retry
    event = retries.event(later, first, version=5, now=NOW)
    assert event["attempt"] == 1 and event["calls"] == 1 and event["version"] == 5
    assert event["not_before"] == NOW + event["delay_s"]
    # the next delivery reads the events back: attempt 2, one call already spent
    retries = ModelRetries.of([event])
    assert (retries.attempts, retries.calls, retries.not_before) == (1, 1, event["not_before"])
    second = retries.decide(later, run=_run(model_calls=5), now=NOW, cap_s=30.0)
    retries = ModelRetries.of([event, retries.event(later, second, version=5, now=NOW)])
    third = retries.decide(later, run=_run(model_calls=6), now=NOW, cap_s=30.0)
    assert (third.retry, third.reason) == (False, "attempts")
    assert retries.failure(later, third) == {"code": "HTTP_503", "attempts": 3, "last": "HTTP_503"}
    assert ModelRetries.of([]) == ModelRetries()


def test_giving_up_names_the_deadline_or_the_budget_when_they_refused():
    later = PlannerRetryLater("HTTP_429", retry_after_s=20.0)
    late = ModelRetries().decide(later, run=_run(deadline_s=5), now=NOW, cap_s=30.0)
    assert ModelRetries().failure(later, late)["code"] == "DEADLINE_REACHED"
    spent = ModelRetries().decide(later, run=_run(model_calls=9), now=NOW, cap_s=30.0)
    assert ModelRetries().failure(later, spent)["code"] == "MODEL_CALL_BUDGET"


def test_retry_later_is_a_planner_failure_in_the_error_tree():
    exc = PlannerRetryLater("HTTP_429", retry_after_s=2.0)
    assert isinstance(exc, PlannerFailure) and isinstance(exc, WarrantError)
    assert (exc.code, exc.calls, PlannerRetryLater.code) == ("HTTP_429", 1, "PLANNER_RETRY_LATER")


# --- the OpenAI planner: one attempt, then a typed outcome -----------------------------------


def _run(*, model_calls: int = 0, deadline_s: float = 600.0) -> RunView:
    return RunView(
        run_id="r1",
        status=RunStatus.RUNNING,
        phase=Phase.PLANNING,
        version=5,
        step=0,
        model_calls=model_calls,
        tool_calls=0,
        observation_version=0,
        deadline_at=NOW + deadline_s,
        subject="s",
        budgets=Budgets(max_model_calls=10),
    )


def _view() -> WorkingMemoryView:
    goal = MemoryItem(item_id="user-1", kind="goal", source="user", content="g", created_at_step=0)
    return WorkingMemoryView(
        run_id="r1", step=1, goal=goal, items=[], tools=[], budgets={}, preferences={}
    )


def _propose(monkeypatch: pytest.MonkeyPatch, answer: Any) -> Any:
    """``OpenAIPlanner.propose`` with the HTTP call answered by ``answer`` (a response, or an
    exception to raise); returns the reply or the raised error, and the number of posts."""
    posts: list[float] = []

    def post(*_: Any, **__: Any) -> ModelResponse:
        posts.append(time.monotonic())
        if isinstance(answer, Exception):
            raise answer
        return answer

    monkeypatch.setattr(openai_planner._model_http, "post", post)
    monkeypatch.setattr(openai_planner.time, "time", lambda: NOW)
    spec = OpenAIPlannerSpec(kind="openai", model="m", base_url="http://127.0.0.1:9/v1")
    planner = OpenAIPlanner(spec.model_copy(update={"max_retries": 2}), {})
    try:
        return planner.propose(_run(), _view()), len(posts)
    except PlannerFailure as exc:
        return exc, len(posts)


@pytest.mark.parametrize(
    ("answer", "code", "retry_after"),
    [
        (answered(429, headers={"Retry-After": "2"}), "HTTP_429", 2.0),
        (answered(503), "HTTP_503", None),
        (ConnectionError("refused"), "MODEL_UNREACHABLE", None),
        (TimeoutError("slow"), "MODEL_TIMEOUT", None),
    ],
)
def test_a_busy_or_absent_model_raises_retry_later_after_one_attempt(
    monkeypatch, answer, code, retry_after
):
    t0 = time.monotonic()
    exc, posts = _propose(monkeypatch, answer)
    assert time.monotonic() - t0 < 0.5  # nothing sleeps in the planner
    assert isinstance(exc, PlannerRetryLater) and posts == 1
    assert (exc.code, exc.retry_after_s, exc.calls, exc.max_attempts) == (code, retry_after, 1, 3)


def test_a_4xx_fails_without_retry(monkeypatch):
    exc, posts = _propose(monkeypatch, answered(400))
    assert type(exc) is PlannerFailure and exc.code == "HTTP_400" and posts == 1


def test_retry_after_as_an_http_date():
    when = datetime.fromtimestamp(time.time(), UTC) + timedelta(seconds=90)
    header = format_datetime(when, usegmt=True)
    delay = openai_planner._retry_after(answered(429, headers={"Retry-After": header}))
    assert delay is not None and 85 <= delay <= 90
    assert openai_planner._retry_after(answered(429, headers={"Retry-After": "soon"})) is None
    assert openai_planner._retry_after(answered(429)) is None


def test_the_body_is_the_payload_serialized_once_with_the_budgets_max_tokens(monkeypatch):
    """Issue 52: the request is serialized once (the prompt's estimate reads the same text)
    and the body sent is that text with ``max_tokens`` added: the same JSON as the payload."""
    sent: list[bytes] = []

    def post(*_: Any, body: bytes, **__: Any) -> ModelResponse:
        sent.append(body)
        return answered(503)

    monkeypatch.setattr(openai_planner._model_http, "post", post)
    monkeypatch.setattr(openai_planner.time, "time", lambda: NOW)
    spec = OpenAIPlannerSpec(kind="openai", model="m", base_url="http://127.0.0.1:9/v1")
    planner = OpenAIPlanner(spec, {})
    request = planner._request(_view())
    with pytest.raises(PlannerRetryLater):
        planner.propose(_run(), _view())
    [body] = sent
    payload = json.loads(body)
    assert payload == {**request.payload, "max_tokens": payload["max_tokens"]}
    assert payload["max_tokens"] == spec.max_completion_tokens
    assert request.prompt_tokens == len(request.encoded) // 4
    request.payload["max_tokens"] = payload["max_tokens"]
    assert estimate_tokens(request.sent()) == estimate_tokens(request.payload)
