"""Each worker's memory of revoked runs stays bounded (warrant.broker.celery_app)."""

from __future__ import annotations

from types import SimpleNamespace

from kombu.asynchronous.timer import Timer

from warrant.broker.celery_app import TRIM_INTERVAL_S, TrimRevokedRuns, trim_revoked_runs
from warrant.broker.publish import RUN_HEADER


def test_trim_keeps_the_most_recent_runs_in_order():
    revoked = {RUN_HEADER: [f"run-{i}" for i in range(1500)], "other": ["x"]}
    assert trim_revoked_runs(1000, revoked) == 500
    assert revoked[RUN_HEADER] == [f"run-{i}" for i in range(500, 1500)]
    assert revoked["other"] == ["x"]  # other stamping schemes are not ours to trim
    assert trim_revoked_runs(1000, revoked) == 0


def test_trim_drops_repeats_of_a_run_revoked_twice():
    revoked = {RUN_HEADER: ["a", "b", "a", "c", "b"]}
    assert trim_revoked_runs(2, revoked) == 1  # three runs, two kept: one forgotten
    assert revoked[RUN_HEADER] == ["c", "b"]


def test_the_worker_step_trims_on_the_worker_timer():
    from warrant.broker.app import make_app
    from warrant.runner.settings import WarrantSettings

    app = make_app(WarrantSettings(broker_url="redis://127.0.0.1:6379/15", revoked_runs_kept=7))
    assert TrimRevokedRuns in app.steps["worker"]
    timer = Timer()
    worker = SimpleNamespace(app=app, timer=timer)
    step = TrimRevokedRuns(worker)
    step.start(worker)
    try:
        (scheduled,) = timer.queue
        assert scheduled.entry.args == (7,)  # the app's setting
        assert scheduled.entry.fun.__wrapped__ is trim_revoked_runs  # repeated by the timer
        assert TRIM_INTERVAL_S <= 60
    finally:
        step.stop(worker)
        timer.stop()
    assert step.tref is None
