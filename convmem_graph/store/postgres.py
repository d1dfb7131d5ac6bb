"""PostgreSQL's policy for the memory store: the schema lock and per-memory advisory locks.

Every lock is transaction-scoped (``pg_advisory_xact_lock``), so the store works behind a
transaction-mode pooler (PgBouncer). :mod:`convmem_graph.store.sqlite` is the other backend.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Any

from sqlalchemy import Connection, Engine, Row, text

from convmem_graph.store import _fact_queries as FQ
from convmem_graph.store import _queries as Q
from convmem_graph.store.engine import advisory_key
from convmem_graph.store.schema import add_postgres_options

__all__ = ["SCHEMA_LOCK_KEY", "PostgresBackend", "int32_pair"]

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
