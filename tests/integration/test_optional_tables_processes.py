"""Two processes racing the first writes of every optional table of one new SQLite file.

See :mod:`convmem_graph.store._optional`: the check and the ``CREATE`` run in the writer's
``BEGIN IMMEDIATE`` transaction, so each table is made once, by whichever process writes first,
and the other's write finds it. The unit tier has the two-connection race in one process
(``tests/unit/store/test_optional_tables.py``).
"""

from __future__ import annotations

import multiprocessing
import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any

from convmem_graph.server.bailian_schemas import ProfileSchemaStore
from convmem_graph.store import MemoryStore
from convmem_graph.store._optional import OPTIONAL_TABLE_NAMES
from tests.unit.store.test_optional_tables import FEATURES, MODEL


def _tables(path: str) -> set[str]:
    with closing(sqlite3.connect(path)) as conn:
        return {str(r[0]) for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}


def _race(path: str, barrier: Any, rounds: int) -> None:
    """One process's first writes of every feature, started with the other's (same file)."""
    store = MemoryStore.from_url(path)
    try:
        name = multiprocessing.current_process().name
        barrier.wait(timeout=60)
        for n in range(rounds):
            for feature, (write, _) in sorted(FEATURES.items()):
                write(store, f"{name}-{feature.replace(' ', '-')}", n)
        ProfileSchemaStore(store)
    finally:
        store.close()


def test_two_processes_racing_the_first_writes_make_each_table_once(tmp_path: Path) -> None:
    ctx = multiprocessing.get_context("spawn")
    for attempt in range(3):
        path = str(tmp_path / f"race{attempt}.db")
        MemoryStore.from_url(path).close()  # set up first: the race is the optional tables' only
        assert _tables(path) & OPTIONAL_TABLE_NAMES == set()
        barrier = ctx.Barrier(2)
        procs = [ctx.Process(target=_race, args=(path, barrier, 2), name=f"p{i}") for i in range(2)]
        for p in procs:
            p.start()
        for p in procs:
            p.join(180)
        assert [p.exitcode for p in procs] == [0, 0]
        assert _tables(path) & OPTIONAL_TABLE_NAMES == OPTIONAL_TABLE_NAMES
        store = MemoryStore.from_url(path)
        try:
            for proc in ("p0", "p1"):
                assert len(store.list_dead_letters(f"{proc}-dead-letters")) == 2
                assert store.missing_turn_vectors(f"{proc}-turn-vectors", MODEL) == []
        finally:
            store.close()
        with closing(sqlite3.connect(path)) as conn:
            assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
