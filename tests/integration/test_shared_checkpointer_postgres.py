"""convmem and an app on one PostgreSQL database: the app's threads survive ingest, prune and delete."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import psycopg
import pytest
from langgraph.checkpoint.postgres import PostgresSaver
from psycopg.rows import dict_row

from convmem_graph import ConvMemory
from convmem_graph.store.urls import libpq_url
from tests.unit.checkpoints.test_shared_checkpointer import build_app, exercise

pytestmark = [pytest.mark.integration, pytest.mark.postgres]


@pytest.fixture
def app_saver(pg_url: str) -> Iterator[PostgresSaver]:
    """The application's own saver (its own connection), as its docs set it up."""
    conn = psycopg.connect(libpq_url(pg_url), autocommit=True, prepare_threshold=0, row_factory=dict_row)
    saver = PostgresSaver(conn)  # type: ignore[arg-type]
    saver.setup()
    yield saver
    conn.close()


def test_convmem_own_saver_on_the_apps_database(pg_url: str, app_saver: PostgresSaver) -> None:
    user = f"u_{uuid.uuid4().hex[:8]}"
    with ConvMemory.open(pg_url) as mem:
        exercise(mem, build_app(app_saver), app_saver, user)


def test_convmem_on_the_apps_postgres_saver(pg_url: str, app_saver: PostgresSaver) -> None:
    user = f"u_{uuid.uuid4().hex[:8]}"
    with ConvMemory.open(pg_url, checkpointer=app_saver) as mem:
        exercise(mem, build_app(app_saver), app_saver, user)
    assert app_saver.conn.execute("SELECT 1 AS one").fetchone() == {"one": 1}
