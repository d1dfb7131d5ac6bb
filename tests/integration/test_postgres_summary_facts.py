"""The summary's fact read on a real PostgreSQL: the old read's facts and summary text, turn after turn."""

from __future__ import annotations

import pytest

from tests.unit.nodes.test_summary_facts import FULL_MEMORY_STEPS, check_history

pytestmark = [pytest.mark.integration, pytest.mark.postgres]


@pytest.mark.parametrize("shape", ["only-plan", "only-like", "mixed"])
def test_a_full_memory_keeps_the_summary_of_the_old_read_on_postgres(fresh_pg_url: str, shape: str) -> None:
    """Booleans, the JSON column as psycopg decodes it, and the UNION's order, past the read limit."""
    check_history([("bulk", shape, 700, 7), *FULL_MEMORY_STEPS], 300, url=fresh_pg_url)
