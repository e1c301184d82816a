"""A real MCP server for the tests: a notes service with its own SQLite state.

``python -m tests.mcp_server`` serves over stdio; ``python -m tests.mcp_server --http PORT``
serves streamable HTTP on ``127.0.0.1:PORT/mcp``. The state lives in
``$NOTES_STATE_DIR/notes.sqlite3``: the notes, one ``calls`` row per tool call as it starts
(with the serving process's pid), and one ``starts`` row per server process (its pid and its
parent's), so tests can count effects, see whether the server was called at all, and count
the server processes a client started. A note whose title contains ``ghost`` is answered
as added and never stored (a write that does not land: its read-back finds nothing).
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from mcp.server.fastmcp import FastMCP

STATE_ENV = "NOTES_STATE_DIR"


def db_path(state_dir: str | Path | None = None) -> Path:
    return Path(state_dir or os.environ[STATE_ENV]) / "notes.sqlite3"


@contextmanager
def connect(state_dir: str | Path | None = None) -> Iterator[sqlite3.Connection]:
    """An autocommit connection to the state (tables created on first use), closed on exit."""
    conn = sqlite3.connect(db_path(state_dir), timeout=10, isolation_level=None)
    try:
        conn.execute("CREATE TABLE IF NOT EXISTS notes (title TEXT PRIMARY KEY, body TEXT)")
        conn.execute(
            "CREATE TABLE IF NOT EXISTS calls (tool TEXT NOT NULL, arguments TEXT, pid INTEGER)"
        )
        conn.execute("CREATE TABLE IF NOT EXISTS starts (pid INTEGER, parent INTEGER)")
        conn.execute(
            "CREATE TABLE IF NOT EXISTS exports (id INTEGER PRIMARY KEY, title TEXT UNIQUE, "
            "state TEXT, polls INTEGER DEFAULT 0, cancels INTEGER DEFAULT 0)"
        )
        yield conn
    finally:
        conn.close()


def _called(tool: str, arguments: str = "") -> None:
    with connect() as conn:
        conn.execute("INSERT INTO calls VALUES (?, ?, ?)", (tool, arguments, os.getpid()))


def _add(title: str, body: str) -> dict[str, Any]:
    if not title.strip():
        raise ValueError("a note needs a title")
    if "ghost" in title:  # a write that does not land: answered, never stored
        return {"title": title, "created": True}
    with connect() as conn:
        cur = conn.execute("INSERT OR IGNORE INTO notes VALUES (?, ?)", (title, body))
        return {"title": title, "created": cur.rowcount == 1}


def _description(tool: str) -> str | None:
    """A description the state directory gives ``tool`` (``<tool>.description``), read when
    the server starts; ``None``: the function's docstring (tests change a server's tool
    between its starts with it)."""
    state = os.environ.get(STATE_ENV)
    path = Path(state) / f"{tool}.description" if state else None
    return path.read_text() if path is not None and path.exists() else None


def build(port: int = 8000) -> FastMCP:
    server = FastMCP("notes", host="127.0.0.1", port=port, log_level="WARNING")

    @server.tool(description=_description("list_notes"))
    def list_notes(prefix: str = "") -> dict[str, Any]:
        """List the notes whose title starts with ``prefix``."""
        _called("list_notes", prefix)
        with connect() as conn:
            rows = conn.execute(
                "SELECT title, body FROM notes WHERE title LIKE ? ORDER BY title", (prefix + "%",)
            ).fetchall()
        return {"notes": [{"title": t, "body": b} for t, b in rows]}

    @server.tool()
    def add_note(title: str, body: str) -> dict[str, Any]:
        """Add a note (a title is written once: adding it again changes nothing)."""
        _called("add_note", title)
        return _add(title, body)

    @server.tool()
    def get_note(title: str) -> dict[str, Any]:
        """Read one note back (an error when there is none)."""
        _called("get_note", title)
        with connect() as conn:
            row = conn.execute("SELECT body FROM notes WHERE title = ?", (title,)).fetchone()
        if row is None:
            raise ValueError(f"no note titled {title!r}")
        return {"title": title, "body": row[0]}

    @server.tool()
    def slow_add(title: str, body: str, delay_s: float = 5.0) -> dict[str, Any]:
        """Wait ``delay_s`` seconds, then add a note."""
        _called("slow_add", title)
        time.sleep(delay_s)
        return _add(title, body)

    @server.tool()
    def start_export(title: str) -> dict[str, Any]:
        """Start exporting a note (a job: the same title is the same job). A title starting
        with ``stuck`` never finishes; ``broken`` fails."""
        _called("start_export", title)
        with connect() as conn:
            conn.execute(
                "INSERT OR IGNORE INTO exports (title, state) VALUES (?, 'running')", (title,)
            )
            (job_id,) = conn.execute("SELECT id FROM exports WHERE title = ?", (title,)).fetchone()
        return {"job_id": f"ex-{job_id}", "state": "running"}

    @server.tool()
    def export_status(job_id: str) -> dict[str, Any]:
        """How an export stands: it finishes on its third status query."""
        _called("export_status", job_id)
        ident = int(job_id.removeprefix("ex-"))
        with connect() as conn:
            conn.execute("UPDATE exports SET polls = polls + 1 WHERE id = ?", (ident,))
            title, state, polls = conn.execute(
                "SELECT title, state, polls FROM exports WHERE id = ?", (ident,)
            ).fetchone()
            if state == "running" and polls >= 3 and not title.startswith("stuck"):
                state = "failed" if title.startswith("broken") else "done"
                conn.execute("UPDATE exports SET state = ? WHERE id = ?", (state, ident))
        return {"job_id": job_id, "state": state, "title": title}

    @server.tool()
    def cancel_export(job_id: str) -> dict[str, Any]:
        """Cancel a running export."""
        _called("cancel_export", job_id)
        ident = int(job_id.removeprefix("ex-"))
        with connect() as conn:
            conn.execute(
                "UPDATE exports SET cancels = cancels + 1, state = CASE state WHEN 'running' "
                "THEN 'cancelled' ELSE state END WHERE id = ?",
                (ident,),
            )
        return {"job_id": job_id}

    @server.tool()
    def undeclared_delete(title: str) -> dict[str, Any]:
        """Delete a note (never declared to warrant)."""
        _called("undeclared_delete", title)
        with connect() as conn:
            conn.execute("DELETE FROM notes WHERE title = ?", (title,))
        return {"deleted": title}

    return server


def exports(state_dir: str | Path) -> list[tuple[str, str, int, int]]:
    """Every export job: (title, state, status queries, cancel calls)."""
    with connect(state_dir) as conn:
        return conn.execute(
            "SELECT title, state, polls, cancels FROM exports ORDER BY id"
        ).fetchall()


def notes(state_dir: str | Path, title: str | None = None) -> list[tuple[str, str]]:
    """The notes in ``state_dir`` (with that title)."""
    with connect(state_dir) as conn:
        if title is None:
            return conn.execute("SELECT title, body FROM notes").fetchall()
        return conn.execute("SELECT title, body FROM notes WHERE title = ?", (title,)).fetchall()


def calls(state_dir: str | Path, tool: str | None = None) -> list[tuple[str, str]]:
    """The calls the server saw (of that tool)."""
    with connect(state_dir) as conn:
        if tool is None:
            return conn.execute("SELECT tool, arguments FROM calls").fetchall()
        return conn.execute("SELECT tool, arguments FROM calls WHERE tool = ?", (tool,)).fetchall()


def callers(state_dir: str | Path, tool: str) -> list[tuple[str, int]]:
    """``(arguments, pid of the server process)`` of each call of ``tool``, in order."""
    with connect(state_dir) as conn:
        return conn.execute(
            "SELECT arguments, pid FROM calls WHERE tool = ? ORDER BY rowid", (tool,)
        ).fetchall()


def starts(state_dir: str | Path) -> list[tuple[int, int]]:
    """``(pid, parent pid)`` of every server process started on ``state_dir``, in order."""
    if not db_path(state_dir).exists():
        return []
    with connect(state_dir) as conn:
        return conn.execute("SELECT pid, parent FROM starts ORDER BY rowid").fetchall()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--http", type=int, metavar="PORT", help="serve streamable HTTP")
    ns = parser.parse_args()
    with connect() as conn:
        conn.execute("INSERT INTO starts VALUES (?, ?)", (os.getpid(), os.getppid()))
    if ns.http:
        build(ns.http).run("streamable-http")
    else:
        build().run("stdio")


if __name__ == "__main__":
    main()
