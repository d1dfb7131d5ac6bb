"""PostgreSQL's policy for the memory store: the schema lock and per-memory advisory locks.

Every lock is transaction-scoped (``pg_advisory_xact_lock``), so the store works behind a
transaction-mode pooler (PgBouncer). :mod:`convmem_graph.store.sqlite` is the other backend.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Any, NamedTuple

from sqlalchemy import Connection, Engine, Row, text

from convmem_graph.store import _fact_queries as FQ
from convmem_graph.store import _queries as Q
from convmem_graph.store._episode_search import EPISODE_TABLE
from convmem_graph.store._messages import INSERT_COLUMNS, RowWriter
from convmem_graph.store.engine import advisory_key, dumps
from convmem_graph.store.episodes import pg_index_terms, pg_terms_sql
from convmem_graph.store.schema import add_postgres_options, memories, messages, snapshots

__all__ = ["SCHEMA_LOCK_KEY", "PgFollow", "PgStamp", "PostgresBackend", "int32_pair"]

#: "cm_schem": serializes table creation across processes (one bigint key).
SCHEMA_LOCK_KEY = 0x636D5F736368656D
_SCHEMA_LOCK = text("SELECT pg_advisory_xact_lock(:k)")
# Two-int key space for memories: never meets the one-bigint schema and setup locks.
_XACT_LOCK = text("SELECT pg_advisory_xact_lock(CAST(:a AS integer), CAST(:b AS integer))")


def int32_pair(key: int) -> tuple[int, int]:
    """Split a 64-bit advisory key into the two signed 32-bit halves of the two-int lock space."""
    hi, lo = (key >> 32) & 0xFFFFFFFF, key & 0xFFFFFFFF
    return (hi - (1 << 32) if hi >= 1 << 31 else hi), (lo - (1 << 32) if lo >= 1 << 31 else lo)


class PostgresBackend:
    """What the store does differently on PostgreSQL."""

    name = "postgresql"
    #: Writers of one memory take turns on its transaction-scoped advisory lock.
    locks_memories = True
    #: ``add_messages`` inserts with ``RETURNING`` (the new seqs, indexed in the same statement).
    returns_rows = True
    #: No write gate: the server orders writers.
    gate = None

    def is_set_up(self, engine: Engine) -> bool:
        """Always set up on open, under the schema lock: the pending migrations are read there."""
        return False

    def begin_setup(self, conn: Connection) -> None:
        """Take the schema lock and set the table options only PostgreSQL's DDL reads."""
        self.schema_lock(conn)
        add_postgres_options()

    def set_up(self, conn: Connection, steps: Callable[[Connection], None]) -> None:
        """Run the set-up ``steps`` (under the schema lock :meth:`begin_setup` took)."""
        steps(conn)

    def end_setup(self, conn: Connection) -> None:
        """Nothing to stamp: the migration record is the state."""

    def schema_lock(self, conn: Connection) -> None:
        """Serialize schema changes across processes (two concurrent ``CREATE TABLE`` can fail)."""
        conn.execute(_SCHEMA_LOCK, {"k": SCHEMA_LOCK_KEY})

    def hold_memory(self, memory_id: str) -> AbstractContextManager[None]:
        """Nothing beyond the run's transaction: its ``pg_advisory_xact_lock`` holds other processes off."""
        return nullcontext()

    def lock_memory(self, conn: Connection, memory_id: str) -> None:
        """Take the memory's ``pg_advisory_xact_lock`` in the current transaction."""
        hi, lo = int32_pair(advisory_key(memory_id))
        conn.execute(_XACT_LOCK, {"a": hi, "b": lo})

    @staticmethod
    def message_writer(*, now_ms: int, index: bool, stamped: list[PgStamp] | None = None) -> RowWriter:
        """The insert of a batch's new message rows, which also indexes them and stamps the memory.

        One statement for the whole batch, its rows sent as one JSON array: one round trip and one
        executor run on the server, and one C-speed dump instead of an array per column (psycopg
        builds text arrays element by element in Python). The same statement indexes the new rows
        in the episodic index (``index``), drops the cached snapshot, moves ``updated_at`` to
        ``now_ms`` and answers the memory's cursors, appended to ``stamped`` (see :class:`PgStamp`).
        """

        def write(conn: Connection, memory_id: str, rows: list[tuple[Any, ...]], ids: list[str]) -> None:
            follow = PgFollow(now_ms, pg_index_terms(memory_id) if index else None, stamped)
            params: dict[str, Any] = {"rows": dumps(rows)}
            sql = _PG_INSERT_SQL
            if follow is not None:
                sql = _pg_followed_sql(follow.index_terms is not None)
                params |= {"mid": memory_id, "now": follow.now_ms}
                if follow.index_terms is not None:
                    # The turn's index terms, made here: stemming is then no work for the server.
                    terms = follow.index_terms
                    params["ep"] = dumps({row[1]: terms(row[3]) for row in rows})
            answer = conn.exec_driver_sql(sql, params).first()
            if follow is not None and follow.stamped is not None and answer is not None:
                top, extracted, summarized, dirty, prior, seqs = answer
                cursors = (int(top), int(extracted), int(summarized), int(dirty))
                stored = [(int(seq), mid) for seq, mid in zip(seqs, ids, strict=True)]
                follow.stamped.append(PgStamp(cursors, int(prior or 0), stored))

        return write

    def touch(self, conn: Connection, params: dict[str, Any]) -> None:
        """Drop the cached snapshot and move ``updated_at``: one statement (a round trip each counts)."""
        conn.execute(Q.PG_TOUCH, params)

    def related_fact_rows(
        self, conn: Connection, memory_id: str, ckeys: Sequence[str], hashes: Sequence[int]
    ) -> list[Row[Any]]:
        """Active facts with one of the canonical keys or content hashes (a fact may come twice).

        One round trip for both index lookups (each arm is still one).
        """
        params = {"mid": memory_id, "ckeys": list(ckeys), "hashes": list(hashes)}
        return list(conn.execute(FQ.PG_RELATED, params))

    def context_fact_rows(
        self, conn: Connection, memory_id: str, limit: int, ranges: Sequence[tuple[str, str]], per_prefix: int
    ) -> list[Row[Any]]:
        """The ``limit`` most recently updated active facts, then up to ``per_prefix`` in each key range.

        One round trip for every range (arms in that order: newest, then by range).
        """
        if limit <= 0 and not ranges:
            return []
        params: dict[str, Any] = {"mid": memory_id, "limit": limit, "per_prefix": per_prefix}
        for k, (lo, hi) in enumerate(ranges, start=1):
            params[f"lo{k}"], params[f"hi{k}"] = lo, hi
        return list(conn.execute(FQ.pg_context(limit > 0, len(ranges)), params))

    def advance_extracted(
        self, conn: Connection, memory_id: str, upto_seq: int, now_ms: int, *, changed: bool, facts: bool
    ) -> None:
        """Move the extraction cursor and touch the memory when facts changed: one statement."""
        params = {"mid": memory_id, "upto": upto_seq, "now": now_ms, "changed": changed}
        conn.execute(Q.PG_EXTRACTED, params | {"dirty": 1 if changed and facts else None})

    def store_summary(self, conn: Connection, row: dict[str, Any], *, upto_seq: int, now_ms: int) -> None:
        """Write the summary row, move the summary cursor and touch the memory: one statement."""
        conn.execute(Q.PG_SUMMARIZED, {"mid": row["memory_id"], "upto": upto_seq, **row})

    @contextmanager
    def deleting(self, conn: Connection) -> Iterator[None]:
        """Nothing around a delete: freed tuples are not readable through the server."""
        yield


#: PostgreSQL type of each of ``INSERT_COLUMNS``, read from the JSON row sent for it.
_PG_TYPES = (
    "text", "text", "text", "text", "text", "text", "bigint", "bigint", "text", "text",
    "boolean", "boolean", "text", "json", "bigint",
)  # fmt: skip
#: Rows in the array's order, so seqs follow the batch's order; ``metadata`` travels as text.
_PG_INSERT_SQL = (
    f"INSERT INTO {messages.name} ({', '.join(INSERT_COLUMNS)}) "
    f"SELECT {', '.join(f'(r.e->>{i})::{t}' for i, t in enumerate(_PG_TYPES))} "
    "FROM jsonb_array_elements(%(rows)s::jsonb) WITH ORDINALITY AS r(e, n) ORDER BY r.n "
    "RETURNING seq"
)


class PgFollow(NamedTuple):
    """What a PostgreSQL message insert also does in its statement when it inserts rows."""

    #: The memory's ``updated_at`` (the call-start snapshot is dropped too).
    now_ms: int
    #: The episodic index's lexemes of a content, as one space-separated string (``None``: no
    #: indexing).
    index_terms: Callable[[str], str] | None = None
    #: When given, what the statement answers is appended to it when it inserted anything.
    stamped: list[PgStamp] | None = None


class PgStamp(NamedTuple):
    """What a PostgreSQL message insert answers about the memory it wrote."""

    #: The memory's cursors after it: ``(max_seq, extracted_seq, summarized_seq, facts_dirty)``.
    cursors: tuple[int, int, int, int]
    #: The memory's newest seq before it (0: none).
    prior_max: int
    #: ``(seq, id)`` of the inserted rows in seq order: every message of the memory past
    #: ``prior_max`` (its writers take turns, so no other writer's row lies among them).
    rows: list[tuple[int, str]]


@functools.cache
def _pg_followed_sql(index: bool) -> str:
    """The insert as a CTE, then the episodic rows of what it inserted and the memory's stamp.

    The episodic rows take the seqs the insert returned (joined by message id). Answers one row
    about the memory (see :class:`PgStamp`) when anything was inserted, none otherwise.
    """
    insert = _PG_INSERT_SQL.replace("RETURNING seq", "RETURNING seq, id")
    parts = [f"WITH ins AS ({insert})"]
    if index:
        parts.append(
            f", ep AS (INSERT INTO {EPISODE_TABLE} (seq, memory_id, terms) "
            f"SELECT ins.seq, %(mid)s, {pg_terms_sql('t.value')} "
            # The seqs were just assigned: no conflict to arbitrate (a plain insert is cheaper).
            "FROM ins JOIN jsonb_each_text(%(ep)s::jsonb) AS t ON t.key = ins.id)"
        )
    parts.append(
        f", gone AS (DELETE FROM {snapshots.name} WHERE memory_id = %(mid)s AND EXISTS (SELECT 1 FROM ins))"
        f", stamp AS (UPDATE {memories.name} SET updated_at = %(now)s WHERE memory_id = %(mid)s "
        "AND EXISTS (SELECT 1 FROM ins) RETURNING extracted_seq, summarized_seq, facts_dirty) "
        # The memory's cursors after the insert: its writers take turns, so its newest seq is one
        # just assigned (a read of them after the insert was a round trip of its own).
        "SELECT (SELECT max(seq) FROM ins), s.extracted_seq, s.summarized_seq, s.facts_dirty, "
        # The statement's snapshot is the one before it: this is the newest seq before the insert.
        f"(SELECT max(seq) FROM {messages.name} WHERE memory_id = %(mid)s), "
        "(SELECT array_agg(seq ORDER BY seq) FROM ins) FROM stamp s"
    )
    return "".join(parts)
