"""Fact vectors on PostgreSQL: the SQLite contract (:func:`check_fact_vectors_round_trip`) on a server.

Run on both turn-vector paths: with pgvector where ``CREATE EXTENSION vector`` succeeds (the fact
vectors themselves are the portable table there too: the block scores a few hundred facts in
process) and with the extension hidden. The pgvector test skips, with the server's refusal as the
reason, where the extension cannot be created.
"""

from __future__ import annotations

import pytest

from tests.integration.test_postgres_turn_vectors import pgvector_url, portable  # noqa: F401 (fixtures)
from tests.unit.store.test_fact_vectors import check_fact_vectors_round_trip

pytestmark = [pytest.mark.integration, pytest.mark.postgres]


@pytest.mark.usefixtures("portable")
def test_fact_vectors_round_trip_postgres_portable(fresh_pg_url: str) -> None:
    check_fact_vectors_round_trip(fresh_pg_url)


def test_fact_vectors_round_trip_pgvector(pgvector_url: str) -> None:  # noqa: F811 (the fixture)
    check_fact_vectors_round_trip(pgvector_url)
