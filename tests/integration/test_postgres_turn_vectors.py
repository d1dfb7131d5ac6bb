"""Turn vectors on PostgreSQL, both paths: pgvector where the server has it, and the portable BYTEA one.

The same contract (:func:`check_vectors_round_trip`: half embedded, resumable, purge, import,
delete) runs on each (the portable one beside SQLite's, over ``backend_url``, in
``tests/unit/store/test_turn_vectors.py``); the pgvector one also checks that its searchable copy
holds exactly the turns ``cm_turn_vectors`` does after every step, and that its search returns
what the portable path does. The pgvector tests skip, with the server's refusal as the reason,
where ``CREATE EXTENSION vector`` fails (Debian's PostgreSQL 15 has no pgvector package).
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import psycopg
import pytest
from sqlalchemy import text

from convmem_graph.store import MemoryStore, _pgvector, _vectors, migrations
from convmem_graph.store._pgvector import PGVECTOR_TABLE, enable_pgvector
from convmem_graph.store.urls import libpq_url
from tests.unit.store.test_turn_vectors import (
    _search,
    _store_with_vectors,
    check_older_text_form,
    check_vectors_round_trip,
)

pytestmark = [pytest.mark.integration, pytest.mark.postgres]


@pytest.fixture
def pgvector_url(fresh_pg_url: str) -> str:
    """``fresh_pg_url`` on a server where ``CREATE EXTENSION vector`` succeeds (else the test skips)."""
    with psycopg.connect(libpq_url(fresh_pg_url)) as conn:
        try:
            conn.execute("CREATE EXTENSION IF NOT EXISTS vector SCHEMA public")
        except psycopg.Error as exc:
            pytest.skip(f"pgvector is not available on this server (CREATE EXTENSION vector failed: {exc})")
        # Kept: the extension is the database's, shared with every schema and run.
        conn.commit()
    return fresh_pg_url


def _has_table(url: str, name: str) -> bool:
    store = MemoryStore.from_url(url)
    try:
        with store.read() as conn:
            return bool(conn.execute(text("SELECT to_regclass(:t) IS NOT NULL"), {"t": name}).scalar())
    finally:
        store.close()


def test_vectors_round_trip_pgvector(pgvector_url: str) -> None:
    check_vectors_round_trip(pgvector_url, copies=(PGVECTOR_TABLE,))
    assert _has_table(pgvector_url, PGVECTOR_TABLE)


def test_older_text_form_pgvector(pgvector_url: str) -> None:
    check_older_text_form(pgvector_url, copies=(PGVECTOR_TABLE,))


def test_pgvector_search_matches_the_portable_path(
    pgvector_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    rng = np.random.default_rng(11)
    matrix = rng.standard_normal((600, 64)).astype(np.float32)
    unit = matrix / np.linalg.norm(matrix, axis=1, keepdims=True)
    store, seqs = _store_with_vectors(pgvector_url, matrix)
    index = {s: i for i, s in enumerate(seqs)}
    try:
        queries = rng.standard_normal((20, 64)).astype(np.float32)
        sql_calls = _count_sql_searches(monkeypatch)
        monkeypatch.setattr(_vectors, "_warm_later", lambda *args: None)  # no cache: every search in SQL
        _vectors._cache.clear()
        native = [_search(store, q, 10) for q in queries]
        assert sql_calls == [1] * len(queries)
        monkeypatch.setattr(_vectors, "pgvector_schema", lambda conn: None)
        numpy = [_search(store, q, 10) for q in queries]
        shared = 0
        for q, by_sql, by_numpy in zip(queries, native, numpy, strict=True):
            exact = unit @ (q / np.linalg.norm(q))
            assert len(by_sql) == 10
            assert list(by_sql.values()) == sorted(by_sql.values(), reverse=True)
            # Cosines of the float16-stored vectors (either path), to float16's precision.
            assert max(abs(c - exact[index[s]]) for s, c in by_sql.items()) < 2e-3
            shared += len(set(by_sql) & set(by_numpy))
        # Only near-ties (cosines within float16's rounding) may be ordered differently.
        assert shared / (10 * len(queries)) >= 0.97
        # A query of another dimension finds nothing (not an error from pgvector).
        monkeypatch.undo()
        assert _search(store, rng.standard_normal(32).astype(np.float32), 5) == {}
    finally:
        store.close()


def _count_sql_searches(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Patch pgvector's search to append 1 to the returned list on every call."""
    calls: list[int] = []
    search = _vectors.pg_search

    def counted(*args: Any, **kwargs: Any) -> dict[int, float]:
        calls.append(1)
        return search(*args, **kwargs)

    monkeypatch.setattr(_vectors, "pg_search", counted)
    return calls


def _wait_cached(store: MemoryStore, model: str = "rand", mid: str = "m") -> None:
    key = (id(store.engine), mid, _vectors.vector_key(model))
    deadline = time.monotonic() + 30
    while key not in _vectors._cache or _vectors._warming:
        assert time.monotonic() < deadline, "the cache was not warmed within 30 s"
        time.sleep(0.02)


def test_pgvector_answers_until_this_process_has_the_matrix(
    pgvector_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    rng = np.random.default_rng(13)
    matrix = rng.standard_normal((400, 32)).astype(np.float32)
    store, seqs = _store_with_vectors(pgvector_url, matrix)
    try:
        _vectors._cache.clear()
        sql_calls = _count_sql_searches(monkeypatch)
        query = rng.standard_normal(32).astype(np.float32)
        cold = _search(store, query, 5)
        assert len(sql_calls) == 1  # nothing cached: the database answered
        _wait_cached(store)
        assert _search(store, query, 5) == pytest.approx(cold, abs=2e-3)
        assert len(sql_calls) == 1  # cached now: numpy answered, the same turns
        # A replaced vector renews the memory's token: the database answers (with the new vector)
        # until the thread has read the matrix again.
        store.save_turn_vectors("m", "rand", [(seqs[7], query.tolist())])
        assert next(iter(_search(store, query, 5))) == seqs[7]
        assert len(sql_calls) == 2
        _wait_cached(store)
        assert next(iter(_search(store, query, 5))) == seqs[7]
        assert len(sql_calls) == 2
    finally:
        store.close()


def test_enabling_pgvector_copies_the_vectors_stored_before(
    pgvector_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A database embedded while the server had no pgvector: migration 7 recorded, no table.
    monkeypatch.setattr(migrations, "enable_pgvector", lambda conn: False)
    rng = np.random.default_rng(12)
    matrix = rng.standard_normal((300, 32)).astype(np.float32)
    store, seqs = _store_with_vectors(pgvector_url, matrix)
    monkeypatch.undo()
    try:
        query = rng.standard_normal(32).astype(np.float32)
        before = _search(store, query, 8)
        with store.read() as conn:
            assert _pgvector.pgvector_schema(conn) is None
        with store.schema_transaction() as conn:
            assert enable_pgvector(conn)
        with store.read() as conn:
            assert _pgvector.pgvector_schema(conn) is not None
            copied = conn.execute(text(f"SELECT count(*) FROM {PGVECTOR_TABLE}")).scalar()
        assert copied == len(seqs)
        after = _search(store, query, 8)
        assert list(after) == list(before)
        # An older version wrote and deleted cm_turn_vectors alone meanwhile: run again, exact again.
        with store.transaction("m") as conn:
            conn.execute(text("DELETE FROM cm_turn_vectors WHERE seq = :s"), {"s": seqs[0]})
            conn.execute(text(f"DELETE FROM {PGVECTOR_TABLE} WHERE seq = :s"), {"s": seqs[1]})
        with store.schema_transaction() as conn:
            assert enable_pgvector(conn)
        with store.read() as conn:
            keys = "SELECT memory_id, model, seq FROM {} ORDER BY 1, 2, 3"
            assert (
                conn.execute(text(keys.format(PGVECTOR_TABLE))).all()
                == conn.execute(text(keys.format("cm_turn_vectors"))).all()
            )
            assert conn.execute(text(f"SELECT count(*) FROM {PGVECTOR_TABLE}")).scalar() == len(seqs) - 1
    finally:
        store.close()


def test_the_vectors_command_enables_pgvector_on_a_database_set_up_before_it(
    pgvector_url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from convmem_graph.cli import main

    # Embedded while the server had no pgvector: migration 7 recorded, no searchable copy.
    monkeypatch.setattr(migrations, "enable_pgvector", lambda conn: False)
    matrix = np.random.default_rng(13).standard_normal((120, 16)).astype(np.float32)
    store, seqs = _store_with_vectors(pgvector_url, matrix)
    store.close()
    monkeypatch.undo()
    assert not _has_table(pgvector_url, PGVECTOR_TABLE)
    assert main(["--db", pgvector_url, "vectors", "enable-pgvector"]) == 0
    assert capsys.readouterr().out == f"pgvector enabled: {len(seqs)} turn vectors in {PGVECTOR_TABLE}\n"
    assert _has_table(pgvector_url, PGVECTOR_TABLE)
    # Run again: nothing left to copy, the same count, no error.
    assert main(["--db", pgvector_url, "vectors", "enable-pgvector"]) == 0
    assert capsys.readouterr().out == f"pgvector enabled: {len(seqs)} turn vectors in {PGVECTOR_TABLE}\n"


def test_the_vectors_command_says_why_when_the_server_refuses_pgvector(
    fresh_pg_url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from convmem_graph.cli import main

    store = MemoryStore.from_url(fresh_pg_url)
    store.close()
    # As on a server without the package: CREATE EXTENSION fails, the command exits 1 and says so.
    real_exec = _pgvector.Connection.exec_driver_sql

    def refuse(conn: Any, statement: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(statement, str) and statement.startswith("CREATE EXTENSION"):
            raise RuntimeError('extension "vector" is not available')
        return real_exec(conn, statement, *args, **kwargs)

    monkeypatch.setattr(_pgvector.Connection, "exec_driver_sql", refuse)
    assert main(["--db", fresh_pg_url, "vectors", "enable-pgvector"]) == 1
    err = capsys.readouterr().err
    assert "CREATE EXTENSION vector was refused" in err and "portable path" in err
