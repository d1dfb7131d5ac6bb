"""Issue 10 hardening contracts on a real PostgreSQL: tampered imports, delete forgets everything."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from convmem_graph.store import MemoryStore
from tests.unit.store.test_transfer_validation import ImportHardeningContract
from tests.unit.test_memory_delete import DeleteContract

pytestmark = [pytest.mark.integration, pytest.mark.postgres]


@pytest.fixture(scope="module")
def pg_store(pg_url: str) -> Iterator[MemoryStore]:
    store = MemoryStore.from_url(pg_url)
    yield store
    store.close()


class TestPostgresImportHardening(ImportHardeningContract):
    @pytest.fixture
    def store(self, pg_store: MemoryStore) -> MemoryStore:
        return pg_store


class TestPostgresDelete(DeleteContract):
    @pytest.fixture
    def url(self, pg_url: str) -> str:
        return pg_url
