"""Integration fixtures: a real PostgreSQL server from ``CONVMEM_TEST_POSTGRES_URL``.

Unset -> the PostgreSQL tests are skipped (with the reason). Set but unreachable -> they fail: a
configured server that is down must never pass as a skip. Each test session works in a fresh
schema (``search_path`` in the URL), dropped at the end. The server's URL (``pg_base_url``) and
the ``backend_url`` fixture both tiers use are in ``tests/conftest.py`` (helpers: ``tests/backends.py``).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from convmem_graph.store import MemoryStore
from tests.backends import fresh_schema


@pytest.fixture(scope="session")
def pg_url(pg_base_url: str) -> Iterator[str]:
    """A URL on a fresh schema of the test server (store and checkpoint tables both land there)."""
    with fresh_schema(pg_base_url, "cm_test") as url:
        yield url


@pytest.fixture
def fresh_pg_url(pg_base_url: str) -> Iterator[str]:
    """Like ``pg_url``, but a schema of this test's own: for what must start from an empty database."""
    with fresh_schema(pg_base_url, "cm_fresh") as url:
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
