"""A live turn's checkpoint write prunes its thread in the same transaction ("exit" on SQLite).

``Lifecycle.run`` asks :meth:`GatedSqliteSaver.pruning` for the run: the end-state checkpoint's
insert and the prune of older checkpoints commit together, instead of a second write transaction
after the run. These tests hold what that must keep: at most ``keep`` checkpoints after every run,
the newest one the run's end state, pruning after the run for the other durabilities, a failed
prune that never fails the run, and a request that touches no other thread.
"""

from __future__ import annotations

import logging
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import convmem_graph.checkpoints.prune as prune_module
from convmem_graph.checkpoints import sqlite_checkpointer, thread_id_for
from convmem_graph.checkpoints.sqlite import GatedSqliteSaver
from convmem_graph.config import MemoryConfig
from convmem_graph.runner import Durability, Lifecycle
from convmem_graph.state import RawInput
from convmem_graph.store import MemoryStore


def _count(db: Path, thread_id: str) -> int:
    with sqlite3.connect(db) as conn:
        return int(
            conn.execute("SELECT count(*) FROM checkpoints WHERE thread_id = ?", (thread_id,)).fetchone()[0]
        )


def _lifecycle(db: Path, keep: int, durability: Durability = "exit") -> Lifecycle:
    store = MemoryStore.from_url(str(db))
    return Lifecycle(
        store, sqlite_checkpointer(str(db)), config=MemoryConfig(keep_checkpoints=keep), durability=durability
    )


def _turn(i: int) -> list[RawInput]:
    return [RawInput([{"role": "user", "content": f"我喜欢爬山{i}号，每周都去。"}])]


def _close(lc: Lifecycle) -> None:
    saver = lc.checkpointer
    assert isinstance(saver, GatedSqliteSaver)
    saver.conn.close()
    lc.store.close()


def test_exit_runs_prune_in_their_checkpoint_write(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without pruning after the run, the thread still never holds more than ``keep`` checkpoints."""
    db = tmp_path / "m.db"
    lc = _lifecycle(db, keep=2)
    after: list[str] = []
    # The prune after the run is what a kill between the checkpoint and it would skip.
    monkeypatch.setattr(
        "convmem_graph.checkpoints.prune_memory_checkpoints", lambda saver, mid, keep: after.append(mid) or 0
    )
    try:
        for i in range(6):
            lc.run("m", _turn(i))
            assert _count(db, thread_id_for("m")) == min(i + 1, 2)
        assert after == []  # the checkpoint write took the prune: none after the run
    finally:
        _close(lc)


@pytest.mark.parametrize("durability", ["sync", "async"])
def test_per_step_durabilities_prune_after_the_run(tmp_path: Path, durability: Durability) -> None:
    db = tmp_path / "m.db"
    lc = _lifecycle(db, keep=2, durability=durability)
    try:
        for i in range(3):
            lc.run("m", _turn(i))
        assert _count(db, thread_id_for("m")) == 2
    finally:
        _close(lc)


def test_a_failed_prune_keeps_the_checkpoint_and_the_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    db = tmp_path / "m.db"
    lc = _lifecycle(db, keep=1)

    def broken(cur: sqlite3.Cursor, thread_id: str, keep: int) -> int:
        cur.execute("DELETE FROM checkpoints WHERE thread_id = ?", (thread_id,))  # undone by the savepoint
        raise sqlite3.OperationalError("disk I/O error")

    try:
        lc.run("m", _turn(0))
        monkeypatch.setattr(prune_module, "prune_sqlite_in", broken)
        with caplog.at_level(logging.WARNING):
            result = lc.run("m", _turn(1))
        assert result.new_messages == 1
        assert "pruning checkpoints of thread 'convmem:m' failed" in caplog.text
        # Both checkpoints stand: the new one committed, the prune alone was undone.
        assert _count(db, thread_id_for("m")) == 2
        state = lc.graph.get_state({"configurable": {"thread_id": thread_id_for("m")}}).values
        # The newest checkpoint is this run's end state: one new message, the second stored.
        assert (state["new_messages"], state["max_seq"]) == (1, 2)
        monkeypatch.undo()
        lc.run("m", _turn(2))
        assert _count(db, thread_id_for("m")) == 1
    finally:
        _close(lc)


def test_a_request_prunes_its_own_thread_only(tmp_path: Path) -> None:
    """Another thread's checkpoint (a graph run inside a node, say) written in the block is left alone."""
    db = tmp_path / "c.db"
    saver = sqlite_checkpointer(str(db))
    assert isinstance(saver, GatedSqliteSaver)

    def put(thread: str, n: int, ns: str = "") -> None:
        config: Any = {"configurable": {"thread_id": thread, "checkpoint_ns": ns}}
        checkpoint: Any = {"v": 4, "id": f"1f000000-0000-6000-8000-{n:012d}", "ts": "", "channel_values": {}}
        checkpoint |= {"channel_versions": {}, "versions_seen": {}}
        saver.put(config, checkpoint, {"source": "loop", "step": n}, {})

    try:
        for n in range(3):
            put("a", n)
            put("b", n)
            put("a", 10 + n, ns="sub:1")
        with saver.pruning("a", 1) as asked:
            put("b", 3)
            put("a", 20, ns="sub:1")
            assert not asked.done  # neither is the thread's root checkpoint
            put("a", 4)
        assert asked.done
        assert asked.deleted == 3 + 3  # each namespace of the thread keeps its newest one of four
        assert _count(db, "a") == 2
        assert _count(db, "b") == 4
        put("a", 5)  # outside the block: no prune
        assert _count(db, "a") == 3
    finally:
        saver.conn.close()


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    keep=st.integers(min_value=1, max_value=3),
    durabilities=st.lists(st.sampled_from(["exit", "sync", "async"]), min_size=1, max_size=6),
)
def test_any_order_of_durabilities_keeps_the_newest_end_states(
    tmp_path_factory: pytest.TempPathFactory, keep: int, durabilities: list[Durability]
) -> None:
    """After every run, whatever the durabilities before it: at most ``keep`` checkpoints, the
    newest being this run's end state, and the same count a prune after the run leaves."""
    db = tmp_path_factory.mktemp("h") / "m.db"
    lc = _lifecycle(db, keep=keep)
    thread = thread_id_for("m")
    try:
        for i, durability in enumerate(durabilities):
            lc.durability = durability
            result = lc.run("m", _turn(i))
            assert _count(db, thread) <= keep
            state = lc.graph.get_state({"configurable": {"thread_id": thread}}).values
            assert state["node_ms"].keys() == result.node_ms.keys()
            # This run's end state: its one new message is the (i + 1)-th stored.
            assert state["new_messages"] == result.new_messages == 1
            assert state["max_seq"] == i + 1
        # What the old prune after the run would leave: nothing more to cut.
        assert prune_module.prune_checkpoints(lc.checkpointer, thread, keep=keep) == 0  # type: ignore[arg-type]
    finally:
        _close(lc)


def test_the_runner_falls_back_when_no_write_took_the_prune(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run whose checkpoint write did not prune (the request unused) prunes after the run, as before."""
    db = tmp_path / "m.db"
    lc = _lifecycle(db, keep=1)
    saver = lc.checkpointer
    assert isinstance(saver, GatedSqliteSaver)
    real = GatedSqliteSaver.pruning

    def unused(self: GatedSqliteSaver, thread_id: str, keep: int) -> Any:
        return real(self, "some other thread", keep)

    monkeypatch.setattr(GatedSqliteSaver, "pruning", unused)
    try:
        for i in range(3):
            lc.run("m", _turn(i))
        assert _count(db, thread_id_for("m")) == 1
    finally:
        _close(lc)


def test_a_failing_run_prunes_with_its_checkpoint_and_stays_resumable(tmp_path: Path) -> None:
    """A run that raises writes the failing step's checkpoint ("exit"); that write prunes too, and the
    checkpoint kept newest is the failing one, from which the thread goes on."""
    from convmem_graph.errors import ExtractionError
    from convmem_graph.extractors.heuristic import HeuristicExtractor

    class Failing(HeuristicExtractor):
        fail = False

        def extract(self, *args: Any, **kwargs: Any) -> Any:
            if self.fail:
                raise ExtractionError("model kept returning invalid output")
            return super().extract(*args, **kwargs)

    db = tmp_path / "m.db"
    extractor = Failing()
    store = MemoryStore.from_url(str(db))
    lc = Lifecycle(
        store, sqlite_checkpointer(str(db)), config=MemoryConfig(keep_checkpoints=2), extractor=extractor
    )
    thread = thread_id_for("m")
    try:
        for i in range(3):
            lc.run("m", _turn(i))
        extractor.fail = True
        with pytest.raises(ExtractionError):
            lc.run("m", _turn(3))
        assert _count(db, thread) == 2
        failed = lc.graph.get_state({"configurable": {"thread_id": thread}})
        assert failed.next == ("extract",)  # the failing step's state, with its pending writes
        extractor.fail = False
        lc.run("m", _turn(4))
        assert _count(db, thread) == 2
        assert store.count_messages("m") == 5
    finally:
        _close(lc)
