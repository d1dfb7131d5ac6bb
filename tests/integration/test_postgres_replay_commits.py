"""A replay's runs commit on PostgreSQL without waiting for the WAL flush; its file marks wait.

``MemoryStore.run(..., flush_commit=False)`` sets ``synchronous_commit = off`` for the run's
transaction only, in the memory lock's statement (no round trip of its own). The replay's lifecycle
runs use it; the mark that a file is done is its own transaction with the server's setting, whose
flush covers every earlier commit, so a database crash can only lose runs of files not marked done.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event

from convmem_graph.assembly import open_lifecycle
from convmem_graph.config import MemoryConfig
from convmem_graph.replay import Replayer
from convmem_graph.store import MemoryStore

pytestmark = [pytest.mark.integration, pytest.mark.postgres]


@pytest.fixture
def store(fresh_pg_store: MemoryStore) -> MemoryStore:
    """The module's store: on a schema of the test's own (``conftest.fresh_pg_store``)."""
    return fresh_pg_store


def _setting(conn: Any) -> str:
    return str(conn.exec_driver_sql("SHOW synchronous_commit").scalar())


def test_a_run_without_flush_commits_unflushed_and_only_that_transaction(store: MemoryStore) -> None:
    with store.read() as conn:
        server = _setting(conn)
    assert server != "off"  # the test means something only on a server that flushes
    with store.run("m1", flush_commit=False) as run, run.transaction() as conn:
        assert _setting(conn) == "off"
        run.ensure_memory("m1")
    with store.run("m1") as run, run.transaction() as conn:
        assert _setting(conn) == server  # SET LOCAL: gone with the transaction
    with store.run("m2", flush_commit=False) as run, run.transaction() as conn:
        # A memory joining the open transaction keeps its setting.
        with run.run("m3"):
            assert _setting(conn) == "off"
    with store.read() as conn:
        assert _setting(conn) == server


def test_a_replay_runs_unflushed_and_marks_its_files_flushed(fresh_pg_url: str, tmp_path: Path) -> None:
    archive = tmp_path / "a.jsonl"
    said = [{"role": "user", "content": "I like green tea"}]
    lines = [{"user": f"u{k}", "messages": said} for k in range(3)]
    archive.write_text("\n".join(json.dumps(x) for x in lines) + "\n", encoding="utf-8")
    lifecycle, close = open_lifecycle(fresh_pg_url, None, MemoryConfig())
    # A listener on the engine sends the store's statements through SQLAlchemy, where it sees them.
    statements: list[str] = []
    commits: list[list[str]] = []

    def seen(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        statements.append(statement)

    def committed(conn: Any) -> None:
        commits.append(list(statements))
        statements.clear()

    event.listen(lifecycle.store.engine, "before_cursor_execute", seen)
    event.listen(lifecycle.store.engine, "commit", committed)
    try:
        report = Replayer(lifecycle, group_by="user").run([archive])
    finally:
        event.remove(lifecycle.store.engine, "before_cursor_execute", seen)
        event.remove(lifecycle.store.engine, "commit", committed)
        if close is not None:
            close()
        lifecycle.store.close()
    assert report.runs == 3
    runs = [c for c in commits if any("INSERT INTO cm_messages" in s for s in c)]
    marks = [c for c in commits if any("INSERT INTO cm_replay_progress" in s for s in c)]
    assert len(runs) == 3 and len(marks) == 1
    assert all(any("set_config('synchronous_commit', 'off', true)" in s for s in c) for c in runs)
    assert not any("synchronous_commit" in s for s in marks[0])
