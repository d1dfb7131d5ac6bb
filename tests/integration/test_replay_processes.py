"""Two ``convmem replay`` processes on one PostgreSQL database at once.

Needs ``CONVMEM_TEST_POSTGRES_URL`` (skipped with the reason when unset, failed when set but
unreachable: see conftest). Each test works in its own fresh schema (``search_path`` in the URL,
which the store and the checkpointer both honour), dropped at the end. The reference is one
uninterrupted replay of the same LoCoMo archive into SQLite.
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from convmem_graph.store import MemoryStore
from convmem_graph.store.urls import libpq_url
from tests.backends import with_search_path
from tests.integration.replay_archives import (
    FullRun,
    convmem_parallel,
    db_state,
    locomo_full_run,
    replay_args,
)

pytestmark = [pytest.mark.integration, pytest.mark.postgres]


@pytest.fixture(scope="module")
def full_run(tmp_path_factory: pytest.TempPathFactory) -> FullRun:
    # 5 conversations, 10 memories: lifecycle runs cost more round trips on PostgreSQL.
    return locomo_full_run(tmp_path_factory, conversations=5)


@pytest.fixture
def pg_schema_url(pg_base_url: str) -> Iterator[str]:
    """A database URL on a fresh, empty schema of its own, dropped after the test.

    The tables are not created beforehand: the processes under test race to create them, as two
    workers on a new database do.
    """
    import psycopg

    schema = f"cm_replay_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(libpq_url(pg_base_url), autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
    url = with_search_path(pg_base_url, schema)
    try:
        yield url
    finally:
        with psycopg.connect(libpq_url(pg_base_url), autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA "{schema}" CASCADE')


def reports(*procs: subprocess.CompletedProcess[str]) -> list[dict[str, Any]]:
    """Assert every process exited cleanly and return their JSON reports."""
    out = []
    for proc in procs:
        assert proc.returncode == 0, f"{proc.args} exited {proc.returncode}\n{proc.stderr}"
        assert "Traceback" not in proc.stderr, proc.stderr
        out.append(json.loads(proc.stdout))
    return out


def test_two_shard_processes_at_once_equal_one_full_run(
    full_run: FullRun, pg_schema_url: str, tmp_path: Path
) -> None:
    first, second = reports(
        *convmem_parallel(
            replay_args(full_run.archive, pg_schema_url, "--shard", "0/2"),
            replay_args(full_run.archive, pg_schema_url, "--shard", "1/2"),
            cwd=tmp_path,
        )
    )
    assert db_state(pg_schema_url) == full_run.state
    # The shards split the memories and the messages between them.
    assert first["memories"] + second["memories"] == len(full_run.expected)
    assert first["new_messages"] + second["new_messages"] == sum(full_run.expected.values())


def test_two_processes_replaying_the_same_archive_store_everything_once(
    full_run: FullRun, pg_schema_url: str, tmp_path: Path
) -> None:
    first, second = reports(
        *convmem_parallel(
            replay_args(full_run.archive, pg_schema_url),
            replay_args(full_run.archive, pg_schema_url),
            cwd=tmp_path,
        )
    )
    state = db_state(pg_schema_url)
    # No lost and no duplicated message: every memory holds exactly its archive's messages, once.
    assert {m: s.messages for m, s in state.items()} == full_run.expected
    assert all(s.message_ids == s.messages for s in state.values())
    # Each message was new to exactly one of the two processes.
    assert first["new_messages"] + second["new_messages"] == sum(full_run.expected.values())
    # And the memories are the ones an uninterrupted single run builds.
    assert state == full_run.state


def test_two_processes_opening_a_new_database_at_once_do_not_deadlock(pg_schema_url: str) -> None:
    # Regression: the checkpointer's first-time setup runs CREATE INDEX CONCURRENTLY, which used
    # to wait forever on a second process blocked in pg_advisory_lock.
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "convmem_graph", "memories", "--json", "--db", pg_schema_url],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    for proc in procs:
        out, err = proc.communicate(timeout=90)
        assert proc.returncode == 0, err
        assert json.loads(out) == []
    store = MemoryStore.from_url(pg_schema_url)
    try:
        assert store.list_memories() == []
    finally:
        store.close()
