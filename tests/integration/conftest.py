"""Integration fixtures: a real PostgreSQL server from ``CONVMEM_TEST_POSTGRES_URL``.

Unset -> the PostgreSQL tests are skipped (with the reason). Set but unreachable -> they fail: a
configured server that is down must never pass as a skip. Each test session works in a fresh
schema (``search_path`` in the URL), dropped at the end.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from sqlalchemy.engine import make_url

from convmem_graph.store import MemoryStore
from convmem_graph.store.urls import libpq_url

PG_ENV = "CONVMEM_TEST_POSTGRES_URL"


def with_search_path(url: str, schema: str) -> str:
    """Return ``url`` whose sessions use ``schema`` first (libpq ``options``)."""
    parsed = make_url(url)
    options = f"-csearch_path={schema}"
    if "options" in parsed.query:
        options = f"{parsed.query['options']} {options}"
    return parsed.update_query_dict({"options": options}).render_as_string(hide_password=False)


@pytest.fixture(scope="session")
def pg_base_url() -> str:
    url = os.environ.get(PG_ENV, "").strip()
    if not url:
        pytest.skip(f"{PG_ENV} is not set: the PostgreSQL integration tests need a server")
    import psycopg

    try:
        psycopg.connect(libpq_url(url), connect_timeout=5).close()
    except psycopg.Error as exc:
        pytest.fail(f"{PG_ENV} is set but PostgreSQL is unreachable: {exc}")
    return url


@contextmanager
def _fresh_schema(base_url: str, prefix: str) -> Iterator[str]:
    """A URL on a new schema of the test server, dropped with everything in it afterwards."""
    import psycopg

    schema = f"{prefix}_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(libpq_url(base_url), autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
    try:
        yield with_search_path(base_url, schema)
    finally:
        with psycopg.connect(libpq_url(base_url), autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA "{schema}" CASCADE')


@pytest.fixture(scope="session")
def pg_url(pg_base_url: str) -> Iterator[str]:
    """A URL on a fresh schema of the test server (store and checkpoint tables both land there)."""
    with _fresh_schema(pg_base_url, "cm_test") as url:
        yield url


@pytest.fixture
def fresh_pg_url(pg_base_url: str) -> Iterator[str]:
    """Like ``pg_url``, but a schema of this test's own: for what must start from an empty database."""
    with _fresh_schema(pg_base_url, "cm_fresh") as url:
        yield url


@pytest.fixture
def fresh_pg_store(fresh_pg_url: str) -> Iterator[MemoryStore]:
    """A store on a schema of this test's own (``fresh_pg_url``), closed after the test."""
    store = MemoryStore.from_url(fresh_pg_url)
    yield store
    store.close()


@pytest.fixture(scope="module")
def pg_store(pg_url: str) -> Iterator[MemoryStore]:
    """One store on the session's PostgreSQL schema, shared by a module's tests."""
    store = MemoryStore.from_url(pg_url)
    yield store
    store.close()
