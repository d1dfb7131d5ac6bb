"""Retention (``purge_summarized_messages``) on a real PostgreSQL: the SQLite contract, unchanged."""

from __future__ import annotations

import pytest

from tests.unit.test_memory_retention import RetentionContract

pytestmark = [pytest.mark.integration, pytest.mark.postgres]


class TestPostgresRetention(RetentionContract):
    @pytest.fixture
    def url(self, pg_url: str) -> str:
        return pg_url
