"""Fact vectors: one embedding per active fact, stored beside the facts, read by the call start.

A hybrid call start ranks the snapshot's facts (at most ``MemoryConfig.snapshot_max_fragments``)
by their cosine to the query. Embedding them at every call cost the model's time for up to 200
texts per call; here each fact is embedded once, off the request path
(:func:`~convmem_graph.store.turn_embedding.embed_missing_facts`: batched, resumable, run by the
background embedder after the turns), and the block reads the stored vectors.

``cm_fact_vectors`` holds, per ``(memory, fragment id, model)``, the vector as the model gave it
(float32, little-endian, not normalized: the cosines are those of the per-call path, so the
ranking is the same) and a 64-bit digest of the exact text it was made from. A vector counts only
while its digest is that of the fact's current text, so an edit made by hand in SQL, an import
that brings the same id with other text, or a write racing an edit can never pair a fact with
another text's vector; such a fact ranks by its words until it is embedded again. Rows go:

- when a fact stops being active or its text changes through the store (delete, supersede,
  ``update_fragment``, the extractor's updates): :class:`~convmem_graph.store._fragments.FragmentWriter`
  deletes its vectors (every model's) in the transaction that changes it;
- with the memory (``delete_memory``, through the registry's ``MEMORY_TABLES``) and when an import
  replaces it (:func:`~convmem_graph.store.transfer.import_memory`);
- rows left by changes made outside the store (a fact deleted by hand in SQL) are swept by the
  next embedding pass (:func:`fact_vector_plan`).

Turns' purge deletes messages only; facts and their vectors stay (a fact outlives its turns).

The call start reads the vectors of the snapshot's facts through a bounded per-process cache
checked by one primary-key read: ``cm_fact_vector_stamps`` holds a random token renewed by every
write and delete of the memory's fact vectors. No pgvector copy: the block scores at most a few
hundred facts, a product that costs microseconds in process, less than a round trip.
"""

from __future__ import annotations

import hashlib
import secrets
import threading
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sqlalchemy import BigInteger, Column, Connection, LargeBinary, String, Table, delete, select
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.exc import DBAPIError

from convmem_graph.store._optional import ensure_tables, is_missing, present
from convmem_graph.store._vectors import VECTOR_METADATA
from convmem_graph.store.engine import chunked
from convmem_graph.store.schema import fragments

if TYPE_CHECKING:
    from numpy import ndarray

    from convmem_graph.models import Fragment

__all__ = [
    "FactVectorPlan",
    "content_digest",
    "delete_fact_vectors",
    "delete_stale",
    "fact_vector_plan",
    "fact_vector_stamps",
    "fact_vectors",
    "stored_fact_vectors",
    "write_fact_vectors",
]

#: One embedding per active fact and model: float32 as given, with the digest of its text.
fact_vectors = Table(
    "cm_fact_vectors",
    VECTOR_METADATA,
    Column("memory_id", String(256), primary_key=True),
    Column("fragment_id", String(256), primary_key=True),
    Column("model", String(128), primary_key=True),
    # content_digest() of the text the vector was made from: a vector counts only for that text.
    Column("digest", BigInteger, nullable=False),
    Column("vec", LargeBinary, nullable=False),
)

#: Per memory, a random token renewed by every write or delete of its fact vectors (cache check).
fact_vector_stamps = Table(
    "cm_fact_vector_stamps",
    VECTOR_METADATA,
    Column("memory_id", String(256), primary_key=True),
    Column("token", BigInteger, nullable=False),
    sqlite_with_rowid=False,
)

#: Memories whose fact vectors a process keeps, and the rows one memory may hold (a memory whose
#: snapshot keeps changing starts over past that).
_CACHE_MEMORIES = 256
_CACHE_ROWS = 4096


def content_digest(text: str) -> int:
    """A signed 64-bit digest of ``text`` (exact: any change of the text changes it).

    Example:
        >>> content_digest("用户对芒果过敏。") == content_digest("用户对芒果过敏。")
        True
        >>> content_digest("a") == content_digest("a ")
        False
    """
    raw = hashlib.blake2b(text.encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(raw, "big", signed=True)


def _renew(conn: Connection, memory_id: str) -> None:
    insert = pg_insert if conn.dialect.name == "postgresql" else sqlite_insert
    stmt = insert(fact_vector_stamps).values(memory_id=memory_id, token=secrets.randbits(62))
    conn.execute(
        stmt.on_conflict_do_update(index_elements=["memory_id"], set_={"token": stmt.excluded.token})
    )


def _pack(vector: Sequence[float]) -> bytes:
    import numpy as np  # the embeddings extra: only a process given a model writes vectors

    arr = np.asarray(vector, dtype="<f4")
    if arr.ndim != 1 or not arr.size:
        raise ValueError(f"a fact vector must be a non-empty list of numbers, got shape {arr.shape}")
    packed: bytes = arr.tobytes()
    return packed


def write_fact_vectors(
    conn: Connection, memory_id: str, model: str, rows: Iterable[tuple[str, str, Sequence[float]]]
) -> int:
    """Store ``(fragment id, text, vector)`` rows of one memory; returns how many were written.

    Only facts still active and whose text is still ``text`` get theirs (a fact edited or deleted
    while its vector was being computed gets none: the next pass embeds its new text). A fact's
    older vector by the same model is replaced.
    """
    wanted = {fid: (text, vec) for fid, text, vec in rows}
    if not wanted:
        return 0
    live: dict[str, str] = {}
    for part in chunked(sorted(wanted)):
        found = conn.execute(
            select(fragments.c.id, fragments.c.content).where(
                fragments.c.memory_id == memory_id,
                fragments.c.id.in_(list(part)),
                fragments.c.status == "active",
            )
        )
        live.update((str(fid), str(content)) for fid, content in found)
    keep = sorted(fid for fid, (text, _) in wanted.items() if live.get(fid) == text)
    if not keep:
        return 0
    values = [
        {
            "memory_id": memory_id,
            "fragment_id": fid,
            "model": model,
            "digest": content_digest(wanted[fid][0]),
            "vec": _pack(wanted[fid][1]),
        }
        for fid in keep
    ]
    ensure_tables(conn, fact_vectors, fact_vector_stamps)  # a SQLite file's first vectors make them
    for part in chunked(keep):
        conn.execute(
            delete(fact_vectors).where(
                fact_vectors.c.memory_id == memory_id,
                fact_vectors.c.model == model,
                fact_vectors.c.fragment_id.in_(list(part)),
            )
        )
    conn.execute(fact_vectors.insert(), values)
    _renew(conn, memory_id)
    return len(values)


def delete_fact_vectors(
    conn: Connection, memory_id: str, fragment_ids: Sequence[str] | None = None, *, model: str | None = None
) -> int:
    """Delete the memory's fact vectors (of these facts; every model's unless ``model``); how many."""
    gone = 0
    if not present(conn, fact_vectors):
        return gone  # no vector was ever stored in this (SQLite) file
    where = [fact_vectors.c.memory_id == memory_id]
    if model is not None:
        where.append(fact_vectors.c.model == model)
    if fragment_ids is None:
        gone = int(conn.execute(delete(fact_vectors).where(*where)).rowcount or 0)
    else:
        for part in chunked(sorted(set(fragment_ids))):
            stmt = delete(fact_vectors).where(*where, fact_vectors.c.fragment_id.in_(list(part)))
            gone += int(conn.execute(stmt).rowcount or 0)
    if gone:
        _renew(conn, memory_id)
    return gone


@dataclass(frozen=True)
class FactVectorPlan:
    """What an embedding pass of one memory has to do.

    Attributes:
        missing: ``(fragment id, text)`` of active facts with no valid vector by the model, oldest first.
        stale: ``(fragment id, model)`` rows to delete: their fact is gone, inactive or has other text.
    """

    missing: list[tuple[str, str]]
    stale: list[tuple[str, str]]


def fact_vector_plan(conn: Connection, memory_id: str, model: str) -> FactVectorPlan:
    """The memory's facts to embed by ``model`` and the vector rows (any model's) that no longer count.

    One read of the active facts' texts and one of the vector rows' digests (compared in Python:
    the digest is not a database function).
    """
    active = {
        str(fid): str(content)
        for fid, content in conn.execute(
            select(fragments.c.id, fragments.c.content)
            .where(fragments.c.memory_id == memory_id, fragments.c.status == "active")
            .order_by(fragments.c.created_at, fragments.c.id)
        )
    }
    valid: set[str] = set()
    stale: list[tuple[str, str]] = []
    stored = (
        conn.execute(
            select(fact_vectors.c.fragment_id, fact_vectors.c.model, fact_vectors.c.digest).where(
                fact_vectors.c.memory_id == memory_id
            )
        ).all()
        if present(conn, fact_vectors)
        else []  # a SQLite file with no vector yet
    )
    for fid, row_model, digest in stored:
        text = active.get(str(fid))
        if text is None or content_digest(text) != int(digest):
            stale.append((str(fid), str(row_model)))
        elif row_model == model:
            valid.add(str(fid))
    missing = [(fid, text) for fid, text in active.items() if fid not in valid and text.strip()]
    return FactVectorPlan(missing, stale)


def delete_stale(conn: Connection, memory_id: str, stale: Sequence[tuple[str, str]]) -> int:
    """Delete the ``(fragment id, model)`` rows a :func:`fact_vector_plan` found stale."""
    by_model: dict[str, list[str]] = {}
    for fid, model in stale:
        by_model.setdefault(model, []).append(fid)
    return sum(delete_fact_vectors(conn, memory_id, fids, model=model) for model, fids in by_model.items())


@dataclass
class _Entry:
    """One memory's fact vectors by one model as read so far, valid while its stamp is ``token``."""

    token: int | None
    rows: dict[str, tuple[int, ndarray]] = field(default_factory=dict)
    absent: set[str] = field(default_factory=set)
    #: The last list of facts answered while the stamp was ``token``, and the answer: a call start
    #: asks again for the very list of its cached snapshot (held here, so its identity is its own).
    facts: Sequence[Fragment] | None = None
    found: dict[str, ndarray] = field(default_factory=dict)


_cache: OrderedDict[tuple[int, str, str], _Entry] = OrderedDict()
_lock = threading.Lock()


_TOKEN_SQL = "SELECT token FROM cm_fact_vector_stamps WHERE memory_id = ?"


def stored_fact_vectors(
    conn: Connection, memory_id: str, model: str, facts: Sequence[Fragment]
) -> dict[str, ndarray]:
    """The stored vectors (float32, as the model gave them) of ``facts`` whose text they were made from.

    Facts with no vector yet, or one made from another text, are left out: the block ranks them
    by their words. One primary-key read when this process has them cached; otherwise one read
    of the facts' rows not yet seen. Asked again for the very same ``facts`` list (a call start's
    cached snapshot) under the same stamp, the answer is the one made last time (a copy), without
    digesting every fact's text again.
    """
    import numpy as np

    # Through the driver: SQLAlchemy's compile and result handling of a Core select cost more
    # than the primary-key seek itself (as for the turns' check in _vectors._check).
    mark = "%s" if conn.dialect.name == "postgresql" else "?"
    try:
        stamp = conn.exec_driver_sql(_TOKEN_SQL.replace("?", mark), (memory_id,)).first()
    except DBAPIError as error:
        if not is_missing(conn, error, fact_vector_stamps):
            raise
        return {}  # a SQLite file with no fact vector yet (the tables come with the first)
    token = None if stamp is None else int(stamp[0])
    key = (id(conn.engine), memory_id, model)
    with _lock:
        entry = _cache.get(key)
        if entry is None or entry.token != token or len(entry.rows) + len(entry.absent) > _CACHE_ROWS:
            entry = _Entry(token)
        elif entry.facts is facts:
            return dict(entry.found)
        rows, absent = dict(entry.rows), set(entry.absent)
    todo = sorted({f.id for f in facts} - rows.keys() - absent)
    if todo and token is not None:
        for part in chunked(todo):
            for fid, digest, vec in conn.execute(
                select(fact_vectors.c.fragment_id, fact_vectors.c.digest, fact_vectors.c.vec).where(
                    fact_vectors.c.memory_id == memory_id,
                    fact_vectors.c.model == model,
                    fact_vectors.c.fragment_id.in_(list(part)),
                )
            ):
                rows[str(fid)] = (int(digest), np.frombuffer(bytes(vec), dtype="<f4"))
    absent.update(fid for fid in todo if fid not in rows)
    out: dict[str, Any] = {}
    for f in facts:
        row = rows.get(f.id)
        if row is not None and row[0] == content_digest(f.content):
            out[f.id] = row[1]
    with _lock:
        _cache[key] = _Entry(token, rows, absent, facts, out)
        _cache.move_to_end(key)
        while len(_cache) > _CACHE_MEMORIES:
            _cache.popitem(last=False)
    return dict(out)
