"""Numbered schema migrations on a real PostgreSQL: the SQLite contract, unchanged."""

from __future__ import annotations

import pytest

from tests.unit.store.test_migrations import MigrationContract

pytestmark = [pytest.mark.integration, pytest.mark.postgres]


class TestPostgresMigrations(MigrationContract):
    @pytest.fixture
    def url(self, fresh_pg_url: str) -> str:
        # A schema of its own: these tests drop and alter tables.
        return fresh_pg_url
