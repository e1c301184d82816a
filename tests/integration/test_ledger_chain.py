"""The trace's hash chain on the real ledger: the trigger and :mod:`warrant.ledger.chain` agree
on every value, and ``warrant ledger verify`` names each edit, deletion and reordering made
directly in PostgreSQL, an intact run verifies clean, and a pruned run verifies against its
anchor and its archive (and again once restored)."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import threading
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
import pytest
from sqlalchemy import text
from warrant_demo import scenarios as sc

from warrant.ledger.chain import Break, check_run, jsonb_text, record_hash
from warrant.ledger.chain_store import read_chains
from warrant.runner.client import ledger_verify as lv
from warrant.runner.errors import LedgerTampered

pytestmark = [pytest.mark.services, pytest.mark.slow]

TRICKY: list[Any] = [
    [["run.created", {}]],
    [["x", {"é中😀": "ünï\u2028cödé 😀", "a": None, "bb": [None, True, False, [], {}]}]],
    [["x", {"ctl": '\x01\x1f\x7f "q" \\ / \b\f\n\r\t', "nested": {"z": {"y": [1, {"k": 2}]}}}]],
    [["x", {"big": 10**30, "neg": -(10**20), "f": 0.1, "tiny": 1e-07, "huge": 1.5e300}]],
    [["x", {"z": -0.0, "h": 100.0, "e": 2.5e-05, "n": 123456789.123, "i": 0, "m": -1}]],
    [["x", {"aaa": 1, "b": 2, "cc": 3, "B": 4, "Ä": 5, "ab": 6}], ["y", {"k": ""}]],
]


def warrant(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "warrant.runner.cli", *args],
        capture_output=True,
        text=True,
        timeout=300,
        env=dict(os.environ),
    )


def test_python_hash_equals_the_triggers_for_tricky_values(engine):
    at = datetime(2026, 12, 4, 13, 59, 58, 123456, tzinfo=UTC)
    with engine.connect() as conn:
        for i, events in enumerate(TRICKY):
            for pid in (None, "prop-é"):
                db_text, db_hash = conn.execute(
                    text(
                        "SELECT CAST(:e AS jsonb)::text, warrant_trace_hash(:p, :r, :s, :st,"
                        " :pid, :at, CAST(:e AS jsonb))"
                    ),
                    {
                        "e": json.dumps(events),
                        "p": "ab" * 32,
                        "r": "run-ü",
                        "s": 7 + i,
                        "st": 3,
                        "pid": pid,
                        "at": at,
                    },
                ).one()
                assert jsonb_text(events) == db_text
                ours = record_hash("ab" * 32, "run-ü", 7 + i, 3, pid, at, jsonb_text(events))
                assert ours == db_hash


def _runs(run_to_end, n: int) -> list[str]:
    spec = sc.spec([sc.search("p1"), sc.search("p2", "second query"), sc.final("A.", "tool-1")])
    ids = []
    for _ in range(n):
        info = run_to_end(spec)
        assert info.status == "completed", info
        ids.append(str(info.run_id))
    return ids


def _seqs(engine, run_id: str) -> list[int]:
    with engine.connect() as conn:
        q = "SELECT seq FROM trace_records WHERE run_id = :r ORDER BY seq"
        return list(conn.execute(text(q), {"r": run_id}).scalars())


def _tampered(run: str | None = None, **kw: Any) -> dict[str, Any]:
    with pytest.raises(LedgerTampered) as caught:
        lv.verify(kw.pop("engine"), run)
    return caught.value.found


def test_edit_delete_reorder_are_each_named(engine, client, worker, run_to_end):
    edited, deleted, tail, reordered, intact = _runs(run_to_end, 5)
    for rid in (edited, deleted, tail, reordered, intact):
        summary = lv.verify(engine, rid)
        assert summary["intact"] and summary["head"]["run_id"] == rid
        assert summary["records_checked"] == len(_seqs(engine, rid)) >= 4

    # (a) an edit, made and checked in a transaction that is rolled back
    target = _seqs(engine, edited)[2]
    with engine.connect() as conn, conn.begin() as tx:
        conn.execute(text("SET LOCAL session_replication_role = replica"))  # the UPDATE guard
        conn.execute(
            text(
                "UPDATE trace_records SET events = jsonb_set(events, '{0,1,forged}', 'true')"
                " WHERE run_id = :r AND seq = :s"
            ),
            {"r": edited, "s": target},
        )
        allocated, rows = read_chains(conn, [edited])[edited]
        found = check_run(edited, rows, allocated)
        assert isinstance(found, Break) and (found.seq, found.kind) == (target, "edited")
        tx.rollback()
    assert lv.verify(engine, edited)["intact"]
    # the same edit committed: the guard refuses it without the superuser's bypass
    with pytest.raises(Exception, match="append-only"), engine.begin() as conn:
        conn.execute(text("UPDATE trace_records SET step = 9 WHERE run_id = :r"), {"r": edited})
    with engine.begin() as conn:
        conn.execute(text("SET LOCAL session_replication_role = replica"))
        conn.execute(
            text("UPDATE trace_records SET step = step + 1 WHERE run_id = :r AND seq = :s"),
            {"r": edited, "s": target},
        )
    found = _tampered(edited, engine=engine)
    assert (found["run_id"], found["seq"], found["kind"]) == (edited, target, "edited")

    # (b) a record deleted in the middle, and one at the end
    seqs = b_seqs = _seqs(engine, deleted)
    with engine.begin() as conn:
        q = "DELETE FROM trace_records WHERE run_id = :r AND seq = :s"
        conn.execute(text(q), {"r": deleted, "s": seqs[1]})
        conn.execute(text(q), {"r": tail, "s": _seqs(engine, tail)[-1]})
    found = _tampered(deleted, engine=engine)
    assert (found["run_id"], found["seq"], found["kind"]) == (deleted, seqs[2], "deleted")
    found = _tampered(tail, engine=engine)
    assert (found["run_id"], found["kind"]) == (tail, "deleted")
    assert "missing at the end" in found["detail"]

    # (c) two records' places swapped
    seqs = _seqs(engine, reordered)
    with engine.begin() as conn:
        conn.execute(text("SET LOCAL session_replication_role = replica"))
        q = "UPDATE trace_records SET seq = :to WHERE run_id = :r AND seq = :s"
        conn.execute(text(q), {"r": reordered, "s": seqs[1], "to": -1})
        conn.execute(text(q), {"r": reordered, "s": seqs[2], "to": seqs[1]})
        conn.execute(text(q), {"r": reordered, "s": -1, "to": seqs[2]})
    found = _tampered(reordered, engine=engine)
    assert (found["run_id"], found["seq"], found["kind"]) == (reordered, seqs[1], "reordered")

    # (d) an intact run still verifies clean; the CLI names the break, exit 1
    ok = warrant("ledger", "verify", "--run", intact, "--json")
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert json.loads(ok.stdout)["intact"] is True
    bad = warrant("ledger", "verify", "--run", deleted[:8], "--json")
    assert bad.returncode == 1, bad.stdout + bad.stderr
    error = json.loads(bad.stdout)["error"]
    assert error["code"] == "LEDGER_TAMPERED"
    assert (error["run_id"], error["seq"], error["kind"]) == (deleted, b_seqs[2], "deleted")
    every = warrant("ledger", "verify", "--json")
    assert every.returncode == 1 and json.loads(every.stdout)["error"]["code"] == "LEDGER_TAMPERED"
    human = warrant("ledger", "verify", "--run", reordered)
    assert (
        human.returncode == 1 and "LEDGER_TAMPERED" in human.stderr and "reordered" in human.stderr
    )

    # the damaged runs gone (the test's own clean-up): the whole ledger verifies again
    with engine.begin() as conn:
        conn.execute(
            text("DELETE FROM runs WHERE id = ANY(:ids)"),
            {"ids": [edited, deleted, tail, reordered]},
        )
    every = warrant("ledger", "verify", "--json")
    assert every.returncode == 0, every.stdout + every.stderr
    assert json.loads(every.stdout)["runs_checked"] >= 1


def test_an_edited_decision_row_is_named_and_an_untouched_run_verifies(
    engine, client, worker, run_to_end
):
    """Design text B §17: the chain covers the decision rows. A run's ``outcomes``,
    ``proposals`` and ``commands`` rows edited in PostgreSQL are each named (table, key); an
    untouched run verifies clean with every row checked."""
    outcome_edited, proposal_edited, command_edited, intact = _runs(run_to_end, 4)
    for rid in (outcome_edited, proposal_edited, command_edited, intact):
        summary = lv.verify(engine, rid)
        assert summary["intact"] and summary["rows_unchecked"] == 0
        assert summary["rows_checked"] == 7  # three proposals, two commands, two outcomes
    with engine.begin() as conn:
        row = conn.execute(
            text(
                "UPDATE outcomes SET status = 'failed' WHERE id = (SELECT min(id) FROM outcomes"
                " WHERE run_id = :r AND status = 'succeeded') RETURNING id, command_id, attempt"
            ),
            {"r": outcome_edited},
        ).one()
        proposal = conn.execute(
            text(
                "UPDATE proposals SET raw = jsonb_set(raw, '{arguments,query}', '\"x\"')"
                " WHERE id = (SELECT min(id) FROM proposals WHERE run_id = :r)"
                " RETURNING id, step, branch"
            ),
            {"r": proposal_edited},
        ).one()
        command = conn.execute(
            text(
                'UPDATE commands SET arguments = \'{"query": "x"}\''
                " WHERE id = (SELECT id FROM commands WHERE run_id = :r ORDER BY step LIMIT 1)"
                " RETURNING id, step, branch"
            ),
            {"r": command_edited},
        ).one()
    found = _tampered(command_edited, engine=engine)  # what the tool was asked to do
    assert (found["table"], found["key"]) == (
        "commands",
        {"id": command.id, "step": command.step, "branch": command.branch},
    )
    found = _tampered(outcome_edited, engine=engine)
    assert (found["run_id"], found["kind"], found["table"]) == (
        outcome_edited,
        "row_edited",
        "outcomes",
    )
    assert found["key"] == {"id": row.id, "command_id": row.command_id, "attempt": row.attempt}
    found = _tampered(proposal_edited, engine=engine)
    assert (found["table"], found["key"]) == (
        "proposals",
        {"id": proposal.id, "step": proposal.step, "branch": proposal.branch},
    )
    bad = warrant("ledger", "verify", "--run", outcome_edited, "--json")
    assert bad.returncode == 1, bad.stdout + bad.stderr
    error = json.loads(bad.stdout)["error"]
    assert (error["code"], error["kind"], error["table"]) == (
        "LEDGER_TAMPERED",
        "row_edited",
        "outcomes",
    )
    assert error["key"]["id"] == row.id and f"outcomes row (id {row.id}" in error["message"]
    ok = warrant("ledger", "verify", "--run", intact, "--json")
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert json.loads(ok.stdout)["rows_checked"] == 7
    with engine.begin() as conn:  # the test's own clean-up: the whole ledger verifies again
        conn.execute(
            text("DELETE FROM runs WHERE id = ANY(:ids)"),
            {"ids": [outcome_edited, proposal_edited, command_edited]},
        )


def _rewrite(archive: Path, change: Any) -> Path:
    with gzip.open(archive) as f:
        records = [orjson.loads(line) for line in f.read().splitlines()]
    change(records)
    out = archive.with_name("edited-" + archive.name)
    out.write_bytes(gzip.compress(b"".join(orjson.dumps(r) + b"\n" for r in records)))
    return out


def test_a_pruned_run_verifies_against_its_anchor_and_archive(
    engine, client, run_to_end, worker, tmp_path: Path
):
    pruned, kept = _runs(run_to_end, 2)
    heads = {rid: lv.verify(engine, rid)["head"] for rid in (pruned, kept)}
    with engine.begin() as conn:
        conn.execute(
            text("UPDATE runs SET finished_at = now() - interval '700 days' WHERE id = :r"),
            {"r": pruned},
        )
    archive = tmp_path / "pruned.jsonl.gz"
    out = warrant("ledger", "prune", "--finished-before", "650d", "--archive", str(archive),
                  "--json")  # fmt: skip
    assert out.returncode == 0 and json.loads(out.stdout)["runs_pruned"] == 1, out.stdout
    with engine.connect() as conn:
        anchor = conn.execute(
            text("SELECT batch_id, heads, anchor_hash FROM ledger_anchors WHERE heads @> :h"),
            {"h": json.dumps([[pruned]])},
        ).one()
    head = heads[pruned]
    assert anchor.heads == [[pruned, head["last_seq"], head["hash"]]]

    whole = lv.verify(engine)  # the ledger: the kept run's chain, every anchor
    assert whole["intact"] and whole["anchors_checked"] >= 1 and whole["runs_pruned"] >= 1
    checked = warrant("ledger", "verify", "--archive", str(archive), "--json")
    assert checked.returncode == 0, checked.stdout + checked.stderr
    summary = json.loads(checked.stdout)
    assert (summary["runs_checked"], summary["anchors_checked"]) == (1, 1)

    def edit(records: list[dict[str, Any]]) -> None:
        row = records[0]["tables"]["trace_records"][1]  # events: their exact jsonb text
        row["events"] = row["events"].replace("{", '{"forged": 1, ', 1)

    with pytest.raises(LedgerTampered) as caught:
        lv.verify_archive(engine, _rewrite(archive, edit))
    assert (caught.value.found["run_id"], caught.value.found["kind"]) == (pruned, "edited")

    def drop(records: list[dict[str, Any]]) -> None:
        del records[0]["tables"]["trace_records"][-1]

    with pytest.raises(LedgerTampered) as caught:
        lv.verify_archive(engine, _rewrite(archive, drop))
    assert caught.value.found["kind"] == "deleted"

    # an anchor row edited by hand: the whole-ledger verify names its batch
    with engine.begin() as conn:
        conn.execute(text("SET LOCAL session_replication_role = replica"))
        conn.execute(
            text("UPDATE ledger_anchors SET heads = '[]' WHERE batch_id = :b"),
            {"b": anchor.batch_id},
        )
    found = _tampered(engine=engine)
    assert (found["kind"], found["batch_id"]) == ("anchor_mismatch", anchor.batch_id)
    with engine.begin() as conn:
        conn.execute(text("SET LOCAL session_replication_role = replica"))
        conn.execute(
            text("UPDATE ledger_anchors SET heads = CAST(:h AS jsonb) WHERE batch_id = :b"),
            {"b": anchor.batch_id, "h": json.dumps(anchor.heads)},
        )
    assert lv.verify(engine)["intact"]
    # the anchor row deleted: the archive's batch has none in the ledger
    with engine.begin() as conn:
        kept_row = conn.execute(
            text("DELETE FROM ledger_anchors WHERE batch_id = :b RETURNING *"),
            {"b": anchor.batch_id},
        ).one()
    with pytest.raises(LedgerTampered) as caught:
        lv.verify_archive(engine, archive)
    assert (caught.value.found["kind"], caught.value.found["batch_id"]) == (
        "anchor_missing",
        anchor.batch_id,
    )
    with engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO ledger_anchors (batch_id, created_at, runs, heads, anchor_hash)"
                " VALUES (:batch_id, :created_at, :runs, CAST(:heads AS jsonb), :anchor_hash)"
            ),
            {**kept_row._mapping, "heads": json.dumps(kept_row.heads)},
        )
    assert lv.verify_archive(engine, archive)["intact"]

    # restored, the run's chain is rebuilt by the trigger to the very same head
    assert warrant("ledger", "restore", str(archive), "--json").returncode == 0
    assert lv.verify(engine, pruned)["head"] == head
    assert lv.verify(engine, kept)["head"] == heads[kept]
    with engine.begin() as conn:  # leave no aged run behind for another test's prune
        conn.execute(text("UPDATE runs SET finished_at = now() WHERE id = :r"), {"r": pruned})


def test_concurrent_appends_to_one_run_keep_one_chain(engine, run_to_end):
    """Writers racing on one run are serialised by its row (``trace_seq``): the trigger's
    look-up of the previous record always sees the last committed one."""
    from sqlalchemy.orm import Session

    from warrant.ledger.repo import append_events

    (rid,) = _runs(run_to_end, 1)
    before = lv.verify(engine, rid)["records_checked"]

    def writer(k: int) -> None:
        for i in range(60):
            with Session(engine) as s, s.begin():
                append_events(s, rid, [("test.raced", {"k": k, "i": i})] * (1 + i % 2), step=9)

    threads = [threading.Thread(target=writer, args=(k,)) for k in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    summary = lv.verify(engine, rid)
    assert summary["intact"] and summary["records_checked"] == before + 180
