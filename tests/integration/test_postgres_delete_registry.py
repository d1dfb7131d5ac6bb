"""Delete by construction on a real PostgreSQL: the SQLite schema scan and delete contract, unchanged."""

from __future__ import annotations

import pytest

from tests.unit.store.test_registry import DeleteRegistryContract

pytestmark = [pytest.mark.integration, pytest.mark.postgres]


class TestPostgresDeleteRegistry(DeleteRegistryContract):
    @pytest.fixture
    def url(self, fresh_pg_url: str) -> str:
        # A schema of its own: the catalog scan must see only this test's tables.
        return fresh_pg_url
