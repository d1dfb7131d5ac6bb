"""A throwaway PostgreSQL schema for a benchmark: created fresh, dropped at the end."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager


def schema_url(url: str, schema: str) -> str:
    """``url`` whose sessions use ``schema`` first (libpq ``options``)."""
    from sqlalchemy.engine import make_url

    parsed = make_url(url)
    options = f"-csearch_path={schema}"
    if "options" in parsed.query:
        options = f"{parsed.query['options']} {options}"
    return parsed.update_query_dict({"options": options}).render_as_string(hide_password=False)


@contextmanager
def scratch_schema(url: str, prefix: str = "cm_bench") -> Iterator[str]:
    """Yield a URL of ``url``'s database whose tables go to a new schema, dropped afterwards."""
    import psycopg

    from convmem_graph.store.urls import libpq_url

    schema = f"{prefix}_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(libpq_url(url), autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
    try:
        yield schema_url(url, schema)
    finally:
        with psycopg.connect(libpq_url(url), autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA "{schema}" CASCADE')
