"""Pruning finished runs (``warrant ledger prune``) and restoring them from an archive
(``warrant ledger restore``). The SQL is :mod:`warrant.ledger.retention`; here: the cutoff,
the archive file, batches and their summary.

The archive is gzip-compressed JSON lines, one line per run with all its rows by table. Each
batch is appended as its own gzip member and fsynced before the batch's deletes commit, so a
crash loses no pruned run: at worst the file ends in a torn member whose runs were never
deleted (restore stops there and says ``truncated``). Concatenated members are one valid gzip
file (``zcat`` reads it), and a later prune may append to the same file.
"""

from __future__ import annotations

import gzip
import os
import re
import time
import zlib
from collections import Counter
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import orjson
from sqlalchemy import Engine

from warrant.ledger import retention
from warrant.runner.errors import InvalidRequest

__all__ = [
    "DEFAULT_BATCH",
    "ArchiveWriter",
    "parse_cutoff",
    "prune",
    "read_archive",
    "restore",
]

#: Runs per prune transaction.
DEFAULT_BATCH = 500

_RELATIVE = re.compile(r"^\s*(\d+)\s*([smhdw])\s*$")
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks"}

#: Called after each batch with (runs done so far, runs expected in all).
OnProgress = Callable[[int, int], None]


def parse_cutoff(value: str, *, now: datetime | None = None) -> datetime:
    """``--finished-before``: an ISO 8601 date (midnight UTC) or datetime (UTC unless it
    names an offset), or an age such as ``30d``, ``12h``, ``2w`` (before now). Anything else:
    :class:`InvalidRequest` ``INVALID_DATE``."""
    now = now or datetime.now(UTC)
    if m := _RELATIVE.match(value):
        return now - timedelta(**{_UNITS[m.group(2)]: int(m.group(1))})
    try:
        cutoff = datetime.fromisoformat(value.strip())
    except ValueError:
        raise InvalidRequest(
            f"not a date, a datetime or an age like 30d: {value!r}", code="INVALID_DATE"
        ) from None
    return cutoff if cutoff.tzinfo else cutoff.replace(tzinfo=UTC)


class ArchiveWriter:
    """Appends batches of records to a gzip JSON-lines file, each batch one gzip member,
    written and fsynced before :meth:`write` returns. Opening it checks the path: one that
    cannot be written is ``ARCHIVE_UNWRITABLE`` before anything is deleted."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        try:
            created = not self.path.exists()
            self._file = open(self.path, "ab")  # noqa: SIM115 - closed by close()
            if created:
                _fsync_dir(self.path.parent)
        except OSError as exc:
            raise InvalidRequest(
                f"cannot write the archive {self.path}: {exc.strerror or exc}",
                code="ARCHIVE_UNWRITABLE",
            ) from None

    def write(self, records: list[retention.Record]) -> None:
        data = b"".join(orjson.dumps(r, option=orjson.OPT_APPEND_NEWLINE) for r in records)
        self._file.write(gzip.compress(data, compresslevel=6))
        self._file.flush()
        os.fsync(self._file.fileno())

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> ArchiveWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _fsync_dir(path: Path) -> None:
    fd = os.open(path or ".", os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def read_archive(path: str | Path, *, truncated: list[bool] | None = None) -> Iterator[Any]:
    """The records of an archive, in order. A torn last member (a crash while writing it)
    ends the iteration and sets ``truncated[0]``; a file that is not an archive is
    ``ARCHIVE_INVALID``, one that cannot be read ``ARCHIVE_UNREADABLE``."""
    try:
        source = gzip.open(path, "rb")  # noqa: SIM115 - closed by the with below
    except OSError as exc:
        raise InvalidRequest(
            f"cannot read the archive {path}: {exc}", code="ARCHIVE_UNREADABLE"
        ) from None
    with source:
        while True:
            try:
                line = source.readline()
            except (EOFError, zlib.error):
                if truncated is not None:
                    truncated[:] = [True]
                return
            except OSError as exc:  # gzip.BadGzipFile, a read error
                raise InvalidRequest(
                    f"not a warrant archive: {path}: {exc}", code="ARCHIVE_INVALID"
                ) from None
            if not line:
                return
            if not line.endswith(b"\n"):  # torn: the member ended inside the line
                if truncated is not None:
                    truncated[:] = [True]
                return
            try:
                yield orjson.loads(line)
            except orjson.JSONDecodeError:
                raise InvalidRequest(
                    f"not a warrant archive (a line is no JSON): {path}", code="ARCHIVE_INVALID"
                ) from None


def prune(
    engine: Engine,
    cutoff: datetime,
    *,
    archive: str | Path | None = None,
    batch: int = DEFAULT_BATCH,
    on_progress: OnProgress | None = None,
) -> dict[str, Any]:
    """Remove every prunable run finished before ``cutoff``, ``batch`` runs per transaction
    (see :mod:`warrant.ledger.retention`); with ``archive``, appended there first. The
    summary: runs pruned, rows per table, archive, batches, seconds."""
    if batch < 1:
        raise InvalidRequest("--batch must be at least 1", code="INVALID_BATCH")
    started = time.monotonic()
    writer = ArchiveWriter(archive) if archive is not None else None
    total = retention.candidates(engine, cutoff)
    pruned, batches = 0, 0
    rows: Counter[str] = Counter()
    try:
        while True:
            ids, counts = retention.prune_batch(
                engine, cutoff, batch, archive=writer.write if writer else None
            )
            if not ids:
                break
            pruned, batches = pruned + len(ids), batches + 1
            rows.update(counts)
            if on_progress is not None:
                on_progress(pruned, max(total, pruned))
    finally:
        if writer is not None:
            writer.close()
    return {
        "runs_pruned": pruned,
        "rows": dict(sorted(rows.items())),
        "archive": str(archive) if archive is not None else None,
        "cutoff": cutoff.isoformat(),
        "batches": batches,
        "seconds": round(time.monotonic() - started, 3),
    }


def restore(
    engine: Engine,
    path: str | Path,
    *,
    batch: int = DEFAULT_BATCH,
    on_progress: OnProgress | None = None,
) -> dict[str, Any]:
    """Put back every run of an archive, ``batch`` runs per transaction; a run that exists
    is skipped and counted (restoring twice changes nothing)."""
    started = time.monotonic()
    truncated: list[bool] = [False]
    restored = skipped = 0
    rows: Counter[str] = Counter()
    chunk: list[retention.Record] = []

    def flush() -> None:
        nonlocal restored, skipped
        done, already, counts = retention.restore_records(engine, chunk)
        restored, skipped = restored + done, skipped + already
        rows.update(counts)
        chunk.clear()
        if on_progress is not None:
            on_progress(restored + skipped, 0)

    for record in read_archive(path, truncated=truncated):
        try:
            chunk.append(retention.decode_record(record))
        except (KeyError, TypeError, ValueError, AttributeError):
            raise InvalidRequest(
                f"not a warrant archive (a record does not fit the ledger): {path}",
                code="ARCHIVE_INVALID",
            ) from None
        if len(chunk) >= batch:
            flush()
    if chunk:
        flush()
    return {
        "runs_restored": restored,
        "runs_skipped": skipped,
        "rows": dict(sorted(rows.items())),
        "archive": str(path),
        "truncated": truncated[0],
        "seconds": round(time.monotonic() - started, 3),
    }
