"""Searching the episodic index, with no SQLAlchemy import: the store and the call-start reader share it.

The index layout (rowid ``bucket(memory_id) << 36 | seq`` on SQLite, bucket-prefixed lexemes on
PostgreSQL) and the candidate scoring live here; :mod:`convmem_graph.store.episodes` writes the
index and searches it through a store connection, :mod:`convmem_graph.store.sqlite_reader` through
the standard library's driver.
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import json
import math
import sqlite3
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from convmem_graph._query_dates import DateSpan, date_spans
from convmem_graph._text_caches import holds_text
from convmem_graph.models import EpisodeHit, EpisodeSearch, Message
from convmem_graph.store._rows import MESSAGE_COLUMN_NAMES, row_to_message
from convmem_graph.text.terms import search_terms

__all__ = [
    "COUNT_CAP",
    "EPISODE_TABLE",
    "PER_TERM",
    "SEQ_MASK",
    "Run",
    "bucket",
    "collect",
    "read_messages",
    "read_rows",
    "rowid_range",
    "search_sqlite",
]

EPISODE_TABLE = "cm_episodes"
_MESSAGES = "cm_messages"
SEQ_BITS = 36
SEQ_MASK = (1 << SEQ_BITS) - 1
_BUCKET_BITS = 27
#: Postings read per term (newest first); a term found this often is treated as common.
PER_TERM = 128
#: Messages counted for the memory size in IDF (a memory past it counts as this large: the IDF of
#: a rare term then saturates, which leaves the ranking of rare against common terms intact).
COUNT_CAP = 1_000
#: Seqs per ``IN (...)`` read, as the store's ``IN_CHUNK`` (below SQLite's historical limit of 999).
_IN_CHUNK = 500

_ROLE = MESSAGE_COLUMN_NAMES.index("role")
_CONTENT = MESSAGE_COLUMN_NAMES.index("content")

#: A driver-level statement runner: SQL with the driver's parameter marks, then its parameters.
Run = Callable[[str, Sequence[Any]], Iterable[Sequence[Any]]]


@holds_text
@functools.lru_cache(maxsize=1024)
def bucket(memory_id: str) -> int:
    """The memory's bucket: the high bits of its SQLite rowids and its PostgreSQL lexemes' prefix."""
    # Cached: a call start asks for it every time (a hash, ~2 us warm, more after a cache flush).
    digest = hashlib.blake2b(memory_id.encode("utf-8"), digest_size=8, person=b"convmem-episode").digest()
    return int.from_bytes(digest, "big") >> (64 - _BUCKET_BITS)


def rowid_range(memory_id: str) -> tuple[int, int]:
    """The first and last SQLite rowid the memory's turns can have."""
    base = bucket(memory_id) << SEQ_BITS
    return base, base | SEQ_MASK


def search_sqlite(
    conn: sqlite3.Connection,
    memory_id: str,
    query: str,
    *,
    limit: int = 32,
    per_term: int = PER_TERM,
    replies: int | None = None,
) -> EpisodeSearch:
    """Search one memory's turns in a SQLite store through the driver's connection.

    See :meth:`convmem_graph.store.episodes.EpisodeIndex.search` for the arguments; both give the same
    result for the same file.
    """
    terms = search_terms(query)
    spans = date_spans(query)
    if not (terms or spans) or limit <= 0:
        return EpisodeSearch(terms=terms)
    lo, hi = rowid_range(memory_id)
    postings: dict[str, list[int]] = {term: [] for term in terms}
    if terms:
        # Every term's postings in one statement (a branch per term, each its own LIMIT), on the
        # driver's cursor: SQLAlchemy's per-statement and per-row work cost more than FTS5's
        # own lookups here.
        params: list[Any] = []
        for term in terms:
            # One quoted token per term: never FTS5 query syntax, whatever the user typed.
            params += (f'"{term}"', lo, hi, per_term)
        for k, rowid in conn.execute(_postings_sql(len(terms)), params):
            postings[terms[k]].append(rowid & SEQ_MASK)
    return collect(
        conn.execute,
        "?",
        memory_id,
        terms,
        postings,
        limit=limit,
        replies=replies,
        spans=spans,
        per_term=per_term,
        count_sql=_SQLITE_COUNT,
    )


@functools.lru_cache(maxsize=64)
def _postings_sql(terms: int) -> str:
    """The newest postings of ``terms`` terms in one memory's rowid range: ``(term's place, rowid)`` rows."""
    one = (
        f"SELECT {{k}}, rowid FROM (SELECT rowid FROM {EPISODE_TABLE} WHERE {EPISODE_TABLE} MATCH ? "
        "AND rowid BETWEEN ? AND ? ORDER BY rowid DESC LIMIT ?)"
    )
    return " UNION ALL ".join(one.format(k=k) for k in range(terms))


#: The memory's messages counted up to :data:`COUNT_CAP`, on SQLite: whether a row stands at the
#: cap's place in the ``(memory_id, seq)`` index, else the full count (of fewer rows). The same
#: number as the subquery with a LIMIT, in about two thirds of its time (no row handed up).
_SQLITE_COUNT = (
    f"SELECT CASE WHEN (SELECT seq FROM {_MESSAGES} WHERE memory_id = ?1 ORDER BY seq "
    f"LIMIT 1 OFFSET {COUNT_CAP - 1}) IS NOT NULL THEN {COUNT_CAP} "
    f"ELSE (SELECT count(*) FROM {_MESSAGES} WHERE memory_id = ?1) END"
)


def span_postings(run: Run, mark: str, memory_id: str, span: DateSpan, per_term: int) -> list[int]:
    """Seqs of the memory's turns stored within ``span``, newest first (at most ``per_term``).

    A date named in the query is searched like a term whose postings are the turns of that day
    (month, year): the turn that answers "what did I cook on 19 August" rarely says the date.
    Served by the messages' ``(memory_id, timestamp_ms)`` index.
    """
    sql = (
        f"SELECT seq FROM {_MESSAGES} WHERE memory_id = {mark} AND timestamp_ms >= {mark} "
        f"AND timestamp_ms < {mark} ORDER BY timestamp_ms DESC, seq DESC LIMIT {int(per_term)}"
    )
    return [int(r[0]) for r in run(sql, (memory_id, span.start_ms, span.end_ms))]


def _same_text(content: str) -> str:
    return " ".join(content.lower().split())


def collect(
    run: Run,
    mark: str,
    memory_id: str,
    terms: list[str],
    postings: dict[str, list[int]],
    *,
    limit: int,
    replies: int | None = None,
    spans: Sequence[DateSpan] = (),
    per_term: int = PER_TERM,
    count_sql: str | None = None,
) -> EpisodeSearch:
    """Score the candidate seqs each term's postings name and read the best ``limit`` turns.

    Args:
        run: Runs a statement on the store's connection (driver level).
        mark: The driver's parameter mark (``?`` or ``%s``).
        memory_id: The memory: only its turns are read back.
        terms: The query's terms.
        postings: Each term's seqs, newest first (at most the per-term cap).
        limit: Candidate turns returned.
        replies: For this many of the best candidates (default: a third of ``limit``), the other
            speaker's next turn is added too (``reply_to`` set).
        spans: Dates the query names: each is searched as a term (its label, e.g.
            ``@2023-08-19``) whose postings are the turns stored within it.
        per_term: Postings read per date span.
        count_sql: The driver's statement counting the memory's messages up to
            :data:`COUNT_CAP` (its one parameter the memory id); a portable one when ``None``.

    Identical turns (same words, case and spacing aside) count once: the newest stands for them,
    so a user who restates something does not use up the candidates.
    """
    replies = limit // 3 if replies is None else replies
    if spans:
        postings = dict(postings)
        for span in spans:
            postings[span.label] = span_postings(run, mark, memory_id, span, per_term)
    # Both fields at construction: one validation (an assignment validates again, and most
    # searches end here, finding nothing).
    result = EpisodeSearch(
        terms=[*terms, *(s.label for s in spans)],
        document_frequency={t: len(p) for t, p in postings.items()},
    )
    if not any(postings.values()):
        return result
    count = count_sql or (
        f"SELECT count(*) FROM (SELECT 1 FROM {_MESSAGES} WHERE memory_id = {mark} LIMIT {COUNT_CAP}) t"
    )
    result.total = int(next(iter(run(count, (memory_id,))))[0] or 0)
    n = max(result.total, 1)
    # Rows as the driver gives them: a Message is built only for the turns that become hits
    # (the reads take spare candidates, duplicates and next turns that are never quoted).
    found: dict[int, list[Any]] = {}
    made: dict[int, Message] = {}

    def message(seq: int) -> Message:
        msg = made.get(seq)
        if msg is None:
            msg = made[seq] = row_to_message(found[seq])
        return msg

    scores = _idf_sums(postings, n)
    ranked = sorted(scores, key=lambda s: (-scores[s], -s))
    # Which terms a turn holds is asked of the hits only (a few dozen of up to 128 per term).
    holding = {term: set(seqs) for term, seqs in postings.items() if seqs}

    def held(seq: int) -> list[str]:
        return sorted(term for term, seqs in holding.items() if seq in seqs)

    seen: set[str] = set()
    start = 0
    # Read in rounds: duplicates of a turn already taken do not count, so read on past them. A
    # few spare candidates per round: a seq may have been deleted since (the index and the
    # messages are written together, but a concurrent purge may commit between the two reads).
    while len(result.hits) < limit and start < len(ranked):
        best = ranked[start : start + limit - len(result.hits) + 4]
        start += len(best)
        # The next two seqs after the best hits: usually the same memory's next turn (a batch
        # gets consecutive seqs); the read below keeps only this memory's.
        follow = {s + k for s in best[:replies] for k in (1, 2)} - set(best)
        found.update(read_rows(run, mark, memory_id, [*best, *sorted(follow - found.keys())]))
        for seq in best:
            row = found.get(seq)
            if row is None:
                continue
            key = _same_text(row[_CONTENT])
            if key in seen:
                continue
            seen.add(key)
            result.hits.append(EpisodeHit(seq=seq, message=message(seq), terms=held(seq)))
            if len(result.hits) == limit:
                break
    taken = {h.seq for h in result.hits}
    for hit in result.hits[:replies]:
        for nxt in (hit.seq + 1, hit.seq + 2):
            row = found.get(nxt)
            if row is not None and row[_ROLE] != hit.message.role:
                if nxt not in taken and _same_text(row[_CONTENT]) not in seen:
                    taken.add(nxt)
                    seen.add(_same_text(row[_CONTENT]))
                    result.hits.append(EpisodeHit(seq=nxt, message=message(nxt), reply_to=hit.seq))
                break
    return result


def _idf_sums(postings: dict[str, list[int]], n: int) -> dict[int, float]:
    """Each candidate seq's sum of the IDF of the terms whose postings hold it, added in term order.

    ``dict.update`` over ``map`` runs the per-posting loop in C; each sum adds the same floats in
    the same order as a Python loop over the postings would (one float per term and seq).
    """
    scores: dict[int, float] = {}
    get = scores.get
    for seqs in postings.values():
        df = len(seqs)
        if not df:
            continue
        idf = math.log(1.0 + (n - df + 0.5) / (df + 0.5))
        scores.update(zip(seqs, map(idf.__add__, map(get, seqs, itertools.repeat(0.0))), strict=True))
    return scores


def read_messages(run: Run, mark: str, memory_id: str, seqs: Sequence[int]) -> dict[int, Message]:
    """The memory's messages of ``seqs`` (those still stored), by seq."""
    return {seq: row_to_message(row) for seq, row in read_rows(run, mark, memory_id, seqs).items()}


def read_rows(run: Run, mark: str, memory_id: str, seqs: Sequence[int]) -> dict[int, list[Any]]:
    """The memory's rows of ``seqs`` (those still stored), by seq: :data:`MESSAGE_COLUMN_NAMES` in order."""
    found: dict[int, list[Any]] = {}
    cols = ", ".join(MESSAGE_COLUMN_NAMES)
    for start in range(0, len(seqs), _IN_CHUNK):
        part = seqs[start : start + _IN_CHUNK]
        marks = ", ".join([mark] * len(part))
        sql = f"SELECT {cols} FROM {_MESSAGES} WHERE memory_id = {mark} AND seq IN ({marks})"
        for row in run(sql, (memory_id, *part)):
            values = list(row)
            # A driver-level read returns the JSON column as text on SQLite (parsed on PostgreSQL).
            if isinstance(values[-1], str):
                values[-1] = json.loads(values[-1])
            found[int(values[0])] = values
    return found
