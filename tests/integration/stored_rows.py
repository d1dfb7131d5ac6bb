"""Every row a replay stores, reduced to a digest per table (the stored-rows golden files).

``python -m tests.integration.stored_rows URL OUT.json`` replays the bundled LoCoMo slice into the
empty schema at ``URL`` (``search_path`` in the URL) and writes the digests: run it on the revision
whose rows are the reference (the PostgreSQL golden file beside this module came from ``a0ba311``).
``python -m tests.integration.stored_rows --sqlite OUT.json`` does the same into a new SQLite file
(:data:`SQLITE_GOLDEN` came from ``6826a9c``); there the episodic index is digested as its
``fts5vocab`` instances (term, message), not as FTS5's page blobs, whose layout depends on when
SQLite merges its segments.
Columns a replay fills from the wall clock or from its process are left out (also inside JSON
text), and database-wide serials are made per memory: a message's ``seq`` (and every cursor and
index row naming one) becomes its position in its memory, because the replay's threads may reach
the memories in another order. Every other column of every ``cm_`` table, the episodic index's
lexemes included, is in the digest.
"""

from __future__ import annotations

import hashlib
import json
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from convmem_graph.store.urls import libpq_url

#: Columns whose values come from the replay's clock or process, not from the archive.
VOLATILE = frozenset(
    {"created_at", "updated_at", "applied_at", "finished_at", "at", "path", "pid", "owner", "expires_at_wall"}
)
#: Columns holding a message ``seq``, per table (made per memory, see the module docstring).
SEQ_COLUMNS = {
    "cm_messages": ("seq",),
    "cm_episodes": ("seq",),
    "cm_memories": ("extracted_seq", "summarized_seq"),
}
#: Database-wide serials that order nothing a replay stores (the audit log's row id).
SERIALS = {"cm_audit": ("id",)}
#: Text columns holding JSON whose clock fields are left out.
JSON_TEXT = frozenset({"data", "before", "after", "metadata"})
#: Tables of the replay's own bookkeeping (paths and clocks of the machine it ran on).
SKIPPED = frozenset({"cm_schema_migrations", "cm_replay_progress", "cm_episode_meta"})
#: LoCoMo conversations and sessions in the slice: 4 memories, about 500 messages.
CONVERSATIONS, SESSIONS = 2, 6
GOLDEN = Path(__file__).with_name("stored_rows_golden.json")
SQLITE_GOLDEN = Path(__file__).with_name("stored_rows_sqlite_golden.json")
#: Columns of SQLite's read caches, not of what a replay stores: a trigger stamps ``facts_cut`` with
#: ``random()`` when a fact row goes (store/_fact_revisions.py), so that no earlier revision number
#: can match it again; ``snap_rev`` is the snapshot's revision (migration 12, after the reference
#: revision), a counter that moves with every snapshot write.
SQLITE_VOLATILE = frozenset({"facts_cut", "snap_rev"})
#: SQLite's FTS5 shadow tables of the episodic index (digested through ``fts5vocab`` instead).
FTS_SHADOWS = ("_config", "_data", "_docsize", "_idx", "_content")
#: Each message's ``seq`` and its position in its memory (both databases).
POSITIONS = "SELECT seq, row_number() OVER (PARTITION BY memory_id ORDER BY seq) FROM cm_messages"


def replay_slice(url: str, workdir: Path) -> None:
    """Replay the LoCoMo slice into the (empty) database at ``url`` in this process."""
    from convmem_graph.assembly import open_lifecycle
    from convmem_graph.config import MemoryConfig
    from convmem_graph.replay.read import Replayer
    from convmem_graph.store import MemoryStore
    from tests.integration.replay_archives import LOCOMO, write_locomo_archive

    archive = workdir / "archive"
    write_locomo_archive(LOCOMO, archive, conversations=CONVERSATIONS, files=1, max_sessions=SESSIONS)
    MemoryStore.from_url(url).close()
    lifecycle, close = open_lifecycle(url, None, MemoryConfig(), durability="exit")
    try:
        Replayer(lifecycle, group_by="user").run([archive])
    finally:
        if close is not None:
            close()
        lifecycle.store.close()


def _without_clock(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_clock(v) for k, v in value.items() if k not in VOLATILE}
    if isinstance(value, list):
        return [_without_clock(v) for v in value]
    return value


def _canonical(column: str, value: Any) -> Any:
    if isinstance(value, memoryview | bytes):
        return bytes(value).hex()
    if column in JSON_TEXT and isinstance(value, str) and value[:1] in "{[":
        try:
            return _without_clock(json.loads(value))
        except ValueError:
            return value
    if isinstance(value, dict | list):
        return _without_clock(value)
    if isinstance(value, str | int | float | bool) or value is None:
        return value
    return str(value)


def _positions_and_tables(conn: Any, tables_sql: str) -> tuple[dict[int, int], list[str]]:
    """``seq`` -> its position in its memory (0: no message yet, as the cursors start), and the
    names of the tables ``tables_sql`` lists (``conn``: a psycopg or sqlite3 connection)."""
    position = {0: 0} | {int(seq): int(n) for seq, n in conn.execute(POSITIONS).fetchall()}
    return position, [str(r[0]) for r in conn.execute(tables_sql).fetchall()]


def _digest(
    cols: list[str], rows: Iterable[Sequence[Any]], seqs: list[int], position: dict[int, int]
) -> dict[str, Any]:
    """Row count and SHA-256 of ``rows`` canonicalised, ``seqs`` columns made positions, sorted."""
    lines = []
    for row in rows:
        values = [_canonical(c, v) for c, v in zip(cols, row, strict=True)]
        for i in seqs:
            values[i] = position[int(values[i])]
        lines.append(json.dumps(values, sort_keys=True, ensure_ascii=False))
    lines.sort()
    digest = hashlib.sha256("\n".join(lines).encode()).hexdigest()
    return {"columns": cols, "rows": len(lines), "sha256": digest}


def table_digests(url: str, columns: dict[str, list[str]] | None = None) -> dict[str, dict[str, Any]]:
    """Row count and SHA-256 of the sorted, JSON-encoded rows of every ``cm_`` table at ``url``.

    ``columns``: per table, the only columns to digest (a golden file's, so that columns added
    since it was written are compared apart, as tables added since are).
    """
    import psycopg

    out: dict[str, dict[str, Any]] = {}
    with psycopg.connect(libpq_url(url)) as conn:
        position, tables = _positions_and_tables(
            conn,
            "SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema() "
            "AND table_name LIKE 'cm\\_%' ORDER BY table_name",
        )
        for table in tables:
            if table in SKIPPED:
                continue
            dropped = VOLATILE | set(SERIALS.get(table, ()))
            cols = [
                r[0]
                for r in conn.execute(
                    "SELECT column_name FROM information_schema.columns "
                    "WHERE table_schema = current_schema() "
                    "AND table_name = %s ORDER BY column_name",
                    (table,),
                )
                if r[0] not in dropped and (columns is None or table not in columns or r[0] in columns[table])
            ]
            seqs = [cols.index(c) for c in SEQ_COLUMNS.get(table, ())]
            # A tsvector compares as its text; everything else as JSON of its Python value.
            select = ", ".join(f'"{c}"::text' if c == "terms" else f'"{c}"' for c in cols)
            rows = conn.execute(f'SELECT {select} FROM "{table}"').fetchall()  # noqa: S608 - catalog names
            out[table] = _digest(cols, rows, seqs, position)
    return out


def sqlite_table_digests(path: Path) -> dict[str, dict[str, Any]]:
    """:func:`table_digests` of the SQLite file at ``path``.

    The contentless FTS5 index ``cm_episodes`` is read as its ``fts5vocab`` instances (term, the
    memory's bucket and the message's position in its memory), so two files holding the same
    lexemes for the same messages compare equal however SQLite laid out their segments.
    """
    import sqlite3

    out: dict[str, dict[str, Any]] = {}
    conn = sqlite3.connect(path)
    try:
        position, tables = _positions_and_tables(
            conn,
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name LIKE 'cm\\_%' ESCAPE '\\' "
            "ORDER BY name",
        )
        fts = {t for t in tables if any(f"{t}{s}" in tables for s in ("_data", "_idx"))}
        for table in tables:
            if table in SKIPPED or any(table == f"{f}{s}" for f in fts for s in FTS_SHADOWS):
                continue
            if table in fts:
                conn.execute(f"CREATE VIRTUAL TABLE temp.vocab USING fts5vocab(main, '{table}', 'instance')")
                # A row id is ``bucket(memory_id) << 36 | seq`` (store/episodes.py).
                rows = conn.execute("SELECT term, doc >> 36, doc & 68719476735 FROM temp.vocab").fetchall()
                conn.execute("DROP TABLE temp.vocab")
                out[table] = _digest(["term", "bucket", "seq"], rows, [2], position)
                continue
            dropped = VOLATILE | SQLITE_VOLATILE | set(SERIALS.get(table, ()))
            cols = sorted(r[1] for r in conn.execute(f'PRAGMA table_info("{table}")') if r[1] not in dropped)
            seqs = [cols.index(c) for c in SEQ_COLUMNS.get(table, ())]
            select = ", ".join(f'"{c}"' for c in cols)
            rows = conn.execute(f'SELECT {select} FROM "{table}"').fetchall()  # noqa: S608 - catalog names
            out[table] = _digest(cols, rows, seqs, position)
    finally:
        conn.close()
    # An optional table the file does not have (SQLite makes one on its first write,
    # store/_optional.py) holds no row: digested as the empty table it would be.
    from convmem_graph.store.registry import OPTIONAL_TABLES

    for declared in OPTIONAL_TABLES:
        if declared.name not in out:
            dropped = VOLATILE | SQLITE_VOLATILE | set(SERIALS.get(declared.name, ()))
            out[declared.name] = _digest(
                sorted(c.name for c in declared.columns if c.name not in dropped), [], [], {}
            )
    return out


def main(argv: list[str]) -> int:
    """Replay the slice into ``argv[0]`` (``--sqlite``: a new SQLite file); digests to ``argv[1]``."""
    import tempfile

    url, dest = argv
    with tempfile.TemporaryDirectory() as tmp:
        if url == "--sqlite":
            db = Path(tmp) / "slice.db"
            replay_slice(str(db), Path(tmp))
            digests = sqlite_table_digests(db)
        else:
            replay_slice(url, Path(tmp))
            digests = table_digests(url)
    Path(dest).write_text(json.dumps(digests, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
