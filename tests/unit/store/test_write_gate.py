"""The SQLite write gate: writers queue across threads and processes, checkpoints run outside it."""

from __future__ import annotations

import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from convmem_graph.checkpoints import prune_checkpoints, sqlite_checkpointer
from convmem_graph.errors import ConvMemError
from convmem_graph.models import Message
from convmem_graph.store import MemoryStore
from convmem_graph.store.write_gate import write_gate
from tests.unit.checkpoints.test_checkpoints import build_counter_graph, cfg

T0 = 1_767_268_800_000


def _msg(i: int) -> Message:
    return Message(
        id=f"m{i}", role="user", content=f"message {i}", channel="im", source="message", timestamp_ms=T0 + i
    )


def _blocked_for(action: Any, held: threading.Event, release: threading.Event) -> float:
    """Run ``action`` in a thread while another holds the gate; return how long it waited."""
    done: dict[str, float] = {}

    def run() -> None:
        started = time.monotonic()
        action()
        done["waited"] = time.monotonic() - started

    t = threading.Thread(target=run)
    assert held.wait(10)
    t.start()
    time.sleep(0.3)
    release.set()
    t.join(10)
    return done["waited"]


def _holder(db: str, held: threading.Event, release: threading.Event) -> threading.Thread:
    def hold() -> None:
        with write_gate(db).hold():
            held.set()
            release.wait(10)

    t = threading.Thread(target=hold)
    t.start()
    return t


def test_one_gate_per_file(tmp_path: Path) -> None:
    a = write_gate(str(tmp_path / "a.db"))
    assert write_gate(str(tmp_path / "a.db")) is a
    assert write_gate(str(tmp_path / "." / "a.db")) is a  # same file, other spelling
    assert write_gate(str(tmp_path / "b.db")) is not a


def test_gate_is_reentrant_in_a_thread_and_exclusive_across_threads(tmp_path: Path) -> None:
    db = str(tmp_path / "g.db")
    gate = write_gate(db)
    with gate.hold(), gate.hold():
        pass  # no self-deadlock
    held, release = threading.Event(), threading.Event()
    holder = _holder(db, held, release)

    def take() -> None:
        with gate.hold():
            pass

    assert _blocked_for(take, held, release) >= 0.25
    holder.join(10)


def test_store_writes_wait_at_the_gate(tmp_path: Path) -> None:
    db = str(tmp_path / "s.db")
    store = MemoryStore.from_url(db)
    held, release = threading.Event(), threading.Event()
    holder = _holder(db, held, release)
    assert _blocked_for(lambda: store.add_messages("m", [_msg(1)]), held, release) >= 0.25
    holder.join(10)
    assert store.count_messages("m") == 1
    store.close()


def test_checkpointer_commits_wait_at_the_gate_and_reads_do_not(tmp_path: Path) -> None:
    db = str(tmp_path / "c.db")
    saver = sqlite_checkpointer(db)
    graph = build_counter_graph(saver)
    graph.invoke({"n": 0}, cfg("t"))
    held, release = threading.Event(), threading.Event()
    holder = _holder(db, held, release)
    assert held.wait(10)
    started = time.monotonic()
    assert saver.get_tuple(cfg("t")) is not None  # a read passes while a writer holds the gate
    assert time.monotonic() - started < 0.25
    assert _blocked_for(lambda: graph.invoke({"n": 0}, cfg("t")), held, release) >= 0.25
    holder.join(10)
    saver.conn.close()


def test_pruning_takes_the_write_lock_only_when_there_is_something_to_cut(tmp_path: Path) -> None:
    db = str(tmp_path / "pr.db")
    saver = sqlite_checkpointer(db)
    graph = build_counter_graph(saver)
    graph.invoke({"n": 0}, cfg("t"), durability="exit")  # one checkpoint: nothing to cut
    held, release = threading.Event(), threading.Event()
    holder = _holder(db, held, release)
    assert held.wait(10)
    started = time.monotonic()
    assert prune_checkpoints(saver, "t", keep=3) == 0
    assert time.monotonic() - started < 0.25
    release.set()
    holder.join(10)
    for _ in range(4):
        graph.invoke({"n": 0}, cfg("t"), durability="exit")
    held, release = threading.Event(), threading.Event()
    holder = _holder(db, held, release)
    deleted: list[int] = []
    assert _blocked_for(lambda: deleted.append(prune_checkpoints(saver, "t", keep=3)), held, release) >= 0.25
    holder.join(10)
    assert deleted == [2]
    saver.conn.close()


def _rows_in_main_file(db: str) -> int:
    # immutable=1 reads the database file alone, ignoring the WAL: what a checkpoint copied.
    conn = sqlite3.connect(f"file:{db}?immutable=1", uri=True)
    try:
        return int(conn.execute("SELECT count(*) FROM cm_messages").fetchone()[0])
    except sqlite3.OperationalError:  # the table itself is still only in the WAL
        return 0
    finally:
        conn.close()


@pytest.mark.parametrize(("every", "copied"), [(1, 5), (10**9, 0)])
def test_wal_checkpoints_follow_the_commit_count(tmp_path: Path, every: int, copied: int) -> None:
    db = str(tmp_path / "w.db")
    gate = write_gate(db)
    gate.checkpoint_every = every
    try:
        store = MemoryStore.from_url(db)
        with store.engine.connect() as conn:
            assert conn.exec_driver_sql("PRAGMA wal_autocheckpoint").scalar() == 0
        for i in range(5):
            store.add_messages("m", [_msg(i)])
        # Checkpointing every commit copies every row to the database file; never checkpointing
        # (SQLite's own automatic checkpoint is off) leaves them all in the WAL.
        assert _rows_in_main_file(db) == copied
        assert store.count_messages("m") == 5
        store.close()
    finally:
        vars(gate).pop("checkpoint_every", None)


def test_an_unusable_lock_file_falls_back_to_sqlite_busy_handling(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    db = str(tmp_path / "ro.db")
    Path(db + "-convmem.lock").mkdir()  # cannot be opened as the lock file
    store = MemoryStore.from_url(db)
    store.add_messages("m", [_msg(1)])
    assert store.count_messages("m") == 1
    assert "write gate" in caplog.text and "unusable" in caplog.text
    held, release = threading.Event(), threading.Event()
    holder = _holder(db, held, release)
    # The in-process part of the gate still queues this process's writers.
    assert _blocked_for(lambda: store.add_messages("m", [_msg(2)]), held, release) >= 0.25
    holder.join(10)
    store.close()


def test_a_store_write_inside_this_threads_transaction_fails_at_once(tmp_path: Path) -> None:
    # Not a 30 s wait for SQLite's busy timeout behind the thread's own write lock: the call is
    # refused at once and names the way that works; the enclosing transaction still commits.
    store = MemoryStore.from_url(str(tmp_path / "gate.db"))
    started = time.monotonic()
    with store.transaction() as conn:
        conn.exec_driver_sql("CREATE TABLE IF NOT EXISTS mine (k TEXT)")
        with pytest.raises(ConvMemError, match="store.run"):
            store.add_messages("mem_1", [_msg(1)])
        conn.exec_driver_sql("INSERT INTO mine VALUES ('kept')")
    assert time.monotonic() - started < 5.0
    with store.read() as conn:
        assert conn.exec_driver_sql("SELECT k FROM mine").scalar() == "kept"
    with store.session() as session, session.transaction():
        session.add_messages("mem_1", [_msg(1)])  # the way the error names
    assert store.count_messages("mem_1") == 1
    assert not write_gate(str(tmp_path / "gate.db")).held_by_this_thread()
    store.close()
