"""The store contract, the checkpointer and pruning, and cross-process locking on a real PostgreSQL."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.postgres import PostgresSaver
from sqlalchemy.engine import make_url

from convmem_graph.checkpoints import open_checkpointer, postgres_checkpointer, prune_checkpoints
from convmem_graph.store import MemoryStore
from convmem_graph.store.urls import libpq_url
from tests.unit.checkpoints.test_checkpoints import build_counter_graph, cfg, checkpoint_ids
from tests.unit.store.test_repository import StoreContract, backends

pytestmark = [pytest.mark.integration, pytest.mark.postgres]


@pytest.fixture(scope="module")
def pg_store(pg_url: str) -> Iterator[MemoryStore]:
    store = MemoryStore.from_url(pg_url)
    yield store
    store.close()


@pytest.fixture(scope="module")
def pg_saver(pg_url: str) -> Iterator[PostgresSaver]:
    saver = postgres_checkpointer(pg_url)
    yield saver
    saver.conn.close()


class TestPostgresStore(StoreContract):
    # One store for the module (its tables set up once); the contract's ids are unique per test.
    @pytest.fixture(params=backends("integration"))
    def store(self, request: pytest.FixtureRequest, pg_store: MemoryStore) -> MemoryStore:
        assert request.param == "postgresql" and pg_store.dialect == "postgresql"
        return pg_store

    @pytest.fixture
    def checkpointer(self, pg_saver: PostgresSaver) -> BaseCheckpointSaver[Any]:
        return pg_saver


def test_url_is_rewritten_and_password_masked(pg_url: str, caplog: pytest.LogCaptureFixture) -> None:
    # A password the trust-authenticated test server ignores: it must still never show.
    with_password = make_url(pg_url).set(password="n0t-a-real-s3cret").render_as_string(hide_password=False)
    caplog.set_level(logging.DEBUG, logger="convmem_graph")
    store = MemoryStore.from_url(with_password.replace("postgresql+psycopg://", "postgresql://"))
    assert store.url.startswith("postgresql+psycopg://") and store.dialect == "postgresql"
    store.add_dead_letter(None, source="test", raw=uuid.uuid4().hex, error="x")
    with store.memory_lock("m"):
        pass
    assert "n0t-a-real-s3cret" not in repr(store) + store.safe_url + caplog.text
    assert "***" in store.safe_url
    store.close()


def _blob_counts(url: str, thread: str) -> tuple[int, int]:
    """(blobs stored, blobs referenced by the thread's checkpoints)."""
    with psycopg.connect(libpq_url(url)) as conn:
        stored = conn.execute(
            "SELECT count(*) FROM checkpoint_blobs WHERE thread_id = %s", (thread,)
        ).fetchone()
        referenced = conn.execute(
            "SELECT count(DISTINCT (v.key, v.value)) FROM checkpoints c "
            "CROSS JOIN LATERAL jsonb_each_text(c.checkpoint -> 'channel_versions') v "
            "JOIN checkpoint_blobs b ON b.thread_id = c.thread_id AND b.checkpoint_ns = c.checkpoint_ns "
            "AND b.channel = v.key AND b.version = v.value WHERE c.thread_id = %s",
            (thread,),
        ).fetchone()
        writes = conn.execute(
            "SELECT count(*) FROM checkpoint_writes w WHERE thread_id = %s AND NOT EXISTS ("
            "SELECT 1 FROM checkpoints c "
            "WHERE c.thread_id = w.thread_id AND c.checkpoint_id = w.checkpoint_id)",
            (thread,),
        ).fetchone()
    assert stored is not None and referenced is not None and writes is not None
    assert writes[0] == 0, "writes of deleted checkpoints remain"
    return int(stored[0]), int(referenced[0])


def test_postgres_checkpointer_and_pruning(pg_url: str, pg_saver: PostgresSaver) -> None:
    thread, other = f"ck-{uuid.uuid4().hex[:8]}", f"ck-{uuid.uuid4().hex[:8]}"
    app = build_counter_graph(pg_saver)
    for _ in range(5):
        app.invoke({"fail": False}, cfg(thread))
    app.invoke({"fail": False}, cfg(other))
    before = checkpoint_ids(pg_saver, thread)
    assert len(before) == 20
    stored_before, referenced_before = _blob_counts(pg_url, thread)
    assert stored_before == referenced_before >= 5  # one 'ids' blob per bump, all in use

    assert prune_checkpoints(pg_saver, thread, keep=3) == 17

    assert checkpoint_ids(pg_saver, thread) == before[:3]
    stored, referenced = _blob_counts(pg_url, thread)
    assert stored == referenced < stored_before  # the blobs only deleted checkpoints used are gone
    assert len(checkpoint_ids(pg_saver, other)) == 4
    assert app.get_state(cfg(thread)).values["n"] == 5
    app.invoke({"fail": False}, cfg(thread))
    assert app.get_state(cfg(thread)).values == {"n": 6, "ids": ["m6"], "fail": False}

    # A failed run keeps its pending writes through pruning and resumes without redoing 'bump'.
    with pytest.raises(RuntimeError, match="planned failure"):
        app.invoke({"fail": True}, cfg(thread))
    latest = pg_saver.get_tuple(cfg(thread))
    assert latest is not None and latest.pending_writes
    prune_checkpoints(pg_saver, thread, keep=1)
    kept = pg_saver.get_tuple(cfg(thread))
    assert kept is not None and kept.pending_writes == latest.pending_writes
    app.update_state(cfg(thread), {"fail": False}, as_node="bump")
    app.invoke(None, cfg(thread))
    assert app.get_state(cfg(thread)).values["n"] == 7


def test_open_checkpointer_picks_postgres(pg_url: str) -> None:
    saver, close = open_checkpointer(pg_url)
    try:
        assert isinstance(saver, PostgresSaver)
        build_counter_graph(saver).invoke({"fail": False}, cfg(f"oc-{uuid.uuid4().hex[:8]}"))
    finally:
        close()


_WORKER = textwrap.dedent(
    """
    import json, sys, time
    from convmem_graph.models import Message
    from convmem_graph.store import MemoryStore

    url, memory_id, out = sys.argv[1], sys.argv[2], sys.argv[5]
    offset, start_at = int(sys.argv[3]), float(sys.argv[4])
    store = MemoryStore.from_url(url)
    while time.time() < start_at:
        time.sleep(0.005)
    spans = []
    for r in range(8):
        lo = r * 10 + offset
        batch = [
            Message(id=f"m{i}", role="user", content=f"message number {i}", channel="im", source="message",
                    timestamp_ms=1_767_268_800_000 + i * 1000)
            for i in range(lo, lo + 25)
        ]
        with store.run(memory_id) as run:
            began = time.time()
            seen = run.max_seq(memory_id)
            inserted = run.add_messages(memory_id, batch)
            time.sleep(0.02)  # widen the critical section so overlap would show
            spans.append([began, time.time(), seen, len(inserted)])
    store.close()
    with open(out, "w") as fh:
        json.dump(spans, fh)
    """
)


def test_two_processes_ingest_one_memory(pg_url: str, tmp_path: Path) -> None:
    memory_id = f"proc-{uuid.uuid4().hex[:8]}"
    script = tmp_path / "worker.py"
    script.write_text(_WORKER, encoding="utf-8")
    start_at = time.time() + 4.0
    outs = [tmp_path / "w0.json", tmp_path / "w1.json"]
    procs = [
        subprocess.Popen(
            [sys.executable, str(script), pg_url, memory_id, str(k * 5), str(start_at), str(out)]
        )
        for k, out in enumerate(outs)
    ]
    for p in procs:
        assert p.wait(timeout=120) == 0
    spans = [json.loads(out.read_text()) for out in outs]

    # Critical sections of the two processes never overlap.
    for a_start, a_end, *_ in spans[0]:
        for b_start, b_end, *_ in spans[1]:
            assert a_end <= b_start or b_end <= a_start
    store = MemoryStore.from_url(pg_url)
    rows = store.messages_after(memory_id, 0, limit=1000)
    ids = [m.id for _, m in rows]
    # Worker 0 covers m0..m94, worker 1 covers m5..m99: together m0..m99, each exactly once.
    assert len(ids) == len(set(ids)) == 100
    assert set(ids) == {f"m{i}" for i in range(100)}
    assert sum(s[3] for w in spans for s in w) == 100  # every message reported inserted by exactly one worker
    store.close()


def test_schema_transactions_take_turns_across_processes(pg_url: str) -> None:
    """Tables of one's own (replay progress, the server's inbox, pull cursors) are created under the
    store's schema lock: concurrent ``CREATE TABLE IF NOT EXISTS`` can fail on the catalog."""
    import threading

    from convmem_graph.store.postgres import SCHEMA_LOCK_KEY as _SCHEMA_LOCK_KEY

    store = MemoryStore.from_url(pg_url)
    done: list[bool] = []

    def create() -> None:
        with store.schema_transaction() as conn:
            conn.exec_driver_sql("CREATE TABLE IF NOT EXISTS cm_test_own_table (k TEXT)")
        done.append(True)

    try:
        with psycopg.connect(libpq_url(pg_url)) as other:  # another process, mid-way through its schema work
            other.execute("SELECT pg_advisory_xact_lock(%s)", (_SCHEMA_LOCK_KEY,))
            thread = threading.Thread(target=create)
            thread.start()
            thread.join(timeout=1.0)
            assert thread.is_alive() and done == []  # waits its turn
            other.commit()
            thread.join(timeout=30)
        assert done == [True]
    finally:
        with store.engine.begin() as conn:
            conn.exec_driver_sql("DROP TABLE IF EXISTS cm_test_own_table")
        store.close()
