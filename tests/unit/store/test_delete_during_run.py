"""A memory's delete on SQLite waits for a run of it, and a run inserts its memory's row once.

On SQLite each store call of a run is its own transaction. Before ``delete_memory`` took the
memory's run lock, a delete landing between two of them was followed by the run's next
transaction making the memory row again and writing the rest of the run into the "deleted"
memory: half a memory. Now the delete waits for the run (as PostgreSQL's waits for the run's
advisory lock), which also lets a run insert its memory's row once instead of once per
transaction (``RunScope.run_row``).
"""

from __future__ import annotations

import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from convmem_graph.models import Message, VariableSpec
from convmem_graph.store import MemoryStore
from convmem_graph.store import locks as locks_module
from convmem_graph.store.transfer import export_memory, import_memory

T0 = 1_767_268_800_000
MID = "mem_del"
STEPS = 5


def _message(k: int) -> Message:
    text = f"message number {k} about tea"
    return Message(id=f"m{k}", role="user", content=text, channel="im", source="t", timestamp_ms=T0 + k)


def _step(run: MemoryStore, k: int) -> None:
    """The run's k-th write transaction: messages, a variable and a fact, in turn."""
    if k % 3 == 0:
        run.add_messages(MID, [_message(k)])
    elif k % 3 == 1:
        run.set_manual_variable(MID, "city", f"city {k}", now_ms=T0 + k)
    else:
        text = f"user likes tea number {k}"
        run.add_fragment(MID, text, category="preference", key=f"like:tea{k}", now_ms=T0 + k)


def _holdings(store: MemoryStore) -> dict[str, int]:
    """How many rows of the memory each part of it holds."""
    tables = ("cm_memories", "cm_messages", "cm_variables", "cm_fragments")
    with store.read() as conn:
        run = conn.exec_driver_sql
        sql = "SELECT count(*) FROM {} WHERE memory_id = ?"
        return {t: int(run(sql.format(t), (MID,)).scalar_one()) for t in tables}


def _full_run() -> dict[str, int]:
    return {
        "cm_memories": 1,
        "cm_messages": len([k for k in range(STEPS) if k % 3 == 0]),
        "cm_variables": 1,
        "cm_fragments": len([k for k in range(STEPS) if k % 3 == 2]),
    }


@pytest.fixture
def file_store(tmp_path: Path) -> Iterator[MemoryStore]:
    store = MemoryStore.from_url(str(tmp_path / "m.db"))
    try:
        yield store
    finally:
        store.close()


def _waiters(store: MemoryStore) -> int:
    entry = locks_module._REGISTRY.get((store._lock_scope, MID))
    return 0 if entry is None else entry.users


def _run_with_delete(
    store: MemoryStore, at: int, existed: bool, action: Callable[[MemoryStore], object] | None = None
) -> None:
    """A run of ``STEPS`` write transactions; another thread deletes the memory after step ``at``.

    ``action``: what the other thread does instead of the delete (an import replacing the memory).

    ``at == -1``: the delete is made (and done) before the run begins. Otherwise the run pauses
    after its step ``at`` until the delete is done or waits for the memory's lock.
    """
    store.define_variables(MID, [VariableSpec(name="city", infer=False)])
    if existed:
        store.add_messages(MID, [_message(100)])
    go, done = threading.Event(), threading.Event()
    errors: list[BaseException] = []

    def delete() -> None:
        go.wait()
        try:
            if action is None:
                store.delete_memory(MID)
            else:
                action(store)
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            errors.append(exc)
        done.set()

    deleter = threading.Thread(target=delete)
    deleter.start()
    if at == -1:
        go.set()
        done.wait(10)
    with store.run(MID) as run:
        for k in range(STEPS):
            _step(run, k)
            if k == at:
                go.set()
                deadline = time.monotonic() + 10
                # This thread holds the lock (one user): a second user is the delete, waiting.
                while not done.is_set() and _waiters(store) < 2 and time.monotonic() < deadline:
                    time.sleep(0.001)
    deleter.join(10)
    assert not deleter.is_alive()
    assert not errors, errors


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(at=st.integers(min_value=-1, max_value=STEPS - 1), existed=st.booleans())
def test_a_delete_during_a_run_leaves_no_half_memory(at: int, existed: bool) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        store = MemoryStore.from_url(str(Path(tmp) / "m.db"))
        try:
            _run_with_delete(store, at, existed)
            held = _holdings(store)
        finally:
            store.close()
    if at == -1:
        # The delete came first: the run made a new memory, all of it.
        assert held == _full_run()
    else:
        # The delete waited for the run: everything is gone, the run's writes too.
        assert held == dict.fromkeys(held, 0)


def _imported_document() -> dict[str, Any]:
    """An export of another memory: two messages and a fact of its own."""
    store = MemoryStore.from_url(":memory:")
    try:
        store.add_messages("mem_src", [_message(200), _message(201)])
        store.add_fragment(
            "mem_src", "user likes coffee", category="preference", key="like:coffee", now_ms=T0
        )
        return export_memory(store, "mem_src")
    finally:
        store.close()


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(at=st.integers(min_value=-1, max_value=STEPS - 1))
def test_an_import_replacing_the_memory_during_a_run_leaves_none_of_the_run(at: int) -> None:
    """The import waits for the run: the run's rest never lands in the imported memory."""
    doc = _imported_document()
    with tempfile.TemporaryDirectory() as tmp:
        store = MemoryStore.from_url(str(Path(tmp) / "m.db"))
        try:
            _run_with_delete(
                store, at, True, action=lambda s: import_memory(s, doc, memory_id=MID, replace=True)
            )
            held = _holdings(store)
            with store.read() as conn:
                texts = sorted(
                    str(t)
                    for (t,) in conn.exec_driver_sql(
                        "SELECT content FROM cm_messages WHERE memory_id = ?", (MID,)
                    )
                )
        finally:
            store.close()
    imported = sorted(m["content"] for m in doc["messages"])
    run_texts = sorted(_message(k).content for k in range(STEPS) if k % 3 == 0)
    if at == -1:
        # The import came first: the run wrote all of itself on top of it.
        assert texts == sorted(imported + run_texts)
        assert held["cm_fragments"] == 1 + _full_run()["cm_fragments"]
    else:
        # The import waited for the run and replaced the memory: nothing of the run is left.
        assert texts == imported
        assert held["cm_fragments"] == 1


def _count_ensures(store: MemoryStore, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    calls: list[str] = []
    backend: Any = store._backend
    ensure = backend.ensure_memory_row

    def counted(conn: Any, row: dict[str, Any]) -> bool:
        calls.append(row["memory_id"])
        return bool(ensure(conn, row))

    monkeypatch.setattr(backend, "ensure_memory_row", counted)
    return calls


def test_a_run_inserts_its_memory_row_once(file_store: MemoryStore, monkeypatch: pytest.MonkeyPatch) -> None:
    file_store.define_variables(MID, [VariableSpec(name="city", infer=False)])
    calls = _count_ensures(file_store, monkeypatch)
    with file_store.run(MID) as run:
        for k in range(STEPS):
            _step(run, k)
    assert calls == [MID]
    assert _holdings(file_store) == _full_run()
    # The next run inserts it again (another process may have deleted it in between).
    with file_store.run(MID) as run:
        _step(run, 0)
        _step(run, 1)
    assert calls == [MID, MID]
    # Another memory written inside the run is not held by it: each of its writes ensures it.
    with file_store.run(MID) as run:
        _step(run, 0)
        run.add_messages("mem_other", [_message(1)])
        run.add_messages("mem_other", [_message(2)])
        _step(run, 1)
    assert calls == [MID, MID, MID, "mem_other", "mem_other"]


def test_a_rolled_back_insert_is_made_again(file_store: MemoryStore, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _count_ensures(file_store, monkeypatch)
    with file_store.run(MID) as run:
        with pytest.raises(RuntimeError), run.transaction(MID):
            run.add_messages(MID, [_message(0)])
            raise RuntimeError("undo")
        assert _holdings(file_store)["cm_memories"] == 0
        run.add_messages(MID, [_message(1)])
        run.add_messages(MID, [_message(2)])
    assert calls == [MID, MID]
    assert _holdings(file_store)["cm_messages"] == 2


@pytest.mark.parametrize("on", ["store", "run"])
def test_a_delete_inside_the_run_is_followed_by_a_new_row(
    file_store: MemoryStore, monkeypatch: pytest.MonkeyPatch, on: str
) -> None:
    file_store.define_variables(MID, [VariableSpec(name="city", infer=False)])
    calls = _count_ensures(file_store, monkeypatch)
    with file_store.run(MID) as run:
        _step(run, 0)
        _step(run, 1)
        (file_store if on == "store" else run).delete_memory(MID)
        assert _holdings(file_store) == dict.fromkeys(_holdings(file_store), 0)
        _step(run, 3)  # messages: the row must be made again (its foreign keys need it)
        run.define_variables(MID, [VariableSpec(name="city", infer=False)])
        _step(run, 4)
    assert calls.count(MID) >= 2
    assert _holdings(file_store) == {"cm_memories": 1, "cm_messages": 1, "cm_variables": 1, "cm_fragments": 0}
