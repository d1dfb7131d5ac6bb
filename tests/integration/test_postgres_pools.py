"""Pooled PostgreSQL connections: runs reuse sessions, and a pooled session never keeps a lock."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import event, text

from convmem_graph.memory import ConvMemory

pytestmark = [pytest.mark.integration, pytest.mark.postgres]


def test_runs_reuse_pooled_sessions_and_release_their_advisory_locks(pg_url: str) -> None:
    with ConvMemory.open(pg_url) as mem:
        lock_engine = mem.store._pg_lock_engine()
        assert lock_engine is not None
        opened = {"store": 0, "lock": 0}

        def counter(name: str) -> Any:
            def on_connect(*_: Any) -> None:
                opened[name] += 1

            return on_connect

        event.listen(mem.store.engine, "connect", counter("store"))
        event.listen(lock_engine, "connect", counter("lock"))
        for i in range(12):
            turn = [
                {"role": "user", "content": f"我喜欢第{i}种水果。"},
                {"role": "assistant", "content": "好"},
            ]
            mem.ingest("pool_mem", turn, source="openai")
        # Twelve runs: a new session for each was the NullPool behaviour; now the pools' own.
        assert opened["lock"] <= 1, opened
        assert opened["store"] <= 2, opened
        with lock_engine.connect() as conn:
            pid = conn.execute(text("SELECT pg_backend_pid()")).scalar()
            held = conn.execute(
                text("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = :pid"), {"pid": pid}
            ).scalar()
        assert held == 0
        mem.delete("pool_mem")
