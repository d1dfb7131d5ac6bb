"""Turn vectors on PostgreSQL: the portable BYTEA path (this server has no pgvector), exact after delete."""

from __future__ import annotations

import pytest

from tests.unit.store.test_turn_vectors import check_vectors_round_trip

pytestmark = [pytest.mark.integration, pytest.mark.postgres]


def test_vectors_round_trip_postgres(fresh_pg_url: str) -> None:
    check_vectors_round_trip(fresh_pg_url)
