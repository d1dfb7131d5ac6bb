"""Fact vectors on PostgreSQL with pgvector: the contract (:func:`check_fact_vectors_round_trip`) on a server.

The portable turn-vector path runs the same contract beside SQLite's, over ``backend_url``, in
``tests/unit/store/test_fact_vectors.py``. Here the turn vectors use pgvector where ``CREATE
EXTENSION vector`` succeeds (the fact vectors themselves are the portable table there too: the
block scores a few hundred facts in process); the test skips, with the server's refusal as the
reason, where the extension cannot be created.
"""

from __future__ import annotations

import pytest

from tests.integration.test_postgres_turn_vectors import pgvector_url  # noqa: F401 (a fixture)
from tests.unit.store.test_fact_vectors import check_fact_vectors_round_trip

pytestmark = [pytest.mark.integration, pytest.mark.postgres]


def test_fact_vectors_round_trip_pgvector(pgvector_url: str) -> None:  # noqa: F811 (the fixture)
    check_fact_vectors_round_trip(pgvector_url)
