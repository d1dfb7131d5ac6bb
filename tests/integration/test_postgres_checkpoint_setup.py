"""Checkpoint tables set up by several processes at once on a new database: one at a time, no lock left."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psycopg
import pytest

from convmem_graph.store.urls import libpq_url

pytestmark = [pytest.mark.integration, pytest.mark.postgres]

_SETUP = textwrap.dedent(
    """
    import sys, time
    from convmem_graph.checkpoints import postgres_checkpointer

    url, start_at = sys.argv[1], float(sys.argv[2])
    while time.time() < start_at:
        time.sleep(0.002)
    saver = postgres_checkpointer(url)
    saver.conn.close()
    """
)


def test_processes_setting_up_together_take_turns(fresh_pg_url: str, tmp_path: Path) -> None:
    script = tmp_path / "setup.py"
    script.write_text(_SETUP, encoding="utf-8")
    start_at = str(time.time() + 4.0)
    procs = [
        subprocess.Popen([sys.executable, str(script), fresh_pg_url, start_at], stderr=subprocess.PIPE)
        for _ in range(3)
    ]
    for proc in procs:
        assert proc.wait(timeout=120) == 0, proc.stderr.read().decode()[-2000:]  # type: ignore[union-attr]
    with psycopg.connect(libpq_url(fresh_pg_url)) as conn:
        versions = conn.execute("SELECT count(*), max(v) FROM checkpoint_migrations").fetchone()
        invalid = conn.execute(
            "SELECT count(*) FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid "
            "WHERE c.relnamespace = current_schema()::regnamespace AND NOT i.indisvalid"
        ).fetchone()
        leases = conn.execute("SELECT count(*) FROM convmem_setup_leases").fetchone()
    from langgraph.checkpoint.postgres import PostgresSaver

    migrations = len(PostgresSaver.MIGRATIONS)
    assert versions == (migrations, migrations - 1)  # every migration recorded once
    assert invalid == (0,)  # no index left half-built by a concurrent CREATE INDEX CONCURRENTLY
    assert leases == (0,)  # the lease was given back


def test_creating_the_lease_table_waits_for_a_concurrent_creator(fresh_pg_url: str) -> None:
    """Two concurrent ``CREATE TABLE IF NOT EXISTS`` can fail on the catalog (``type ... already exists``,
    seen in CI behind PgBouncer), so the lease table is created under a transaction lock: a process
    holding it makes the next one wait, and the next one then finds the table and goes on."""
    import threading

    from psycopg.rows import dict_row
    from psycopg_pool import ConnectionPool

    from convmem_graph.checkpoints.postgres import _LEASE_TABLE_LOCK_KEY, _setup_lease

    url = libpq_url(fresh_pg_url)
    held: list[bool] = []
    errors: list[BaseException] = []
    with psycopg.connect(url) as creator:  # a transaction, as the other process's creation is
        creator.execute("SELECT pg_advisory_xact_lock(%s)", (_LEASE_TABLE_LOCK_KEY,))
        creator.execute(
            "CREATE TABLE convmem_setup_leases "
            "(name TEXT PRIMARY KEY, owner TEXT NOT NULL, expires_at TIMESTAMPTZ NOT NULL)"
        )
        with ConnectionPool(
            url, min_size=1, max_size=1, kwargs={"autocommit": True, "row_factory": dict_row}
        ) as pool:

            def take() -> None:
                try:
                    with _setup_lease(pool) as got:
                        held.append(got)
                except BaseException as exc:  # collected: the thread's failure must fail the test
                    errors.append(exc)

            thread = threading.Thread(target=take)
            thread.start()
            thread.join(timeout=1.0)
            assert thread.is_alive()  # waiting on the creator's lock, not racing it
            creator.commit()
            thread.join(timeout=30)
            assert not thread.is_alive()
    assert errors == []
    assert held == [True]
