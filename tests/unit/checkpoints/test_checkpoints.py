"""Checkpointer factories and pruning on SQLite and in memory (PostgreSQL: tests/integration)."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TypedDict

import pytest
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph

from convmem_graph.checkpoints import open_checkpointer, prune_checkpoints, sqlite_checkpointer
from convmem_graph.errors import DeltaChannelPruneError


class CounterState(TypedDict, total=False):
    n: int
    ids: list[str]
    fail: bool


def build_counter_graph(saver: BaseCheckpointSaver[Any]) -> CompiledStateGraph[Any, Any, Any, Any]:
    """Two nodes: ``bump`` increments ``n`` and records an id list (a blob channel on Postgres),
    ``check`` raises when ``fail`` is set, leaving ``bump``'s pending write on the latest checkpoint."""

    def bump(state: CounterState) -> CounterState:
        n = state.get("n", 0) + 1
        return {"n": n, "ids": [f"m{n}"]}

    def check(state: CounterState) -> CounterState:
        if state.get("fail"):
            raise RuntimeError("planned failure")
        return {}

    graph = StateGraph(CounterState)
    graph.add_node("bump", bump)
    graph.add_node("check", check)
    graph.add_edge(START, "bump")
    graph.add_edge("bump", "check")
    graph.add_edge("check", END)
    return graph.compile(checkpointer=saver)


def cfg(thread: str) -> Any:
    return {"configurable": {"thread_id": thread}}


def checkpoint_ids(saver: BaseCheckpointSaver[Any], thread: str) -> list[str]:
    return [t.config["configurable"]["checkpoint_id"] for t in saver.list(cfg(thread))]


@pytest.fixture(params=["sqlite-file", "sqlite-memory", "in-memory"])
def saver(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[BaseCheckpointSaver[Any]]:
    if request.param == "in-memory":
        yield InMemorySaver()
        return
    path = str(tmp_path / "ck.db") if request.param == "sqlite-file" else ":memory:"
    lite = sqlite_checkpointer(path)
    yield lite
    lite.conn.close()


def test_prune_keeps_newest_and_the_graph_resumes(saver: BaseCheckpointSaver[Any]) -> None:
    app = build_counter_graph(saver)
    for _ in range(5):
        app.invoke({"fail": False}, cfg("mem-a"))
    app.invoke({"fail": False}, cfg("mem-b"))
    before = checkpoint_ids(saver, "mem-a")
    assert len(before) == 20  # 4 checkpoints per invoke: input, start, bump, check
    other_before = checkpoint_ids(saver, "mem-b")

    deleted = prune_checkpoints(saver, "mem-a", keep=3)

    assert deleted == 17
    after = checkpoint_ids(saver, "mem-a")
    assert after == before[:3]  # list() is newest first
    assert checkpoint_ids(saver, "mem-b") == other_before
    # The oldest kept checkpoint lost its (deleted) parent.
    oldest = saver.get_tuple({"configurable": {"thread_id": "mem-a", "checkpoint_id": after[-1]}})
    assert oldest is not None and oldest.parent_config is None
    assert app.get_state(cfg("mem-a")).values["n"] == 5
    app.invoke({"fail": False}, cfg("mem-a"))
    assert app.get_state(cfg("mem-a")).values == {"n": 6, "ids": ["m6"], "fail": False}
    assert prune_checkpoints(saver, "mem-a", keep=3) == 4
    assert prune_checkpoints(saver, "mem-a", keep=3) == 0


def test_prune_keeps_pending_writes_of_a_failed_run(saver: BaseCheckpointSaver[Any]) -> None:
    app = build_counter_graph(saver)
    app.invoke({"fail": False}, cfg("mem-x"))
    with pytest.raises(RuntimeError, match="planned failure"):
        app.invoke({"fail": True}, cfg("mem-x"))
    latest = saver.get_tuple(cfg("mem-x"))
    assert latest is not None and latest.pending_writes  # bump's successful write, kept for resume

    prune_checkpoints(saver, "mem-x", keep=1)

    assert len(checkpoint_ids(saver, "mem-x")) == 1
    kept = saver.get_tuple(cfg("mem-x"))
    assert kept is not None and kept.pending_writes == latest.pending_writes
    app.update_state(cfg("mem-x"), {"fail": False}, as_node="bump")
    app.invoke(None, cfg("mem-x"))
    assert app.get_state(cfg("mem-x")).values["n"] == 2  # bump did not run twice


def test_prune_removes_writes_of_deleted_checkpoints(tmp_path: Path) -> None:
    path = tmp_path / "ck.db"
    lite = sqlite_checkpointer(str(path))
    app = build_counter_graph(lite)
    for _ in range(3):
        app.invoke({"fail": False}, cfg("t"))
    prune_checkpoints(lite, "t", keep=2)
    lite.conn.close()
    with sqlite3.connect(path) as conn:
        kept = {r[0] for r in conn.execute("SELECT checkpoint_id FROM checkpoints WHERE thread_id = 't'")}
        written = {
            r[0] for r in conn.execute("SELECT DISTINCT checkpoint_id FROM writes WHERE thread_id = 't'")
        }
    assert len(kept) == 2
    assert written <= kept


def test_prune_in_memory_drops_unreferenced_blobs() -> None:
    mem = InMemorySaver()
    app = build_counter_graph(mem)
    for _ in range(4):
        app.invoke({"fail": False}, cfg("t"))
    prune_checkpoints(mem, "t", keep=1)
    ids_versions = {k[3] for k in mem.blobs if k[0] == "t" and k[2] == "ids"}
    assert len(ids_versions) == 1  # only the version the kept checkpoint references
    assert app.get_state(cfg("t")).values["ids"] == ["m4"]


def test_prune_argument_errors(saver: BaseCheckpointSaver[Any]) -> None:
    with pytest.raises(ValueError, match="keep must be at least 1"):
        prune_checkpoints(saver, "t", keep=0)
    assert prune_checkpoints(saver, "never-used", keep=3) == 0


def test_prune_rejects_unknown_savers() -> None:
    class Other(InMemorySaver):
        pass

    class Unknown(BaseCheckpointSaver[Any]):
        pass

    assert prune_checkpoints(Other(), "t") == 0  # subclasses of a supported saver work
    with pytest.raises(TypeError, match="cannot prune checkpoints of Unknown"):
        prune_checkpoints(Unknown(), "t")


def test_prune_refuses_delta_channel_threads(tmp_path: Path) -> None:
    lite = sqlite_checkpointer(str(tmp_path / "ck.db"))
    app = build_counter_graph(lite)
    for _ in range(2):
        app.invoke({"fail": False}, cfg("t"))
    # Simulate what a DeltaChannel leaves in checkpoint metadata.
    lite.conn.execute(
        "UPDATE checkpoints SET metadata = ? WHERE thread_id = 't'",
        (b'{"counters_since_delta_snapshot": {"ids": 1}}',),
    )
    lite.conn.commit()
    with pytest.raises(NotImplementedError, match="DeltaChannel"):
        prune_checkpoints(lite, "t", keep=1)
    with pytest.raises(DeltaChannelPruneError) as refused:  # a named, deliberate refusal
        prune_checkpoints(lite, "t", keep=1)
    assert refused.value.thread_id == "t"
    assert len(checkpoint_ids(lite, "t")) == 8  # nothing deleted
    lite.conn.close()


def test_sqlite_checkpointer_uses_wal_and_accepts_urls(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    saver, close = open_checkpointer(None)
    assert isinstance(saver, SqliteSaver)
    build_counter_graph(saver).invoke({"fail": False}, cfg("t"))
    assert saver.conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    close()
    assert (tmp_path / "convmem.db").exists()

    url_saver, url_close = open_checkpointer(f"sqlite:///{tmp_path / 'other.db'}")
    assert isinstance(url_saver, SqliteSaver)
    build_counter_graph(url_saver).invoke({"fail": False}, cfg("t"))
    url_close()
    assert (tmp_path / "other.db").exists()


def test_checkpointer_shares_the_store_file(tmp_path: Path) -> None:
    from convmem_graph.store import MemoryStore

    store = MemoryStore.from_url(str(tmp_path / "both.db"))
    saver, close = open_checkpointer(store.url)
    build_counter_graph(saver).invoke({"fail": False}, cfg("mem_1"))
    store.ensure_memory("mem_1")
    close()
    store.close()
    with sqlite3.connect(tmp_path / "both.db") as conn:
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert {"checkpoints", "writes", "cm_memories", "cm_messages"} <= tables
