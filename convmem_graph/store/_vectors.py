"""Turn vectors: one embedding per stored turn, beside the episodic index, scored in numpy.

Portable on both databases: a vector is a float16 BLOB (``BYTEA`` on PostgreSQL) in
``cm_turn_vectors``, keyed by the memory, the message's seq and the model that made it (vectors of
two models never mix; a new model's are added beside the old ones, which go with their turns). A
search reads one memory's vectors once into a float32 matrix (a bounded in-process cache, checked
against the memory's row count and newest seq in the key's index on every search) and scores it
by brute force. That needs no database extension (this machine's Python cannot load SQLite
extensions; its PostgreSQL has no pgvector), but its cost grows with the memory: measured at load
~9 on 2 cores, p50 / p95 2.1 / 11.4 ms at 1k turns, 32 / 86 ms at 10k, 156 / 222 ms at 100k (about
a third the change check's count over the key, the rest the matrix product). Vectors are written
off the request path (:meth:`ConvMemory.embed_turns`), so a memory may be half embedded: its
other turns are still found by their words.

Deletes follow the messages: :meth:`convmem_graph.store.episodes.EpisodeIndex.remove_matching` calls
:func:`delete_message_vectors`, and ``delete_memory`` deletes the memory's rows through the
registry (``MEMORY_TABLES``).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from types import ModuleType
from typing import TYPE_CHECKING

from sqlalchemy import (
    BigInteger,
    Column,
    ColumnElement,
    Connection,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Table,
    delete,
    func,
    select,
)

from convmem_graph.models import EpisodeHit, EpisodeSearch
from convmem_graph.store._episode_search import read_messages
from convmem_graph.store.schema import messages

if TYPE_CHECKING:
    import numpy as np

__all__ = [
    "VECTOR_METADATA",
    "delete_message_vectors",
    "delete_seq_vectors",
    "dense_episodes",
    "dense_search",
    "missing_vectors",
    "turn_vectors",
    "write_vectors",
]

_Seq = BigInteger().with_variant(Integer(), "sqlite")
VECTOR_METADATA = MetaData()

#: One embedding per stored turn (float16, little-endian), by the model named in ``model``.
turn_vectors = Table(
    "cm_turn_vectors",
    VECTOR_METADATA,
    Column("memory_id", String(256), primary_key=True),
    Column("seq", _Seq, primary_key=True),
    # In the key: vectors of a new model are added beside the old ones (deleted with the turn),
    # so every write changes the memory's row count, which the cache's check reads from the key.
    Column("model", String(128), primary_key=True),
    Column("vec", LargeBinary, nullable=False),
)

#: Memories whose matrices stay in memory (each ~0.8 KB per turn at 384 dimensions, as float32 1.5 KB).
_CACHE_MEMORIES = 64
_cache: OrderedDict[tuple[int, str, str], tuple[tuple[int, int], np.ndarray, np.ndarray]] = OrderedDict()
_lock = threading.Lock()


def _numpy() -> ModuleType:
    # Imported on first use: the default install (no embeddings) does not need numpy.
    try:
        import numpy
    except ImportError as exc:  # pragma: no cover - depends on the installed extras
        raise ImportError(
            "turn vectors are scored with numpy: pip install 'convmem-graph[embeddings]'"
        ) from exc
    return numpy


def _pack(vector: Sequence[float]) -> bytes:
    np = _numpy()
    arr = np.asarray(vector, dtype=np.float32)
    norm = float(np.linalg.norm(arr))
    # Stored unit-length: a search is then one matrix-vector product.
    packed: bytes = (arr / norm if norm else arr).astype("<f2").tobytes()
    return packed


def write_vectors(
    conn: Connection, memory_id: str, model: str, rows: Iterable[tuple[int, Sequence[float]]]
) -> int:
    """Store ``(seq, vector)`` rows of one memory (replacing a seq's older vector); returns how many.

    A turn deleted while its vector was being computed gets none: only seqs still stored are written.
    """
    wanted = dict(rows)
    live = conn.execute(
        select(messages.c.seq).where(messages.c.memory_id == memory_id, messages.c.seq.in_(list(wanted)))
    ).scalars()
    values = [
        {"memory_id": memory_id, "seq": int(s), "model": model, "vec": _pack(wanted[int(s)])} for s in live
    ]
    if not values:
        return 0
    seqs = [v["seq"] for v in values]
    conn.execute(
        delete(turn_vectors).where(
            turn_vectors.c.memory_id == memory_id, turn_vectors.c.model == model, turn_vectors.c.seq.in_(seqs)
        )
    )
    conn.execute(turn_vectors.insert(), values)
    return len(values)


def missing_vectors(conn: Connection, memory_id: str, model: str, limit: int) -> list[tuple[int, str]]:
    """Up to ``limit`` of the memory's turns with text and no vector by ``model``, oldest first."""
    have = select(turn_vectors.c.seq).where(
        turn_vectors.c.memory_id == memory_id, turn_vectors.c.model == model
    )
    rows = conn.execute(
        select(messages.c.seq, messages.c.content)
        .where(messages.c.memory_id == memory_id, messages.c.seq.not_in(have), messages.c.content != "")
        .order_by(messages.c.seq)
        .limit(limit)
    )
    return [(int(seq), str(content)) for seq, content in rows]


def delete_message_vectors(conn: Connection, memory_id: str, *where: ColumnElement[bool]) -> None:
    """Delete the vectors of the memory's messages matching ``where`` (all when none), before they go."""
    if not where:
        conn.execute(delete(turn_vectors).where(turn_vectors.c.memory_id == memory_id))
        return
    chosen = select(messages.c.seq).where(messages.c.memory_id == memory_id, *where)
    conn.execute(
        delete(turn_vectors).where(turn_vectors.c.memory_id == memory_id, turn_vectors.c.seq.in_(chosen))
    )


def delete_seq_vectors(conn: Connection, memory_id: str, seqs: Sequence[int]) -> None:
    """Delete the vectors of the given seqs of one memory."""
    if seqs:
        conn.execute(
            delete(turn_vectors).where(
                turn_vectors.c.memory_id == memory_id, turn_vectors.c.seq.in_(list(seqs))
            )
        )


def _matrix(conn: Connection, memory_id: str, model: str) -> tuple[np.ndarray, np.ndarray]:
    where = (turn_vectors.c.memory_id == memory_id, turn_vectors.c.model == model)
    # The change check reads the key's index only (rows of every model of the memory): a write of
    # any model adds rows, a delete removes them, so the count changes with every change.
    count, newest = conn.execute(
        select(func.count(), func.max(turn_vectors.c.seq)).where(turn_vectors.c.memory_id == memory_id)
    ).one()
    stamp = (int(count or 0), int(newest or 0))
    key = (id(conn.engine), memory_id, model)
    np = _numpy()
    with _lock:
        cached = _cache.get(key)
        if cached is not None and cached[0] == stamp:
            _cache.move_to_end(key)
            return cached[1], cached[2]
    seqs: list[int] = []
    blobs: list[bytes] = []
    for seq, vec in conn.execute(select(turn_vectors.c.seq, turn_vectors.c.vec).where(*where)):
        seqs.append(int(seq))
        blobs.append(bytes(vec))
    if blobs and len({len(b) for b in blobs}) == 1:
        matrix = np.frombuffer(b"".join(blobs), dtype="<f2").reshape(len(blobs), -1).astype(np.float32)
    else:  # none, or a model whose dimension changed under the same name: search nothing
        seqs, matrix = [], np.zeros((0, 0), dtype=np.float32)
    ids = np.asarray(seqs, dtype=np.int64)
    with _lock:
        _cache[key] = (stamp, ids, matrix)
        _cache.move_to_end(key)
        while len(_cache) > _CACHE_MEMORIES:
            _cache.popitem(last=False)
    return ids, matrix


def dense_episodes(
    conn: Connection, memory_id: str, model: str, query: Sequence[float], *, limit: int
) -> EpisodeSearch:
    """The ``limit`` stored turns nearest ``query`` as an :class:`EpisodeSearch` (cosines in ``dense``)."""
    near = dense_search(conn, memory_id, model, query, limit)
    result = EpisodeSearch()
    if not near:
        return result
    mark = "%s" if conn.dialect.name == "postgresql" else "?"
    found = read_messages(conn.exec_driver_sql, mark, memory_id, list(near))
    for seq, cosine in near.items():
        msg = found.get(seq)
        if msg is not None:
            result.hits.append(EpisodeHit(seq=seq, message=msg))
            result.dense[seq] = cosine
    return result


def dense_search(
    conn: Connection, memory_id: str, model: str, query: Sequence[float], k: int
) -> dict[int, float]:
    """The ``k`` turns of the memory whose vectors are nearest ``query``: ``{seq: cosine}``, best first."""
    ids, matrix = _matrix(conn, memory_id, model)
    np = _numpy()
    q = np.asarray(query, dtype=np.float32)
    if not len(ids) or k <= 0 or matrix.shape[1] != q.shape[0]:
        return {}
    norm = float(np.linalg.norm(q))
    sims = matrix @ (q / norm if norm else q)
    top = np.argpartition(-sims, min(k, len(ids)) - 1)[:k] if k < len(ids) else np.arange(len(ids))
    order = top[np.argsort(-sims[top], kind="stable")]
    return {int(ids[i]): float(sims[i]) for i in order}
