"""Retention without services: the cutoff, the archive file, and the decision per table."""

from __future__ import annotations

import gzip
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from warrant.ledger import retention as ledger_retention
from warrant.runner.client.retention import ArchiveWriter, parse_cutoff, read_archive
from warrant.runner.errors import InvalidRequest

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def test_every_table_with_a_run_foreign_key_has_a_decision():
    owned = {t.name for t in ledger_retention.OWNED}
    assert ledger_retention.tables_referencing_runs() == owned
    assert not owned & set(ledger_retention.KEPT)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("30d", NOW - timedelta(days=30)),
        ("12h", NOW - timedelta(hours=12)),
        ("2w", NOW - timedelta(weeks=2)),
        ("2026-11-01", datetime(2026, 11, 1, tzinfo=UTC)),
        ("2026-11-01T10:30:00", datetime(2026, 11, 1, 10, 30, tzinfo=UTC)),
        ("2026-11-01T10:30:00+02:00", datetime(2026, 11, 1, 8, 30, tzinfo=UTC)),
    ],
)
def test_cutoff(text, expected):
    assert parse_cutoff(text, now=NOW) == expected


@pytest.mark.parametrize("text", ["yesterday", "2026-13-01", "30x", "", "-3d"])
def test_bad_cutoff_is_invalid_date(text):
    with pytest.raises(InvalidRequest) as caught:
        parse_cutoff(text, now=NOW)
    assert caught.value.code == "INVALID_DATE"


def test_archive_batches_are_gzip_members_read_back_in_order(tmp_path: Path):
    path = tmp_path / "a.jsonl.gz"
    with ArchiveWriter(path) as w:
        w.write([{"run_id": "a", "tables": {}}, {"run_id": "b", "tables": {}}])
    with ArchiveWriter(path) as w:  # a later prune appends
        w.write([{"run_id": "c", "tables": {"runs": [{"id": "c"}]}}])
    assert [r["run_id"] for r in read_archive(path)] == ["a", "b", "c"]
    assert len(gzip.decompress(path.read_bytes()).splitlines()) == 3  # one valid gzip file


def test_torn_last_batch_ends_the_archive(tmp_path: Path):
    path = tmp_path / "a.jsonl.gz"
    with ArchiveWriter(path) as w:
        w.write([{"run_id": "a", "tables": {}}])
        w.write([{"run_id": f"r{i}", "tables": {}} for i in range(50)])
    data = path.read_bytes()
    path.write_bytes(data[: len(data) - 20])  # a crash while writing the second batch
    truncated = [False]
    got = [r["run_id"] for r in read_archive(path, truncated=truncated)]
    assert got[0] == "a" and truncated == [True]


def test_unwritable_and_unreadable_archives(tmp_path: Path):
    with pytest.raises(InvalidRequest) as caught:
        ArchiveWriter(tmp_path / "missing" / "a.gz")
    assert caught.value.code == "ARCHIVE_UNWRITABLE"
    with pytest.raises(InvalidRequest) as caught:
        list(read_archive(tmp_path / "none.gz"))
    assert caught.value.code == "ARCHIVE_UNREADABLE"
    (tmp_path / "plain.txt").write_text("not gzip\n")
    with pytest.raises(InvalidRequest) as caught:
        list(read_archive(tmp_path / "plain.txt"))
    assert caught.value.code == "ARCHIVE_INVALID"


def test_decode_restores_timestamps_and_refuses_unknown_columns():
    stamp = "2026-11-01T10:30:00.123456+00:00"
    record = {"run_id": "r", "tables": {"runs": [{"id": "r", "finished_at": stamp}]}}
    row = ledger_retention.decode_record(record)["tables"]["runs"][0]
    assert row["finished_at"] == datetime.fromisoformat(stamp) and row["id"] == "r"
    with pytest.raises(KeyError):
        ledger_retention.decode_record({"run_id": "r", "tables": {"runs": [{"nope": 1}]}})


def test_an_archive_from_before_trace_records_is_read_as_records():
    """Archives written before migration 0013 hold ``trace_events`` rows: each is restored as
    a record of one event, its number and time kept."""
    at = "2026-11-01T10:30:00+00:00"
    old = {
        "run_id": "r1",
        "tables": {
            "runs": [{"id": "r1", "created_at": at}],
            "trace_events": [
                {"run_id": "r1", "seq": 1, "event": "run.created", "step": 0,
                 "proposal_id": None, "details": {"goal": "g"}, "created_at": at},
                {"run_id": "r1", "seq": 2, "event": "proposal.received", "step": 1,
                 "proposal_id": "p1", "details": {}, "created_at": at},
            ],
        },
    }  # fmt: skip
    decoded = ledger_retention.decode_record(old)
    assert "trace_events" not in decoded["tables"]
    assert decoded["tables"]["trace_records"] == [
        {"run_id": "r1", "seq": 1, "step": 0, "proposal_id": None,
         "events": [["run.created", {"goal": "g"}]], "created_at": datetime.fromisoformat(at)},
        {"run_id": "r1", "seq": 2, "step": 1, "proposal_id": "p1",
         "events": [["proposal.received", {}]], "created_at": datetime.fromisoformat(at)},
    ]  # fmt: skip
