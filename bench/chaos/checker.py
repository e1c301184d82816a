"""The chaos checker: what the ledger says against what the external systems did.

Usable alone on any ledger and demo-service database::

    python -m bench.chaos.checker --database-url postgresql://... [--service-url ...] [--json]

Categories (the first four are failures, exit status 1):

``lost``        a run neither terminal nor waiting for a person (``running``, ``cancelling``,
                ``reconciling``) at the end
``duplicated``  one logical action (same run, same tool and arguments) applied more than once
                in the service's tables
``unexpected``  the ledger and the service disagree about an effect: the final verdict of a
                command (``final_mismatch``), an ``unknown`` recorded while the attempt was in
                fact still running and then applied (``premature_unknown``), a ``not_applied``
                resolution while the effect was there or an attempt was still in flight
                (``wrong_not_applied`` / ``premature_not_applied``), an effect no command of
                the ledger explains (``orphan_effect``)
``unresolved``  an ``unknown`` outcome without resolution, or a command still ``started``
                with no outcome
``handoffs``    runs handed to a person (reported, not a failure)
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import Engine, create_engine, inspect, text

from bench.chaos.batch_check import check_batches

__all__ = ["Effect", "Finding", "Report", "check", "main"]

LIVE_STATUSES = ("running", "cancelling", "reconciling", "waiting_job")
WAITING_STATUSES = ("waiting_confirmation", "handoff")
FAILING = ("lost", "duplicated", "unexpected", "unresolved")

#: Tools whose effect the checker can see: tool -> (database, table, token column, logical
#: columns). ``service`` tables live in the service database, ``ledger`` ones in the ledger.
EFFECT_TABLES: dict[str, tuple[str, str, str, tuple[str, ...]]] = {
    "issue_refund": ("service", "demo_refunds", "idempotency_key", ("order_id",)),
    "save_draft": ("service", "demo_drafts", "idempotency_key", ("draft_id",)),
    "save_preference": ("ledger", "memory_records", "idempotency_token", ("subject", "key")),
    "write_artifact": ("ledger", "artifacts", "idempotency_token", ("run_id", "path")),
    "refund_async": ("service", "demo_refund_jobs", "idempotency_key", ("order_id",)),
}
#: Rows of an effect table that are effects (a refund job is one once it has settled).
EFFECT_WHERE = {"demo_refund_jobs": "status = 'settled'"}


@dataclass(frozen=True)
class Effect:
    token: str
    created_at: datetime
    logical: tuple[Any, ...]


@dataclass
class Finding:
    category: str
    kind: str
    run_id: str | None
    detail: dict[str, Any] = field(default_factory=dict)


@dataclass
class Report:
    runs: int = 0
    statuses: dict[str, int] = field(default_factory=dict)
    commands_checked: int = 0
    effects_seen: int = 0
    findings: list[Finding] = field(default_factory=list)

    def count(self, category: str) -> int:
        return sum(1 for f in self.findings if f.category == category)

    @property
    def ok(self) -> bool:
        return all(self.count(c) == 0 for c in FAILING)

    def to_dict(self) -> dict[str, Any]:
        return {
            "runs": self.runs,
            "statuses": self.statuses,
            "commands_checked": self.commands_checked,
            "effects_seen": self.effects_seen,
            "counts": {c: self.count(c) for c in (*FAILING, "handoffs", "waiting")},
            "ok": self.ok,
            "findings": [asdict(f) for f in self.findings],
        }


def _effects(engine: Engine, table: str, token_col: str, logical: tuple[str, ...]) -> list[Effect]:
    if not inspect(engine).has_table(table):
        return []
    cols = ", ".join(logical)
    with engine.connect() as conn:
        where = f" WHERE {EFFECT_WHERE[table]}" if table in EFFECT_WHERE else ""
        q = f"SELECT {token_col}, created_at, {cols} FROM {table}{where}"
        rows = conn.execute(text(q)).all()
    return [Effect(r[0], r[1], tuple(r[2:])) for r in rows if r[0] is not None]


def _calls(engine: Engine) -> dict[str, list[datetime]]:
    """When each call with an idempotency key started (the demo service logs every call)."""
    out: dict[str, list[datetime]] = defaultdict(list)
    if not inspect(engine).has_table("demo_calls"):
        return out
    with engine.connect() as conn:
        q = "SELECT idempotency_key, created_at FROM demo_calls WHERE idempotency_key IS NOT NULL"
        for key, at in conn.execute(text(q)):
            out[key].append(at)
    for v in out.values():
        v.sort()
    return out


def _made_by_earlier_call(
    effect: Effect, calls: list[datetime], decided_at: datetime | None
) -> bool:
    """Was ``effect`` created after ``decided_at`` by a call that had started before it (no
    call of that token started between the decision and the effect)?"""
    if decided_at is None or effect.created_at <= decided_at:
        return False
    before = any(c < decided_at for c in calls)
    between = any(decided_at < c <= effect.created_at for c in calls)
    return before and not between


def _verdict(cmd: Any, outcomes: list[Any]) -> str:
    """The ledger's final word on a command: applied, not_applied, handoff, unresolved."""
    if not outcomes:
        return "unresolved" if cmd.status == "started" else "not_applied"
    last = outcomes[-1]
    if cmd.status == "started" and last.status != "unknown":
        # a newer attempt started after the last recorded outcome and never finished
        return "unresolved"
    if last.status == "succeeded":
        return "applied"
    if last.status in ("failed", "rejected"):
        return "not_applied"
    if last.status == "accepted":  # a long-running tool's job: how it ended
        return {"succeeded": "applied", "failed": "not_applied", "handoff": "handoff"}.get(
            last.resolved_status or "", "unresolved"
        )
    return {"applied": "applied", "not_applied": "not_applied", "handoff": "handoff"}.get(
        last.resolved_status or "", "unresolved"
    )


def check(
    ledger: Engine, service: Engine | None = None, *, run_ids: set[str] | None = None
) -> Report:
    service = service or ledger
    report = Report()
    with ledger.connect() as conn:
        runs = conn.execute(text("SELECT id, status, stop_reason, created_at FROM runs")).all()
        commands = conn.execute(
            text(
                "SELECT id, run_id, step, tool, arguments_hash, idempotency_token, status, "
                "attempts, arguments FROM commands"
            )
        ).all()
        outcomes = conn.execute(
            text(
                "SELECT id, command_id, run_id, status, code, attempt, resolved_status, "
                "resolved_at, created_at, output FROM outcomes ORDER BY command_id, attempt, id"
            )
        ).all()
    if run_ids is not None:
        runs = [r for r in runs if r.id in run_ids]
        commands = [c for c in commands if c.run_id in run_ids]
        outcomes = [o for o in outcomes if o.run_id in run_ids]
    report.runs = len(runs)
    statuses: dict[str, int] = defaultdict(int)
    for r in runs:
        statuses[r.status] += 1
        if r.status in LIVE_STATUSES:
            report.findings.append(Finding("lost", r.status, r.id, {"stop_reason": r.stop_reason}))
        elif r.status == "handoff":
            report.findings.append(Finding("handoffs", "open", r.id, {"reason": r.stop_reason}))
        elif r.status == "waiting_confirmation":
            report.findings.append(Finding("waiting", "confirmation", r.id, {}))
    report.statuses = dict(sorted(statuses.items()))

    by_cmd: dict[str, list[Any]] = defaultdict(list)
    for o in outcomes:
        by_cmd[o.command_id].append(o)
    calls = _calls(service)
    effects: dict[str, Effect] = {}
    all_effects: dict[str, list[Effect]] = {}
    for tool, (where, table, token_col, logical) in EFFECT_TABLES.items():
        found = _effects(service if where == "service" else ledger, table, token_col, logical)
        all_effects[tool] = found
        effects.update({e.token: e for e in found})
    report.effects_seen = sum(len(v) for v in all_effects.values())

    tokens_of_commands: set[str] = set()
    for cmd in commands:
        tokens_of_commands.add(cmd.idempotency_token)
        outs = by_cmd.get(cmd.id, [])
        if cmd.status == "started" and (not outs or outs[-1].attempt < cmd.attempts):
            report.findings.append(
                Finding(
                    "unresolved",
                    "started_without_outcome",
                    cmd.run_id,
                    {"command_id": cmd.id, "tool": cmd.tool, "attempts": cmd.attempts},
                )
            )
        for o in outs:
            if o.status in ("unknown", "accepted") and o.resolved_status is None:
                report.findings.append(
                    Finding(
                        "unresolved",
                        "unknown",
                        cmd.run_id,
                        {"command_id": cmd.id, "tool": cmd.tool, "code": o.code},
                    )
                )
        if cmd.tool not in EFFECT_TABLES:
            continue
        report.commands_checked += 1
        effect = effects.get(cmd.idempotency_token)
        verdict = _verdict(cmd, outs)
        base = {
            "command_id": cmd.id,
            "tool": cmd.tool,
            "step": cmd.step,
            "command_status": cmd.status,
            "attempts": cmd.attempts,
            "outcomes": [
                f"{o.attempt}:{o.status}{'/' + o.code if o.code else ''}"
                f"{'->' + o.resolved_status if o.resolved_status else ''}"
                for o in outs
            ],
            "effect_at": effect.created_at.isoformat() if effect else None,
        }
        if verdict in ("applied", "not_applied") and (verdict == "applied") != (effect is not None):
            report.findings.append(
                Finding(
                    "unexpected",
                    "final_mismatch",
                    cmd.run_id,
                    {**base, "ledger": verdict, "service": "applied" if effect else "absent"},
                )
            )
        token_calls = calls.get(cmd.idempotency_token, [])
        for o in outs:
            if effect is None:
                break
            if o.status == "unknown" and _made_by_earlier_call(effect, token_calls, o.created_at):
                report.findings.append(
                    Finding(
                        "unexpected",
                        "premature_unknown",
                        cmd.run_id,
                        {**base, "unknown_at": o.created_at.isoformat(), "code": o.code},
                    )
                )
            if o.resolved_status == "not_applied":
                if effect.created_at <= o.resolved_at:
                    kind = "wrong_not_applied"
                elif _made_by_earlier_call(effect, token_calls, o.resolved_at):
                    kind = "premature_not_applied"
                else:
                    continue
                report.findings.append(
                    Finding(
                        "unexpected",
                        kind,
                        cmd.run_id,
                        {**base, "resolved_at": o.resolved_at.isoformat()},
                    )
                )

    for category, kind, run_id, detail in check_batches(service, commands, by_cmd, run_ids=run_ids):
        report.findings.append(Finding(category, kind, run_id, detail))
    # duplicated: one logical action (run, tool, arguments) with more than one effect
    cmd_by_token: dict[str, Any] = {c.idempotency_token: c for c in commands}
    for tool, found in all_effects.items():
        groups: dict[tuple[Any, ...], list[Effect]] = defaultdict(list)
        for e in found:
            groups[e.logical].append(e)
        for logical, group in groups.items():
            owners = [cmd_by_token.get(e.token) for e in group]
            if run_ids is not None and not any(o is not None for o in owners):
                continue
            keyed: dict[tuple[str, str], int] = defaultdict(int)
            for owner in owners:
                if owner is not None:
                    keyed[(owner.run_id, owner.arguments_hash)] += 1
            for (run_id, _), n in keyed.items():
                if n > 1:
                    report.findings.append(
                        Finding(
                            "duplicated",
                            tool,
                            run_id,
                            {"logical": list(map(str, logical)), "effects": n},
                        )
                    )
            for e, owner in zip(group, owners, strict=True):
                if owner is None and run_ids is None:
                    report.findings.append(
                        Finding(
                            "unexpected",
                            "orphan_effect",
                            None,
                            {"tool": tool, "token": e.token, "logical": list(map(str, logical))},
                        )
                    )
    return report


def format_table(report: Report) -> str:
    lines = [
        f"runs checked        {report.runs}",
        f"statuses            {json.dumps(report.statuses)}",
        f"commands checked    {report.commands_checked} (effects seen {report.effects_seen})",
    ]
    for c in (*FAILING, "handoffs", "waiting"):
        mark = " <-- FAIL" if c in FAILING and report.count(c) else ""
        lines.append(f"{c:<19} {report.count(c)}{mark}")
    shown = [f for f in report.findings if f.category in FAILING]
    for f in shown[:40]:
        lines.append(f"  {f.category}/{f.kind} run={f.run_id} {json.dumps(f.detail, default=str)}")
    if len(shown) > 40:
        lines.append(f"  ... {len(shown) - 40} more (see --json)")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.chaos.checker", description=__doc__)
    ap.add_argument("--database-url", required=True, help="the ledger (postgresql://...)")
    ap.add_argument("--service-url", help="the demo service's database (default: the ledger)")
    ap.add_argument("--json", action="store_true", help="print a machine-readable report")
    args = ap.parse_args(argv)

    def eng(url: str) -> Engine:
        return create_engine(url.replace("postgresql://", "postgresql+psycopg://", 1))

    ledger = eng(args.database_url)
    report = check(ledger, eng(args.service_url) if args.service_url else None)
    if args.json:
        sys.stdout.write(json.dumps(report.to_dict(), indent=2, default=str) + "\n")
    else:
        sys.stdout.write(format_table(report) + "\n")
    return 0 if report.ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
