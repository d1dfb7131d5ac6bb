"""The databases tests run on: a SQLite file always, PostgreSQL where ``CONVMEM_TEST_POSTGRES_URL`` names one.

A behaviour meant to be the same on every backend is one test taking the ``backend_url`` fixture
(``tests/conftest.py``): it runs once per entry of :data:`BACKENDS`, on a new, empty database of its
own each time (a SQLite file in the test's ``tmp_path``; a PostgreSQL schema made for the test and
dropped after it), so the runs stay independent under pytest-xdist. The ``postgres`` run is marked
``integration`` and ``postgres`` (``-m "not integration"`` leaves the offline unit tier exactly);
it is skipped, with the reason, when the variable is unset, and fails when the variable names a
server it cannot reach. What only one backend does stays in a test of its own.
"""

from __future__ import annotations

import os

import pytest

# The same throwaway schema the benchmarks use: a URL on it, and a schema made and dropped.
from benchmarks._pg import schema_url as with_search_path
from benchmarks._pg import scratch_schema as fresh_schema
from convmem_graph.store.urls import libpq_url

__all__ = ["BACKENDS", "PG_ENV", "fresh_schema", "postgres_base_url", "with_search_path"]

PG_ENV = "CONVMEM_TEST_POSTGRES_URL"

#: The ``backend_url`` params: ids ``sqlite`` and ``postgres``.
BACKENDS = [
    pytest.param("sqlite", id="sqlite"),
    pytest.param("postgres", id="postgres", marks=[pytest.mark.integration, pytest.mark.postgres]),
]


def postgres_base_url() -> str:
    """The test server's URL: skips the test when :data:`PG_ENV` is unset, fails it when unreachable."""
    url = os.environ.get(PG_ENV, "").strip()
    if not url:
        pytest.skip(f"{PG_ENV} is not set: the PostgreSQL tests need a server")
    import psycopg

    try:
        psycopg.connect(libpq_url(url), connect_timeout=5).close()
    except psycopg.Error as exc:
        pytest.fail(f"{PG_ENV} is set but PostgreSQL is unreachable: {exc}")
    return url
