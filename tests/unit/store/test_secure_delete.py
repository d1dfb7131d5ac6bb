"""Freed cells are zeroed on every SQLite connection the store and its checkpointer open.

Whether deleted text lingers in a file's free pages must not depend on the build's default (ON on
Debian, OFF in SQLite's own) nor on which pooled connection did the work: before this was set at
connect, a connection that had run one ``delete_memory`` turned zeroing OFF for the rest of its
life, and the others kept the build's default.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from convmem_graph.checkpoints.sqlite import sqlite_checkpointer
from convmem_graph.models import Message
from convmem_graph.store import MemoryStore

T0 = 1_767_268_800_000


@pytest.fixture(params=["build default ON", "build default OFF"])
def build_default(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """Every new ``sqlite3`` connection starts with ``secure_delete`` as a build of that default would."""
    value = "ON" if request.param.endswith("ON") else "OFF"
    connect = sqlite3.connect

    def connect_with_default(*args: Any, **kwargs: Any) -> sqlite3.Connection:
        conn = connect(*args, **kwargs)
        conn.execute(f"PRAGMA secure_delete={value}")
        return conn

    monkeypatch.setattr(sqlite3, "connect", connect_with_default)
    yield value


def _secure_delete(store: MemoryStore) -> int:
    with store.read() as conn:
        return int(conn.exec_driver_sql("PRAGMA secure_delete").scalar_one())


def _message(mid: str, text: str, k: int) -> Message:
    return Message(id=mid, role="user", content=text, channel="im", source="t", timestamp_ms=T0 + k)


def test_every_store_connection_zeroes_freed_cells_before_and_after_a_delete(
    tmp_path: Path, build_default: str
) -> None:
    store = MemoryStore.from_url(str(tmp_path / "m.db"))
    try:
        store.add_messages("mem_a", [_message("m1", "My card is 4111", 0)])
        assert _secure_delete(store) == 1
        assert store.delete_memory("mem_a")
        # The same pooled connection after the delete (it was switched OFF here before).
        assert _secure_delete(store) == 1
        store.add_messages("mem_b", [_message("m2", "I like tea", 1)])
        assert _secure_delete(store) == 1
    finally:
        store.close()


def test_the_checkpointer_connection_zeroes_freed_cells(tmp_path: Path, build_default: str) -> None:
    saver = sqlite_checkpointer(str(tmp_path / "m.db"))
    try:
        assert saver.conn.execute("PRAGMA secure_delete").fetchone()[0] == 1
    finally:
        saver.conn.close()
