"""Turn vectors in pgvector, on a PostgreSQL server where ``CREATE EXTENSION vector`` succeeds.

Migration 7 (:func:`enable_pgvector`) tries ``CREATE EXTENSION IF NOT EXISTS vector`` in a
savepoint. Where it succeeds (or the extension is there already) it creates
``cm_turn_pgvectors (memory_id, model, seq, dims, vec halfvec)`` keyed by ``(memory_id, model,
seq)`` and copies the vectors stored so far into it; where it fails (no pgvector on the server, or
no right to create it) nothing changes and the portable path of :mod:`convmem_graph.store._vectors`
serves the database. The migration is recorded either way: a database set up before pgvector was
installed stays portable until :func:`enable_pgvector` is run on it again.

``cm_turn_vectors`` stays the record of which turns have a vector (the resumable embedding reads
it); this table is its searchable copy, written and deleted in the same statements' transaction,
so delete, purge and import keep both exact. A search here is one statement: an exact scan of the
memory's rows through the primary key, ordered by cosine distance (``<=>``), which pgvector
computes in C over ``halfvec`` (float16, the same precision the portable path stores). It serves
a process that has no fresh matrix of the memory cached (:func:`~convmem_graph.store._vectors.dense_search`
has a thread read it meanwhile): with the matrix warm, numpy is faster from ~10k turns on.

A version older than migration 7 writing to such a database (a rolling upgrade) writes and
deletes ``cm_turn_vectors`` only: its new vectors are missing here (those turns are found by their
words) and the vectors of turns it deletes stay here until this version deletes the memory or
runs :func:`enable_pgvector` again, which makes the copy exact (a search never returns a turn
whose message is gone).

Why no HNSW index: search is always within one memory, and a global HNSW index filtered by memory
returns ``ef_search`` candidates before the filter (iterative scans help, but a small memory in a
large table still walks far). Measured in ``benchmarks/README.md`` (issue 23, "pgvector").

Types and operators are qualified with the extension's schema: the store's ``search_path`` may
not hold it (the extension is per database, its types live in the schema it was created in).
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Sequence
from typing import TYPE_CHECKING

from sqlalchemy import ColumnElement, Connection, Engine, any_, column, delete, func, select, table

from convmem_graph.store.schema import messages

if TYPE_CHECKING:
    from numpy import ndarray

__all__ = [
    "PGVECTOR_TABLE",
    "enable_pgvector",
    "pg_delete_matching",
    "pg_delete_seqs",
    "pg_search",
    "pg_write",
    "pgvector_schema",
]

logger = logging.getLogger(__name__)

PGVECTOR_TABLE = "cm_turn_pgvectors"
_TABLE = table(PGVECTOR_TABLE, column("memory_id"), column("model"), column("seq"))

#: Per engine: the schema holding pgvector's types when this database has the table, else None.
_schemas: weakref.WeakKeyDictionary[Engine, str | None] = weakref.WeakKeyDictionary()


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def pgvector_schema(conn: Connection) -> str | None:
    """The quoted schema of pgvector's types when this database searches turns with it, else None.

    Read once per engine (two catalog reads); SQLite is never pgvector.
    """
    if conn.dialect.name != "postgresql":
        return None
    engine = conn.engine
    if engine in _schemas:
        return _schemas[engine]
    found = conn.exec_driver_sql(
        "SELECT n.nspname FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace "
        "WHERE e.extname = 'vector' AND to_regclass(%s) IS NOT NULL",
        (PGVECTOR_TABLE,),
    ).scalar()
    schema = _quote(str(found)) if found is not None else None
    _schemas[engine] = schema
    return schema


def enable_pgvector(conn: Connection) -> bool:
    """Migration 7: the pgvector table where the extension can be had; False (nothing done) where not.

    Copies the vectors already in ``cm_turn_vectors`` (float16 BLOBs) into it, a batch at a time.
    """
    if conn.dialect.name != "postgresql":
        return False
    # In ``public`` first: an extension lives in one schema of the database, and one created in a
    # store's own schema would go (CASCADE: with every other schema's vector columns) if that
    # schema were dropped. Then wherever the search path puts it (no ``public`` schema).
    for statement in (
        "CREATE EXTENSION IF NOT EXISTS vector SCHEMA public",
        "CREATE EXTENSION IF NOT EXISTS vector",
    ):
        savepoint = conn.begin_nested()
        try:
            conn.exec_driver_sql(statement)
        except Exception as exc:  # any refusal: not installed, no privilege, no such schema
            savepoint.rollback()
            refusal = exc
            continue
        savepoint.commit()
        break
    else:
        logger.info("pgvector is not available (%s): turn vectors stay on the portable path", refusal)
        return False
    schema = conn.exec_driver_sql(
        "SELECT n.nspname FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace "
        "WHERE e.extname = 'vector'"
    ).scalar_one()
    # An untyped halfvec column holds any model's dimension; ``dims`` keeps a search to one.
    conn.exec_driver_sql(
        f"CREATE TABLE IF NOT EXISTS {PGVECTOR_TABLE} (memory_id VARCHAR(256) NOT NULL, "
        "model VARCHAR(128) NOT NULL, seq BIGINT NOT NULL, dims INTEGER NOT NULL, "
        f"vec {_quote(str(schema))}.halfvec NOT NULL, PRIMARY KEY (memory_id, model, seq))"
    )
    _backfill(conn, _quote(str(schema)))
    _schemas.pop(conn.engine, None)
    return True


def _backfill(conn: Connection, schema: str) -> None:
    """Make the table hold exactly ``cm_turn_vectors``' rows: drop what it has alone, copy what it lacks.

    A database embedded before the extension was there, or written by an older version since.
    """
    conn.exec_driver_sql(
        f"DELETE FROM {PGVECTOR_TABLE} p WHERE NOT EXISTS (SELECT 1 FROM cm_turn_vectors v "
        "WHERE v.memory_id = p.memory_id AND v.model = p.model AND v.seq = p.seq)"
    )
    if conn.exec_driver_sql("SELECT 1 FROM cm_turn_vectors LIMIT 1").first() is None:
        return  # nothing to copy: numpy (an extra) is not needed
    import numpy as np  # the vectors were written by a process with the embeddings extra

    after: tuple[str, str, int] = ("", "", -1)
    while True:
        rows = conn.exec_driver_sql(
            "SELECT v.memory_id, v.model, v.seq, v.vec FROM cm_turn_vectors v "
            "WHERE (v.memory_id, v.model, v.seq) > (%s, %s, %s) AND NOT EXISTS (SELECT 1 FROM "
            f"{PGVECTOR_TABLE} p WHERE p.memory_id = v.memory_id AND p.model = v.model AND p.seq = v.seq) "
            "ORDER BY 1, 2, 3 LIMIT 2000",
            after,
        ).all()
        if not rows:
            return
        values = [
            (m, model, int(s), *_literal(np.frombuffer(bytes(b), dtype="<f2"))) for m, model, s, b in rows
        ]
        _insert(conn, schema, values)
        last = rows[-1]
        after = (str(last[0]), str(last[1]), int(last[2]))


def _literal(vector: ndarray) -> tuple[int, str]:
    """``(dims, '[x,y,...]')``: pgvector's text form (float16 holds ~3 significant digits; 5 kept)."""
    return int(vector.shape[0]), "[" + ",".join(f"{float(x):.5g}" for x in vector) + "]"


def _insert(conn: Connection, schema: str, values: list[tuple[str, str, int, int, str]]) -> None:
    conn.exec_driver_sql(
        f"INSERT INTO {PGVECTOR_TABLE} (memory_id, model, seq, dims, vec) "
        f"VALUES (%s, %s, %s, %s, CAST(%s AS {schema}.halfvec)) "
        "ON CONFLICT (memory_id, model, seq) DO UPDATE SET dims = EXCLUDED.dims, vec = EXCLUDED.vec",
        values,
    )


def pg_write(
    conn: Connection, schema: str, memory_id: str, model: str, rows: Sequence[tuple[int, ndarray]]
) -> None:
    """Write (or replace) unit-length ``(seq, vector)`` rows of one memory and model."""
    if rows:
        _insert(conn, schema, [(memory_id, model, seq, *_literal(vec)) for seq, vec in rows])


def pg_delete_seqs(
    conn: Connection, memory_id: str, seqs: Sequence[int], *, models: Sequence[str] | None = None
) -> None:
    """Delete the vectors of these seqs of one memory: every model's, or those stored under ``models``."""
    if seqs:
        gone = delete(_TABLE).where(_TABLE.c.memory_id == memory_id, _TABLE.c.seq.in_(list(seqs)))
        if models is not None:
            gone = gone.where(_TABLE.c.model.in_(list(models)))
        conn.execute(gone)


def pg_delete_matching(conn: Connection, memory_id: str, *where: ColumnElement[bool]) -> None:
    """Delete the vectors of the memory's messages matching ``where`` (all the memory's when none)."""
    gone = delete(_TABLE).where(_TABLE.c.memory_id == memory_id)
    if where:
        # The seqs as an array probing the key, not ``seq IN (subquery)``: a generic plan of that
        # may join a scan of the whole table (as the episodic index's delete did, issue 24).
        chosen = select(messages.c.seq).where(messages.c.memory_id == memory_id, *where)
        gone = gone.where(_TABLE.c.seq == any_(func.array(chosen.scalar_subquery())))
    conn.execute(gone)


def pg_search(
    conn: Connection, schema: str, memory_id: str, model: str, query: ndarray, k: int
) -> dict[int, float]:
    """The ``k`` turns of the memory nearest the unit ``query``: ``{seq: cosine}``, best first."""
    dims, literal = _literal(query)
    rows = conn.exec_driver_sql(
        f"SELECT seq, vec OPERATOR({schema}.<=>) CAST(%s AS {schema}.halfvec) AS d FROM {PGVECTOR_TABLE} "
        "WHERE memory_id = %s AND model = %s AND dims = %s ORDER BY d LIMIT %s",
        (literal, memory_id, model, dims, k),
    )
    return {int(seq): 1.0 - float(distance) for seq, distance in rows}
