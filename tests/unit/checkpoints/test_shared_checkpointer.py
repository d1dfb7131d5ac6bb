"""convmem inside someone else's LangGraph app: one checkpointer, the app's threads stay intact.

The app keys its threads by user id, the common choice and also the natural memory id. convmem
must checkpoint on its own threads and prune and delete only those, with its own saver on the
app's database or with the app's saver object, on SQLite and on PostgreSQL (``backend_url``).
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Iterator, Sequence
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.base import BaseCheckpointSaver, ChannelVersions, Checkpoint, CheckpointMetadata
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.graph.state import CompiledStateGraph

from convmem_graph import ConvMemory
from convmem_graph.checkpoints import drop_legacy_checkpoints, thread_id_for
from convmem_graph.checkpoints import namespace as ns_module
from convmem_graph.graph import build_memory_graph
from convmem_graph.state import MemoryContext, RawInput
from convmem_graph.store import MemoryStore


def build_app(saver: BaseCheckpointSaver[Any]) -> CompiledStateGraph[Any, Any, Any, Any]:
    def reply(state: MessagesState) -> dict[str, Any]:
        return {"messages": [AIMessage(f"echo {len(state['messages'])}")]}

    g = StateGraph(MessagesState)
    g.add_node("reply", reply)
    g.add_edge(START, "reply")
    return g.compile(checkpointer=saver)


def app_cfg(thread: str = "u_1") -> Any:
    return {"configurable": {"thread_id": thread}}


def run_app(app: CompiledStateGraph[Any, Any, Any, Any], turns: int, user: str = "u_1") -> None:
    for i in range(turns):
        app.invoke({"messages": [HumanMessage(f"hello {i}")]}, app_cfg(user))


def count(saver: BaseCheckpointSaver[Any], thread: str) -> int:
    return sum(1 for _ in saver.list(app_cfg(thread)))


def exercise(
    mem: ConvMemory,
    app: CompiledStateGraph[Any, Any, Any, Any],
    saver: BaseCheckpointSaver[Any],
    user: str = "u_1",
) -> None:
    """App and convmem on one checkpointer, thread id = memory id = ``user``: the app's history survives."""
    run_app(app, 6, user)
    before = count(saver, user)
    assert len(app.get_state(app_cfg(user)).values["messages"]) == 12
    for i in range(4):  # more runs than keep_checkpoints, so convmem prunes its own thread
        mem.ingest(user, [{"role": "user", "content": f"I live in Hangzhou. ({i})"}], source="openai")
    assert count(saver, user) == before  # the app's thread is untouched
    assert 0 < count(saver, thread_id_for(user)) <= mem.config.keep_checkpoints
    run_app(app, 1, user)
    assert len(app.get_state(app_cfg(user)).values["messages"]) == 14  # resumed, not restarted
    assert mem.delete(user)
    assert count(saver, thread_id_for(user)) == 0
    assert count(saver, user) == before + 3  # one more invoke: input, loop, reply checkpoints
    assert len(app.get_state(app_cfg(user)).values["messages"]) == 14


@pytest.fixture
def app_saver(backend_url: str) -> Iterator[BaseCheckpointSaver[Any]]:
    """The application's own saver on ``backend_url`` (its own connection), as its docs set it up."""
    if "://" not in backend_url:  # a SQLite file
        lite = SqliteSaver(sqlite3.connect(backend_url, check_same_thread=False))
        yield lite
        lite.conn.close()
        return
    import psycopg
    from langgraph.checkpoint.postgres import PostgresSaver
    from psycopg.rows import dict_row

    from convmem_graph.store.urls import libpq_url

    conn = psycopg.connect(libpq_url(backend_url), autocommit=True, prepare_threshold=0, row_factory=dict_row)
    saver = PostgresSaver(conn)  # type: ignore[arg-type]
    saver.setup()
    yield saver
    conn.close()


def test_own_saver_on_the_apps_database(backend_url: str, app_saver: BaseCheckpointSaver[Any]) -> None:
    app = build_app(app_saver)
    with ConvMemory.open(backend_url) as mem:
        exercise(mem, app, app_saver)


def test_the_apps_saver_object(backend_url: str, app_saver: BaseCheckpointSaver[Any]) -> None:
    app = build_app(app_saver)
    with ConvMemory.open(backend_url, checkpointer=app_saver) as mem:
        assert mem.checkpointer is app_saver
        exercise(mem, app, app_saver)
    # The app's saver stays open: ConvMemory did not create it, so it does not close it.
    row = app_saver.conn.execute("SELECT 1 AS one").fetchone()  # type: ignore[attr-defined]
    assert row in ((1,), {"one": 1})


def test_the_apps_in_memory_saver() -> None:
    saver = InMemorySaver()
    app = build_app(saver)
    with ConvMemory.open("sqlite://", checkpointer=saver) as mem:
        exercise(mem, app, saver)


def test_checkpoint_url_and_checkpointer_are_exclusive() -> None:
    with pytest.raises(ValueError, match="not both"):
        ConvMemory.open("sqlite://", checkpoint_url="sqlite://", checkpointer=InMemorySaver())


class DelegatingSaver(BaseCheckpointSaver[Any]):
    """A saver type convmem does not know (like a third-party backend): it cannot be pruned."""

    def __init__(self, *, can_delete: bool = True) -> None:
        super().__init__()
        self.inner = InMemorySaver()
        self.can_delete = can_delete

    def get_tuple(self, config: Any) -> Any:
        return self.inner.get_tuple(config)

    def list(self, config: Any, **kwargs: Any) -> Iterator[Any]:
        return self.inner.list(config, **kwargs)

    def put(
        self, config: Any, checkpoint: Checkpoint, metadata: CheckpointMetadata, new_versions: ChannelVersions
    ) -> Any:
        return self.inner.put(config, checkpoint, metadata, new_versions)

    def put_writes(
        self, config: Any, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str = ""
    ) -> None:
        self.inner.put_writes(config, writes, task_id, task_path)

    def delete_thread(self, thread_id: str) -> None:
        if not self.can_delete:
            raise NotImplementedError
        self.inner.delete_thread(thread_id)


def test_unknown_saver_is_used_without_pruning_and_warns_once(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ns_module, "_warned", set())
    saver = DelegatingSaver()
    with (
        caplog.at_level(logging.WARNING, logger="convmem_graph"),
        ConvMemory.open("sqlite://", checkpointer=saver) as mem,
    ):
        for i in range(mem.config.keep_checkpoints + 1):  # one checkpoint per run ("exit")
            result = mem.ingest("u_1", [{"role": "user", "content": f"I like tea. {i}"}], source="openai")
            assert result.new_messages == 1  # no TypeError after the commit
        assert count(saver, thread_id_for("u_1")) > mem.config.keep_checkpoints  # not pruned
        assert mem.delete("u_1")
        assert count(saver, thread_id_for("u_1")) == 0
    warnings = [r for r in caplog.records if "cannot prune" in r.getMessage()]
    assert len(warnings) == 1 and "DelegatingSaver" in warnings[0].getMessage()


def test_saver_that_cannot_delete_threads_warns(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ns_module, "_warned", set())
    saver = DelegatingSaver(can_delete=False)
    with (
        caplog.at_level(logging.WARNING, logger="convmem_graph"),
        ConvMemory.open("sqlite://", checkpointer=saver) as mem,
    ):
        mem.ingest("u_1", [{"role": "user", "content": "I like tea."}], source="openai")
        assert mem.delete("u_1")  # the store's rows are gone; the saver keeps its thread
    assert any("cannot delete threads" in r.getMessage() for r in caplog.records)


def legacy_run(store: MemoryStore, saver: BaseCheckpointSaver[Any], memory_id: str) -> None:
    """What a pre-namespace version did: the lifecycle checkpointed on thread = memory id."""
    graph = build_memory_graph().compile(checkpointer=saver)
    ctx = MemoryContext(store=store, inputs=(RawInput([{"role": "user", "content": "hi"}], "openai"),))
    graph.invoke({"memory_id": memory_id}, app_cfg(memory_id), context=ctx)


def test_legacy_threads_are_dropped_only_when_wholly_convmems() -> None:
    saver = InMemorySaver()
    with ConvMemory.open("sqlite://", checkpointer=saver) as mem:
        legacy_run(mem.store, saver, "old_1")
        legacy_run(mem.store, saver, "u_1")
        app = build_app(saver)
        run_app(app, 2)  # the app shares thread "u_1" with the legacy convmem checkpoints
        mixed = count(saver, "u_1")
        assert drop_legacy_checkpoints(saver, ["old_1", "u_1", "never_seen"]) == 1
        assert count(saver, "old_1") == 0
        assert count(saver, "u_1") == mixed
        legacy_run(mem.store, saver, "old_2")
        assert mem.delete("old_2")
        assert count(saver, "old_2") == 0
