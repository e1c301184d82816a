"""The chaos suite: servers, workers, the mixed load, the faults, the drain, the checker."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import shutil
import signal
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.chaos.concurrency import WAIT_MS, UnackedProbe, measure, verdict
from bench.chaos.faults import MAX_STALLS
from bench.chaos.servers import TempPostgres, TempRedis

__all__ = ["main"]

SETTLED = {"completed", "failed", "cancelled", "needs_input", "handoff"}
#: Processes per role (None: a threads-pool role's one process with its default threads,
#: ``WARRANT_PLANNER_CONCURRENCY`` / ``WARRANT_TOOL_CONCURRENCY``). The planner and the tools
#: run on the threads pool, policy on prefork (two processes; ``role_pool``), so every pool
#: warrant deploys is under the faults.
ROLES: dict[str, int | None] = {"planner": None, "policy": 2, "tool": None, "reconciler": 1}


def _say(msg: str, quiet: bool = False) -> None:
    if not quiet:
        sys.stderr.write(f"[chaos {time.strftime('%H:%M:%S')}] {msg}\n")
        sys.stderr.flush()


def _env(tmp: Path, broker: str, database: str, *, campaign: str | None) -> dict[str, str]:
    from warrant_demo import DEMO_RELAXED

    from bench.chaos.concurrency import campaign_env

    env = {
        "WARRANT_BROKER_URL": broker,
        "WARRANT_DATABASE_URL": database,
        "WARRANT_DATA_DIR": str(tmp / "data"),
        "WARRANT_TOOLS": "warrant_demo:plugin",
        "WARRANT_RELAX_CONFIRMATION": DEMO_RELAXED,
        "WARRANT_RECONCILE_INTERVAL_S": "1",
        "WARRANT_STALL_AFTER_S": "5",
        "WARRANT_LEASE_MARGIN_S": "2",
        "WARRANT_TASK_EVENTS": "0",
        **(campaign_env() if campaign == "concurrency" else {}),
    }
    os.environ.update(env)
    return {**os.environ, **env}


@dataclass
class Tracked:
    run_id: str
    kind: str
    started: float
    cancel_at: float | None
    confirmed: bool = False
    cancelled: bool = False
    status: str = "running"


@dataclass
class Load:
    """Starts runs at a pace, confirms the ones that ask, cancels a share mid-way."""

    client: Any
    engine: Any
    rng: random.Random
    wait_ms: tuple[int, int] | None = None
    """Each run waits this long in a read first (the concurrency campaign)."""
    runs: list[Tracked] = field(default_factory=list)
    start_errors: int = 0
    peak: int = 0
    """The most runs in flight at once (as last polled)."""

    def start_one(self) -> bool:
        from bench.chaos.specs import plan_run

        planned = plan_run(self.rng, wait_ms=self.wait_ms)
        try:
            run_id = self.client.start_run(planned.spec, publish=False)
        except Exception:
            self.start_errors += 1
            return False
        now = time.monotonic()
        cancel_at = now + planned.cancel_after_s if planned.cancel_after_s else None
        self.runs.append(Tracked(run_id, planned.kind, now, cancel_at))
        # the broker may be down: the reconciler re-publishes a stalled run
        with contextlib.suppress(Exception):
            self.client.publisher.planner(run_id, 1)
        return True

    def poll(self) -> None:
        from sqlalchemy import text

        ids = [t.run_id for t in self.runs if t.status not in SETTLED or t.status == "handoff"]
        if not ids:
            return
        try:
            with self.engine.connect() as conn:
                rows = conn.execute(
                    text("SELECT id, status FROM runs WHERE id = ANY(:ids)"), {"ids": ids}
                ).all()
        except Exception:
            return
        status = dict(rows)
        now = time.monotonic()
        for t in self.runs:
            t.status = status.get(t.run_id, t.status)
            if t.status == "waiting_confirmation" and not t.confirmed:
                self._confirm(t)
            if t.cancel_at is not None and not t.cancelled and now >= t.cancel_at:
                if t.status in SETTLED:
                    t.cancelled = True
                    continue
                try:
                    self.client.cancel(t.run_id, by="chaos", reason="chaos cancel")
                    t.cancelled = True
                except Exception as exc:
                    if getattr(exc, "code", "") == "RUN_NOT_CANCELLABLE":
                        t.cancelled = True

    def _confirm(self, t: Tracked) -> None:
        try:
            info = self.client.get_run(t.run_id)
            request = info.confirmation_request or {}
            if info.status == "waiting_confirmation" and request.get("proposal_hash"):
                self.client.confirm(t.run_id, proposal_hash=request["proposal_hash"], by="chaos")
                t.confirmed = True
        except Exception as exc:
            # a lost publish after the commit is re-published by the reconciler
            if getattr(exc, "code", "") in ("RUN_NOT_WAITING_CONFIRMATION",):
                t.confirmed = True

    def live(self) -> int:
        live = sum(1 for t in self.runs if t.status not in SETTLED)
        self.peak = max(self.peak, live)
        return live


def _wait_ready(app: Any, names: list[str], timeout: float) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        replies = app.control.ping(timeout=1.0) or []
        seen = {n.split("@")[0] for r in replies for n in r}
        if all(n in seen for n in names):
            return
    raise TimeoutError(f"workers {names} not ready after {timeout}s")


def run_suite(args: argparse.Namespace) -> dict[str, Any]:
    t0 = time.monotonic()
    quiet = args.quiet
    tmp = Path(tempfile.mkdtemp(prefix="warrant-chaos-"))
    # The concurrency campaign's Redis keeps what it holds across a restart, so that a killed
    # worker's unacknowledged messages are still there to watch coming back.
    redis = TempRedis(tmp / "redis", persistent=args.campaign == "concurrency")
    postgres = TempPostgres(tmp / "pg")
    supervisor = None
    injectors = None
    try:
        redis.start()
        postgres.init()
        postgres.start()
        postgres.create_database()
        database = postgres.url()
        env = _env(tmp, redis.url, database, campaign=args.campaign)
        _say(f"servers up in {tmp} (redis :{redis.port}, postgres :{postgres.port})", quiet)

        from bench.chaos.faults import FAULT_KINDS, Injectors
        from bench.chaos.workers import Supervisor, WorkerSpec
        from warrant.broker.app import app
        from warrant.broker.deps import setup_plugins
        from warrant.broker.publish import Publisher
        from warrant.ledger.db import engine_for
        from warrant.ledger.migrate import upgrade
        from warrant.runner.client.api import Client
        from warrant.runner.settings import WarrantSettings
        from warrant.runner.stack.roles import (
            beat_command,
            celery_worker_command,
            role_concurrency,
            role_pool,
            role_queues,
        )

        settings = WarrantSettings()
        upgrade(database)
        setup_plugins(database, settings)
        specs = [
            WorkerSpec(
                role,
                tuple(
                    celery_worker_command(
                        "warrant.broker.app",
                        role_queues(role),
                        node=f"{role}@chaos",
                        concurrency=role_concurrency(role, conc),
                        events=False,
                        pool=role_pool(role, role_concurrency(role, conc)),
                    )
                ),
            )
            for role, conc in ROLES.items()
        ]
        specs.append(WorkerSpec("beat", tuple(beat_command(settings))))
        supervisor = Supervisor(specs, env, tmp / "logs")
        supervisor.start()
        _wait_ready(app, list(ROLES), 90)
        _say(f"workers ready ({', '.join(f'{r} x{c}' for r, c in ROLES.items())}, beat)", quiet)

        engine = engine_for(database)
        publisher = Publisher(app)
        client = Client(engine=engine, publisher=publisher)
        rng = random.Random(args.seed)
        load = Load(client, engine, rng, wait_ms=WAIT_MS if args.campaign else None)
        pace = 1.0 / args.rate
        load_s = args.runs * pace
        injectors = Injectors(
            supervisor=supervisor,
            redis=redis,
            postgres=postgres,
            engine=engine,
            publisher=publisher,
            interval_s=max(args.min_fault_interval_s, load_s / max(1, args.faults_per_kind)),
            rng=random.Random(args.seed + 1),
            campaign=args.campaign,
        )
        probe = UnackedProbe(redis.url)
        probe.start()
        injectors.start()
        _say(
            f"load: {args.runs} runs over ~{load_s:.0f}s, faults every "
            f"{injectors.interval_s:.1f}s per kind",
            quiet,
        )
        next_start = time.monotonic()
        last_progress = 0.0
        cap = int(args.runs * 1.6)
        load_deadline = time.monotonic() + args.max_load_s
        while True:
            now = time.monotonic()
            quotas = all(
                injectors.faults.counts[k] >= min(args.faults_per_kind, MAX_STALLS)
                if k == "redis_stall"
                else injectors.faults.counts[k] >= args.faults_per_kind
                for k in injectors.kinds
            )
            if (len(load.runs) >= args.runs and quotas) or now > load_deadline:
                break
            live = load.live()
            # every start that is due (the loop turns ten times a second: faster rates start
            # several per turn), while there is room
            while len(load.runs) < cap and live < args.max_in_flight and now >= next_start:
                if not load.start_one():
                    break
                live += 1
                next_start = max(next_start + pace, now - 2 * pace)
            load.poll()
            if now - last_progress >= 10:
                last_progress = now
                _say(
                    f"{now - t0:5.0f}s runs {len(load.runs)} live {load.live()} faults "
                    f"{dict(injectors.faults.counts)} restarts {supervisor.restarts}",
                    quiet,
                )
            time.sleep(0.1)
        injectors.halt()
        _say(f"load done; faults {dict(injectors.faults.counts)}; draining", quiet)
        drain_end = time.monotonic() + args.drain_s
        while time.monotonic() < drain_end:
            load.poll()
            if load.live() == 0:
                break
            time.sleep(0.5)
        load.poll()
        probe.halt()
        _say(f"drained: {load.live()} live runs left", quiet)

        from bench.chaos.checker import check, format_table

        report = check(engine)
        with engine.connect() as conn:
            from sqlalchemy import text

            service_faults: dict[str, int] = dict(
                conn.execute(
                    text(
                        "SELECT tool || ':' || fault, count(*) FROM demo_calls "
                        "WHERE fault IS NOT NULL GROUP BY 1 ORDER BY 1"
                    )
                ).all()
            )
        kinds: dict[str, int] = {}
        for t in load.runs:
            kinds[t.kind] = kinds.get(t.kind, 0) + 1
        result = {
            "runs": len(load.runs),
            "run_kinds": kinds,
            "cancels_requested": sum(1 for t in load.runs if t.cancelled),
            "confirmations": sum(1 for t in load.runs if t.confirmed),
            "start_errors": load.start_errors,
            "faults": {k: injectors.faults.counts[k] for k in injectors.kinds},
            "peak_in_flight": load.peak,
            "fault_detail": dict(sorted(injectors.faults.detail.items())),
            "service_faults": service_faults,
            "worker_restarts": supervisor.restarts,
            "duration_s": round(time.monotonic() - t0, 1),
            "seed": args.seed,
            "check": report.to_dict(),
            "workdir": str(tmp),
        }
        result["ok"] = (
            report.ok
            and all(injectors.faults.counts[k] >= 1 for k in injectors.kinds)
            and all(injectors.faults.counts[k] >= args.faults_per_kind for k in FAULT_KINDS)
            and len(load.runs) >= args.runs
        )
        if args.campaign == "concurrency":
            figures = {**measure(engine), "unacked_max_age_s": round(probe.max_age_s, 1)}
            result["concurrency"] = figures
            result["ok"] = result["ok"] and verdict(figures)
        result["table"] = format_table(report)
        return result
    finally:
        # A second Ctrl-C (or a SIGTERM) must not cut the clean-up short: that orphaned the
        # workers and the servers.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        if injectors is not None:
            injectors.halt()
        if supervisor is not None:
            supervisor.stop()
        redis.stop()
        postgres.stop(mode="immediate")
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.chaos", description=__doc__)
    ap.add_argument("--runs", type=int, default=300, help="runs to start (at least)")
    ap.add_argument("--faults-per-kind", type=int, default=50, help="faults of each kind")
    ap.add_argument("--seed", type=int, default=16)
    ap.add_argument("--rate", type=float, default=1.0, help="runs started per second")
    ap.add_argument("--max-in-flight", type=int, default=400)
    ap.add_argument("--max-load-s", type=float, default=420.0, help="hard cap on the load phase")
    ap.add_argument("--drain-s", type=float, default=150.0, help="how long to wait for settling")
    ap.add_argument(
        "--campaign",
        choices=["concurrency"],
        help="concurrency: hundreds in flight, every tool message 2-5 times, a 20 s Redis "
        "stall, a shared cap (bench.chaos.concurrency); defaults --runs 1000 --rate 25 "
        "--max-in-flight 320 --faults-per-kind 12 --min-fault-interval-s 8",
    )
    ap.add_argument(
        "--min-fault-interval-s",
        type=float,
        default=1.5,
        help="the shortest pause between two faults of one kind",
    )
    ap.add_argument("--keep", action="store_true", help="keep the temp folder (logs, data)")
    ap.add_argument("--quiet", action="store_true", help="no progress lines")
    ap.add_argument("--json", action="store_true", help="print a machine-readable report")
    args = ap.parse_args(argv)
    if args.campaign == "concurrency":
        given = set(argv if argv is not None else sys.argv[1:])
        for flag, value in (
            ("--runs", 1000),
            ("--rate", 25.0),
            ("--max-in-flight", 320),
            ("--faults-per-kind", 12),
            ("--min-fault-interval-s", 8.0),
        ):
            if flag not in given:
                setattr(args, flag[2:].replace("-", "_"), value)

    def _interrupt(*_: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, _interrupt)  # like Ctrl-C: through run_suite's clean-up
    try:
        result = run_suite(args)
    except KeyboardInterrupt:
        sys.stderr.write("chaos: interrupted; its workers and servers were stopped\n")
        return 130
    if args.json:
        out = {k: v for k, v in result.items() if k != "table"}
        sys.stdout.write(json.dumps(out, indent=2, default=str) + "\n")
    else:
        print(
            f"runs {result['runs']} {result['run_kinds']} in {result['duration_s']}s "
            f"(cancels {result['cancels_requested']}, confirmations {result['confirmations']})"
        )
        print(f"faults injected     {result['faults']}")
        print(f"  detail            {result['fault_detail']}")
        print(f"service faults      {result['service_faults']}")
        print(f"worker restarts     {result['worker_restarts']}")
        print(f"peak runs in flight {result['peak_in_flight']}")
        if "concurrency" in result:
            print(f"concurrency         {result['concurrency']}")
        print(result["table"])
        print("OK" if result["ok"] else "FAIL")
    return 0 if result["ok"] else 1
