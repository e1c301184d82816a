"""The multi-host fault suite: ``make chaos-hosts`` (``python -m bench.chaos_hosts``).

    python -m bench.chaos_hosts [--short] [--only NAME,...] [--json]

Builds a lab (``tests.hosts.Lab``, root only): an ``infra`` host with Redis and PostgreSQL, a
``control`` host (planner, policy, reconciler, beat), two tool hosts ``tool-a`` and ``tool-b``
(one tool worker each, each in its own pid namespace with its own host name) and a
``producer`` host that starts the runs and checks the ledger (``bench.chaos_hosts.driver``).
Each scenario gets a database and a Redis database of its own and fresh workers; it starts
refund runs whose calls are slow, waits until a write is in flight, injects its fault, and
counts what the driver's checker finds: lost, duplicated, unexpected, unresolved, spurious
handoffs, runs not settled within the bound, and attempts that outlived their lease.
``--short`` runs the scenarios CI runs (tests/integration/test_chaos_hosts.py).
"""

from __future__ import annotations

import argparse
import json
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.chaos_hosts import net
from tests.hosts import REDIS_PORT, Lab

HOSTS = ("control", "tool-a", "tool-b", "producer")
TOOL_HOSTS = ("tool-a", "tool-b")
CLI = [sys.executable, "-m", "warrant.runner.cli"]
COUNTED = (
    "lost",
    "duplicated",
    "unexpected",
    "unresolved",
    "spurious_handoffs",
    "unsettled",
    "outlived_lease",
    "failed",  # no service fault is injected: every refund run should complete
)
#: The settings of every process of a scenario (the chaos suite's, with a short stall).
SCENARIO_ENV = {
    "WARRANT_TOOLS": "warrant_demo:plugin",
    "WARRANT_RELAX_CONFIRMATION": "issue_refund",  # nobody confirms in the lab
    "WARRANT_RECONCILE_INTERVAL_S": "1",
    "WARRANT_STALL_AFTER_S": "2",
    "WARRANT_LEASE_MARGIN_S": "2",
    "WARRANT_VISIBILITY_TIMEOUT_S": "60",
    "WARRANT_TASK_EVENTS": "0",
}


@dataclass
class Round:
    """One scenario's processes and addresses."""

    lab: Lab
    index: int
    env: dict[str, str]
    workers: dict[str, list[subprocess.Popen[Any]]] = field(default_factory=dict)
    holders: list[str] = field(default_factory=list)
    """The lab hosts whose tool workers held an attempt when the fault came."""
    fenced_exits: int = 0
    """Tool workers found exited after a cut (and started again)."""
    builds: dict[str, str] = field(default_factory=dict)
    """``WARRANT_TOOLS`` per host, where a scenario sets it (a rolling upgrade's builds)."""

    def spawn_tool(
        self, host: str, *, hostname: str | None = None, skew: str = "", tools: str = ""
    ) -> None:
        argv = [*CLI, "worker", "--role", "tool", "--concurrency", "2", "--loglevel", "info"]
        env = {**self.lab.env(host), **self.env}
        env |= {"WARRANT_TOOLS": tools} if tools else _build_env(self, host)
        if skew:  # libfaketime preloaded: this host's clocks, all moved by the same offset
            # (monotonic too: with it left alone, libfaketime turns an absolute sleep into an
            # invalid one). Not the faketime wrapper: its semaphore is named by pid, and two
            # hosts with their own pid namespaces have the same pids.
            libs = sorted(Path("/usr/lib").glob("*/faketime/libfaketime.so.1"))
            if not libs:
                raise RuntimeError("libfaketime is not installed (apt-get install faketime)")
            env |= {
                "LD_PRELOAD": str(libs[0]),
                "FAKETIME": skew,
                "FAKETIME_DONT_RESET": "1",
            }
        proc = self.lab.spawn(
            host, argv, label=f"s{self.index}-{host}", env=env, hostname=hostname or host
        )
        self.workers.setdefault(host, []).append(proc)

    def restart_exited(self, host: str) -> None:
        """What a host's supervisor (systemd, compose's restart policy, ``warrant up``) does for
        a tool worker that ended itself during the fault: a threads-pool worker that could not
        renew its attempts' leases exits (``broker.tool._attempt_watch``'s fence); start it
        again."""
        exited = [p for p in self.workers.get(host, []) if p.poll() is not None]
        if exited:
            self.fenced_exits += len(exited)
            self.workers[host] = [p for p in self.workers[host] if p not in exited]
            self.spawn_tool(host)

    def spawn_control(self) -> None:
        env = {**self.lab.env("control"), **self.env}
        env |= _build_env(self, "control")
        for role in ("planner", "policy", "reconciler"):
            argv = [*CLI, "worker", "--role", role, "--loglevel", "info"]
            proc = self.lab.spawn(
                "control", argv, label=f"s{self.index}-{role}", env=env, own_pids=False
            )
            self.workers.setdefault("control", []).append(proc)
        beat = self.lab.spawn(
            "control", [*CLI, "beat"], label=f"s{self.index}-beat", env=env, own_pids=False
        )
        self.workers["control"].append(beat)

    def stop(self) -> None:
        for host in self.workers:
            net.heal(self.lab, host)
            net.kill_host(self.lab, host)
        for procs in self.workers.values():
            for proc in procs:
                self.lab.stop(proc, timeout=10)


@dataclass(frozen=True)
class Scenario:
    name: str
    fault: Callable[[Round], None]
    short: bool = False
    twins: bool = False
    skew_b: str = ""
    runs: int = 4
    slow_s: float = 3.0
    versions: str = "1"
    """The ``issue_refund`` versions the runs propose, in turn."""
    builds: tuple[tuple[str, str], ...] = ()
    """(host, ``WARRANT_TOOLS``) where a host runs another build than the demo's."""


def _cut_holders(seconds: float, *, port: int | None = None) -> Callable[[Round], None]:
    def fault(r: Round) -> None:
        for host in r.holders:
            net.cut(r.lab, host, port=port)
        time.sleep(seconds)  # the fault's length, not a wait for a condition
        for host in r.holders:
            net.heal(r.lab, host)
            r.restart_exited(host)

    return fault


def _cut_control(seconds: float) -> Callable[[Round], None]:
    def fault(r: Round) -> None:
        net.cut(r.lab, "control")
        time.sleep(seconds)
        net.heal(r.lab, "control")

    return fault


def _kill_holders(*, power_off: bool) -> Callable[[Round], None]:
    """SIGKILL the holders' processes (``power_off``: their packets dropped first, so no
    reset reaches a peer), then bring each host's worker back, as a reboot would."""

    def fault(r: Round) -> None:
        for host in r.holders:
            if power_off:
                net.cut(r.lab, host)
            net.kill_host(r.lab, host)
        time.sleep(10.0 if power_off else 3.0)
        for host in r.holders:
            net.heal(r.lab, host)
            r.spawn_tool(host)

    return fault


_OLD_BUILD = "warrant_demo:plugin"  # issue_refund 1
_NEW_BUILD = "bench.chaos_hosts.upgrade:v2_only"
_BOTH = "bench.chaos_hosts.upgrade:both"


def _upgrade_holders(r: Round) -> None:
    """The rolling upgrade's next step, mid-write: each holder's worker is stopped (a warm
    shutdown: its attempt finishes first) and started again on the build that serves both
    versions, while the other host keeps serving version 2 only."""
    for host in r.holders:
        for proc in r.workers.pop(host, []):
            r.lab.stop(proc, timeout=60)
        r.spawn_tool(host, tools=_BOTH)


def _nothing(r: Round) -> None:
    """No fault: the stall sweep's re-deliveries alone test who may take over an attempt."""


SCENARIOS = (
    Scenario("tool-host-cut-5s", _cut_holders(5), short=True),
    Scenario("tool-host-cut-30s", _cut_holders(30)),
    Scenario("tool-host-cut-past-lease", _cut_holders(20)),
    Scenario("broker-only-cut-20s", _cut_holders(20, port=REDIS_PORT)),
    Scenario("control-host-cut-10s", _cut_control(10)),
    Scenario("tool-host-killed", _kill_holders(power_off=False), short=True),
    Scenario("tool-host-powered-off", _kill_holders(power_off=True)),
    Scenario("clock-ahead-120s", _nothing, skew_b="+120s"),
    Scenario("clock-behind-120s", _nothing, skew_b="-120s"),
    Scenario("two-hosts-one-hostname", _nothing, twins=True, short=True),
    # tool-a runs the old build (refund 1), tool-b a new one (refund 2 only); runs propose 1
    # and 2 in turn, so tool-b is handed commands for 1 it must leave for a capable worker
    Scenario(
        "rolling-upgrade",
        _upgrade_holders,
        runs=6,
        versions="1,2",
        builds=(
            ("control", _BOTH),
            ("producer", _BOTH),
            ("tool-a", _OLD_BUILD),
            ("tool-b", _NEW_BUILD),
        ),
    ),
)


def _prepare(lab: Lab, index: int) -> dict[str, str]:
    database = lab.database_url.rsplit("/", 1)[0] + f"/scenario{index}"
    env = {
        **SCENARIO_ENV,
        "WARRANT_DATABASE_URL": database,
        "WARRANT_BROKER_URL": lab.broker_url.rsplit("/", 1)[0] + f"/{index % 16}",
    }
    create = "from tests.services import ensure_database; import sys; ensure_database(sys.argv[1])"
    steps = [[sys.executable, "-c", create, database], [*CLI, "db", "upgrade", "--json"]]
    for argv in steps:
        done = subprocess.run(
            lab.command("producer", argv, own_pids=False),
            env={**lab.env("producer"), **env},
            capture_output=True,
            text=True,
            timeout=180,
        )
        if done.returncode:
            raise RuntimeError(f"{argv[-1]}: {done.stderr[-1500:]}")
    return env


def _ready(r: Round, *, timeout: float = 120) -> None:
    """Until the tool workers and the control roles are registered."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        done = subprocess.run(
            r.lab.command("producer", [*CLI, "tools", "check", "--json"], own_pids=False),
            env={**r.lab.env("producer"), **r.env},
            capture_output=True,
            text=True,
            timeout=60,
        )
        try:
            workers = json.loads(done.stdout)["workers"]
        except (ValueError, KeyError):
            workers = []
        roles = [role for w in workers for role in w["roles"]]
        if roles.count("tool") >= 2 and {"planner", "policy", "reconciler"} <= set(roles):
            return
        time.sleep(1.0)
    raise TimeoutError(f"scenario {r.index}: workers not registered after {timeout}s")


def _build_env(r: Round, host: str) -> dict[str, str]:
    return {"WARRANT_TOOLS": r.builds[host]} if host in r.builds else {}


def run_scenario(lab: Lab, index: int, scenario: Scenario, *, bound: float) -> dict[str, Any]:
    r = Round(lab, index, _prepare(lab, index), builds=dict(scenario.builds))
    started = time.monotonic()
    try:
        r.spawn_control()
        twin = "twin" if scenario.twins else None
        r.spawn_tool("tool-a", hostname=twin)
        r.spawn_tool("tool-b", hostname=twin, skew=scenario.skew_b)
        _ready(r)
        driver = subprocess.Popen(
            lab.command(
                "producer",
                [sys.executable, "-m", "bench.chaos_hosts.driver", "--runs", str(scenario.runs),
                 "--slow", str(scenario.slow_s), "--bound", str(bound),
                 "--versions", scenario.versions],
                own_pids=False,
            ),
            env={**lab.env("producer"), **r.env, **_build_env(r, "producer")},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )  # fmt: skip
        assert driver.stdout is not None
        result: dict[str, Any] | None = None
        for line in driver.stdout:
            if line.startswith("inflight"):
                nodes = line.split()[2:] if len(line.split()) > 2 else []
                r.holders = sorted({h for h in TOOL_HOSTS if any(h in n for n in nodes)}) or [
                    "tool-a"
                ]
                scenario.fault(r)
            elif line.startswith("{"):
                result = json.loads(line)
        driver.wait(60)
        if result is None:
            err = driver.stderr.read() if driver.stderr else ""
            raise RuntimeError(f"{scenario.name}: the driver printed no report: {err[-1500:]}")
        return {
            "scenario": scenario.name,
            **result,
            "holders": r.holders,
            "fenced_exits": r.fenced_exits,
            "seconds": round(time.monotonic() - started, 1),
        }
    finally:
        r.stop()


def _table(rows: list[dict[str, Any]]) -> str:
    head = ["scenario", *COUNTED, "completed", "write_in_flight", "redirected", "settle_max_s"]
    lines = [" | ".join(head), " | ".join("---" for _ in head)]
    for row in rows:
        lines.append(" | ".join(str(row.get(k, "-")) for k in head))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.chaos_hosts", description=__doc__)
    ap.add_argument("--short", action="store_true", help="the scenarios CI runs")
    ap.add_argument("--only", default="", help="comma-separated scenario names")
    ap.add_argument("--bound", type=float, default=150.0, help="seconds a round may take")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--keep", action="store_true", help="keep the lab's folder (logs, data)")
    args = ap.parse_args(argv)
    wanted = {n for n in args.only.split(",") if n}
    chosen = [
        s
        for s in SCENARIOS
        if (not wanted or s.name in wanted) and (s.short or not args.short or wanted)
    ]

    def _interrupt(*_: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, _interrupt)  # like Ctrl-C: the lab is taken down
    lab = Lab(list(HOSTS), keep=args.keep)
    rows = []
    try:
        for index, scenario in enumerate(chosen, start=1):
            sys.stderr.write(f"[chaos-hosts] {scenario.name} …\n")
            rows.append(run_scenario(lab, index, scenario, bound=args.bound))
            sys.stderr.write(f"[chaos-hosts] {json.dumps(rows[-1])}\n")
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        lab.close()
        if args.keep:
            sys.stderr.write(f"[chaos-hosts] logs and data kept in {lab.root}\n")
    ok = all(row[k] == 0 for row in rows for k in COUNTED) and all(
        row["write_in_flight"] for row in rows
    )
    if args.json:
        print(json.dumps({"ok": ok, "scenarios": rows}, indent=2))
    else:
        print(_table(rows))
        print("OK" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
