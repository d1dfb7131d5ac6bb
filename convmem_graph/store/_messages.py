"""Message rows: conversion, content hashing and the bulk insert with duplicate detection."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, delete, select

from convmem_graph._copies import (
    CopyView,
    absorb_proxy_copy,
    adds_to,
    copy_call,
    merge_copies,
    merged_generated,
    one_utterance,
    original_of,
    text_fallback_round,
)
from convmem_graph.models import Message
from convmem_graph.store._driver import driver_execute
from convmem_graph.store._rounds import (
    label_welcome_turns,
    mark_batch_rounds,
    record_interruptions,
    stored_rounds_to_mark,
)
from convmem_graph.store._rows import MESSAGE_COLUMN_NAMES, row_to_message
from convmem_graph.store.engine import chunked, dumps
from convmem_graph.store.schema import messages
from convmem_graph.text.sentences import join_sentences, normalize_text

__all__ = [
    "INSERT_COLUMNS",
    "MESSAGE_COLUMNS",
    "PreparedBatch",
    "RowWriter",
    "content_hash",
    "insert_messages",
    "normalize_text",
    "prepare_messages",
    "row_to_message",
]

#: Columns read back into a Message (everything but the internal hash), in :func:`row_to_message` order.
MESSAGE_COLUMNS = tuple(messages.c[name] for name in MESSAGE_COLUMN_NAMES)
#: Columns a message insert writes: those read back but the seq (assigned), and the hash.
INSERT_COLUMNS = (*MESSAGE_COLUMN_NAMES[1:], "content_hash")

#: How a backend writes a batch's new rows (values in :data:`INSERT_COLUMNS` order) inside the
#: caller's transaction: ``(conn, memory_id, rows, ids)``, ``ids`` the rows' message ids in order.
RowWriter = Callable[[Connection, str, list[tuple[Any, ...]], list[str]], None]


def content_hash(role: str, content: str) -> int | None:
    """Return a signed 64-bit hash of role and normalized content, or None when nothing is left."""
    norm = normalize_text(content)
    if not norm:
        return None
    digest = hashlib.blake2b(f"{role}\x1f{norm}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


@dataclass(slots=True)
class _Seen:
    """A stored or accepted message as far as cross-channel duplicate detection is concerned.

    Kept grouped by its (channel, source), so it holds only what the identity rule reads.
    """

    #: What the identity rule reads of it (``convmem_graph._copies.one_utterance``); for a message
    #: of the batch made on first use (``message`` set instead): most texts never meet a copy from
    #: another channel, and the view reads the metadata several ways (a tenth of a replay's insert).
    known: CopyView | None
    message: Message | None = None

    @property
    def view(self) -> CopyView:
        """The copy's view, made from its message the first time it is asked for."""
        if self.known is None:
            assert self.message is not None
            self.known = CopyView.of_message(self.message)
        return self.known


def _supersedes(new_partial: bool, new_len: int, old_partial: bool, old_len: int) -> bool:
    # A streamed message re-read later (same id) replaces its partial version; nothing else does.
    return old_partial and (not new_partial or new_len > old_len)


def _sentences(metadata: Any) -> list[tuple[int, str]] | None:
    # Per-sentence [EventMsTs, text] pairs a TRTC turn keeps in its metadata (sources/trtc.py).
    raw = metadata.get("sentences") if isinstance(metadata, dict) else None
    if not isinstance(raw, list) or not raw:
        return None
    out: list[tuple[int, str]] = []
    for item in raw:
        if not (isinstance(item, list | tuple) and len(item) == 2 and isinstance(item[1], str)):
            return None
        if not isinstance(item[0], int) or isinstance(item[0], bool):
            return None
        out.append((item[0], item[1]))
    return out


def _is_round(metadata: Any) -> bool:
    # A voice round as sources/trtc.py reads it: its sentences (maybe none yet) and final text.
    return isinstance(metadata, dict) and isinstance(metadata.get("sentences"), list)


def _merge_round(
    new: Message,
    stored: Message,
    old_sents: list[tuple[int, str]],
    new_sents: list[tuple[int, str]],
    old_meta: dict[str, Any],
) -> Message | None:
    """Two reads of one TRTC round: what every delivery of it says together, in any order.

    The round is the union of its 903 sentences (in ``EventMsTs`` order), the 905 text when any
    copy has it (what was spoken, for the bot), interrupted when any copy saw the interruption
    metric and the time of its first sentence (else the earliest copy's): what one run over all
    deliveries gives. The source (``greeting`` or ``llm``) stays as first stored.
    """
    sentences = sorted(dict.fromkeys([*old_sents, *new_sents]), key=lambda item: item[0])
    final = new.metadata.get("final_text") or old_meta.get("final_text")
    joined = join_sentences([text for _, text in sentences])
    bot = new.role == "assistant" or stored.role == "assistant"
    content = final if bot and isinstance(final, str) and final else joined or stored.content
    interrupted = bot and (new.interrupted or stored.interrupted)
    # The proxy's streamed answer of a cut round (``convmem_graph._copies.absorb_proxy_copy``).
    generated = merged_generated(old_meta, new.metadata)
    original = original_of(content, joined, generated) if interrupted else None
    timestamp = sentences[0][0] if sentences else min(new.timestamp_ms, stored.timestamp_ms)
    # "greeting" or "llm": decided on what is stored once the batch is merged (store._rounds).
    source = stored.source
    metadata = {**old_meta, **new.metadata, "sentences": [list(item) for item in sentences]}
    if final:
        metadata["final_text"] = final
    if generated:
        metadata["generated"] = generated
    merged = new.model_copy(
        update={
            "content": content,
            "timestamp_ms": timestamp,
            "interrupted": interrupted,
            "original": original,
            "source": source,
            "metadata": metadata,
        }
    )
    # A 905 whose text equals the sentences so far still counts: a later 903 must not extend it.
    learned = sentences != old_sents or final != old_meta.get("final_text")
    return merged if adds_to(stored, merged) or learned else None


def _merge_same_id(
    new: Message,
    old_partial: bool,
    old_content: str,
    old_ts: int,
    old_metadata: Any = None,
    stored: Message | None = None,
) -> Message | None:
    """Decide what a message whose id is already stored becomes; ``None`` keeps the stored row.

    - a partial stored message is replaced by its completion (streamed IM chatbot replies);
    - a turn whose sentences are kept with their times (``metadata.sentences``: TRTC sentences
      arriving one callback at a time) is the union of both versions' sentences in time order,
      so a late middle sentence lands in its place and a retry changes nothing (unless either
      version has a vendor's final text, which then decides as below);
    - a new version that contains the stored text and is longer replaces it (a message that grew);
    - other turns of several deliveries (``round_id`` set) are joined with the stored text in time
      order, so no sentence is lost;
    - the same words again are merged field by field (``convmem_graph._copies``: turn id, the
      earliest time, interruption, the generated text); the row is replaced only when that adds
      something (``stored`` is the stored row, when the caller read it);
    - anything else is the same message again.
    """
    if _supersedes(new.partial, len(new.content), old_partial, len(old_content)):
        return new
    old_sents, new_sents = _sentences(old_metadata), _sentences(new.metadata)
    if (
        stored is not None
        and new.round_id is not None
        and _is_round(old_metadata)
        and _is_round(new.metadata)
    ):
        return _merge_round(new, stored, old_sents or [], new_sents or [], old_metadata or {})
    finals = "final_text" in (old_metadata or {}) or "final_text" in new.metadata
    if new.round_id is not None and old_sents and new_sents and not finals:
        known = set(old_sents)
        added = [s for s in dict.fromkeys(new_sents) if s not in known]
        if not added:
            return None
        # Stable sort: on equal times the stored sentences stay first (arrival order).
        merged = sorted(old_sents + added, key=lambda s: s[0])
        return new.model_copy(
            update={
                "content": join_sentences([text for _, text in merged]),
                "timestamp_ms": merged[0][0],
                "metadata": {**old_metadata, **new.metadata, "sentences": [list(s) for s in merged]},
            }
        )
    new_norm, old_norm = normalize_text(new.content), normalize_text(old_content)
    if new_norm == old_norm and stored is not None and not new.partial and not old_partial:
        # The same words again: a further copy of the utterance, which may know more (a turn id,
        # an earlier start, an interruption): the one precedence rule decides the row.
        combined = merge_copies(stored, new)
        return combined if adds_to(stored, combined) else None
    if not new_norm or new_norm in old_norm:
        return None
    if old_norm in new_norm:
        return new
    if new.round_id is None:
        return None
    joined = join_sentences(
        [old_content, new.content] if new.timestamp_ms >= old_ts else [new.content, old_content]
    )
    return new.model_copy(update={"content": joined, "timestamp_ms": min(old_ts, new.timestamp_ms)})


def _load_metadata(raw: Any) -> dict[str, Any] | None:
    # Driver-level reads return the JSON column as text (SQLite) or already parsed (psycopg).
    if raw is None or isinstance(raw, dict):
        return raw
    try:
        value = json.loads(raw)
    except (TypeError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def _mirrored(msg: Message, seen: dict[tuple[str, str], list[_Seen]], window_ms: int) -> bool:
    """Whether a same-text copy seen from another (channel, source) is one utterance with ``msg``.

    ``seen``: the copies with the message's content hash, by (channel, source). Copies from one
    (channel, source) have their own ids: a further same-text one is a repeat, so the message's
    own group is never compared (a line said often on one channel costs nothing here).
    """
    own = (msg.channel, msg.source)
    view: CopyView | None = None
    for key, copies in seen.items():
        if key == own:
            continue
        view = view or CopyView.of_message(msg)
        if any(one_utterance(other.view, view, window_ms) for other in copies):
            return True
    return False


@dataclass(slots=True)
class PreparedBatch:
    """A batch of messages with the work that needs no database done (see :func:`prepare_messages`)."""

    #: Last occurrence of each id (unless an earlier one is already complete), in batch order.
    unique: dict[str, Message]
    #: Content hash of each message in ``unique``.
    hashes: dict[str, int | None]


def prepare_messages(batch: Sequence[Message]) -> PreparedBatch:
    """Collapse repeated ids and hash contents, outside any transaction (it is pure CPU work)."""
    unique: dict[str, Message] = {}
    for msg in batch:
        prev = unique.get(msg.id)
        if prev is None or _supersedes(msg.partial, len(msg.content), prev.partial, len(prev.content)):
            unique[msg.id] = msg
    return PreparedBatch(unique, {mid: content_hash(m.role, m.content) for mid, m in unique.items()})


#: PostgreSQL array type of the columns :func:`_rows_in` looks up.
_LOOKUP_TYPES = {"id": "text", "content_hash": "bigint"}


def _rows_in(
    conn: Connection,
    columns: str,
    memory_id: str,
    key: str,
    values: Sequence[Any],
    between: tuple[int, int] | None = None,
) -> Any:
    """``columns`` of the memory's messages whose ``key`` column is one of ``values``.

    ``between``: only rows whose ``timestamp_ms`` lies in this closed range.

    Driver-level SQL (:func:`~convmem_graph.store._driver.driver_execute`): compiling expanding
    IN lists per chunk cost more than the lookups. On PostgreSQL one array
    parameter: a query text of its own per list length cost psycopg about a
    millisecond to parse each time.
    """
    sql = f"SELECT {columns} FROM {messages.name} WHERE memory_id = "
    span: tuple[int, ...] = between or ()
    if conn.dialect.name == "postgresql":
        sql += f"%s AND {key} = ANY(%s::{_LOOKUP_TYPES[key]}[])"
        if between is not None:
            sql += " AND timestamp_ms BETWEEN %s AND %s"
        return driver_execute(conn, sql, (memory_id, list(values), *span))
    sql += f"? AND {key} IN ({', '.join('?' * len(values))})"
    if between is not None:
        sql += " AND timestamp_ms BETWEEN ? AND ?"
    # On SQLite's own cursor: SQLAlchemy's result fetched the rows one call each (a replay's
    # duplicate lookups read thousands of rows per batch).
    return driver_execute(conn, sql, (memory_id, *values, *span))


def _absorb_proxy_copies(
    conn: Connection, memory_id: str, unique: dict[str, Message], window_ms: int, new_memory: bool
) -> tuple[dict[str, tuple[int, str]], dict[str, tuple[Message, int, str]]]:
    """The voice copy of a call's utterance wins over the memory proxy's copy of it, in any order.

    A call through the proxy says everything twice: the voice channel (TRTC 903/905 with a round
    id, the spoken text, interrupted from 906/908; Agora history/103) and the proxy's copy (the
    LLM request's user text and the generated answer; ``task_id`` from ``X-Task-Id``, and for an
    answer the span its request was open). A proxy copy that is a voice copy's utterance
    (:func:`~convmem_graph._copies.one_utterance`, the rule the batch merge also applies) is
    not stored when it is in the batch and deleted when it was stored. An answer that no round
    of its call matches by its request's span (TRTC sent the round's sentences after the stream
    closed) is the round :func:`~convmem_graph._copies.text_fallback_round` names, among the
    rounds no other answer's span names: the earliest round at or after the request whose human
    turn came before it, with the same words. What it knows goes to the voice copy
    (:func:`~convmem_graph._copies.absorb_proxy_copy`): an answer whose client hung up marks the
    round it answered interrupted, with the streamed text as ``original``; a stored voice copy
    that learns this is returned for replacement.

    Returns:
        The stored proxy copies to delete, ``{id: (seq, content)}``, and the stored voice copies
        that learned from a proxy copy, ``{id: (updated message, seq, stored content)}``.
    """
    called = {
        m.id: (m, call) for m in unique.values() if (call := copy_call(m.channel, m.metadata)) is not None
    }
    if not called:
        return {}, {}
    batch = {mid: m for mid, (m, _call) in called.items()}
    copies: dict[str, Message] = dict(batch)
    seqs: dict[str, tuple[int, str]] = {}
    calls = {call for _m, call in called.values()}
    # An Agora call's text typed over RTM is its "im" copy (sources/agora.py); TRTC has none, and
    # a batch of TRTC calls does not read the IM rows of its span.
    channels = (
        ("voice", "api", "im") if any(c == "" or c.startswith("agora:") for c in calls) else ("voice", "api")
    )
    if not new_memory:
        lo = min(m.timestamp_ms for m in batch.values()) - window_ms
        hi = max(m.timestamp_ms for m in batch.values()) + window_ms
        query = select(*MESSAGE_COLUMNS).where(
            messages.c.memory_id == memory_id,
            messages.c.timestamp_ms.between(lo, hi),
            messages.c.channel.in_(channels),
        )
        for row in conn.execute(query):
            stored = row_to_message(row)
            if stored.id not in unique and CopyView.of_message(stored).call in calls:
                copies[stored.id] = stored
                seqs[stored.id] = (int(row[0]), stored.content)
    views = {mid: CopyView.of_message(m) for mid, m in copies.items()}
    voices = sorted(mid for mid, v in views.items() if v.channel != "api")
    absorbed: dict[str, tuple[int, str]] = {}
    learned: dict[str, tuple[Message, int, str]] = {}
    proxies = sorted(mid for mid, v in views.items() if v.channel == "api")
    matched = {
        pid: [
            vid
            for vid in voices
            if views[vid].call == views[pid].call and one_utterance(views[pid], views[vid], window_ms)
        ]
        for pid in proxies
    }
    # Rounds an answer's span names are that answer's: none is another answer's fallback.
    taken = {vid for vids in matched.values() for vid in vids if views[vid].round_times}
    voice_views = {vid: views[vid] for vid in voices}
    for pid in proxies:
        proxy = copies[pid]
        matches, linked = matched[pid], False
        if not matches:
            fallback = text_fallback_round(views[pid], voice_views, window_ms, taken)
            if fallback is None:
                continue
            matches, linked = [fallback], True
        if pid in seqs:
            absorbed[pid] = seqs[pid]
        else:
            del unique[pid]
        for vid in matches:
            updated = absorb_proxy_copy(copies[vid], proxy, linked=linked)
            if updated is copies[vid]:
                continue
            copies[vid] = updated
            if vid in seqs:
                learned[vid] = (updated, *seqs[vid])
            else:
                unique[vid] = updated
    return absorbed, learned


def insert_messages(
    conn: Connection,
    memory_id: str,
    batch: Sequence[Message] | PreparedBatch,
    *,
    window_ms: int,
    write_rows: RowWriter,
    replaced_rows: list[tuple[int, str]] | None = None,
    new_memory: bool = False,
    interruptions: Collection[tuple[str, str]] = (),
    now_ms: int = 0,
) -> list[str]:
    """Insert the new messages of ``batch`` into one memory, inside the caller's transaction.

    Skipped: a message whose id is already stored in this memory with the same text (a stored row
    is replaced, with a new seq so it is processed again, when the new one completes a partial
    message, grew, or is a further delivery of the same spoken round: see ``_merge_same_id``), and
    a message whose role and normalized text equal a message stored or
    accepted from another (channel, source) within ``window_ms``.

    Args:
        conn: A connection inside a write transaction.
        memory_id: The memory; ``Message.memory_id`` of the inputs is ignored.
        batch: Messages in the order they should get their seq numbers, or their
            :func:`prepare_messages` (done before the transaction, so the write lock is held
            for the database work only).
        window_ms: Cross-channel duplicate window in milliseconds.
        write_rows: The backend's insert of the new rows (:data:`RowWriter`): SQLite's
            ``executemany``, PostgreSQL's one statement that may also index and stamp.
        replaced_rows: When given, ``(seq, content)`` of every stored row deleted to be replaced
            is appended (the episodic index drops them).
        new_memory: The memory was created in this transaction, so it holds no message yet: the
            duplicate lookups are skipped (two round trips on a database server).
        interruptions: TRTC ``(TaskId, RoundId)`` pairs an interruption metric named: kept, and
            the round's bot turn, stored or in the batch, is marked (``store._rounds``).
        now_ms: When the marks were received (kept with them).

    Returns:
        The ids inserted, in seq order.
    """
    prepared = batch if isinstance(batch, PreparedBatch) else prepare_messages(batch)
    unique = dict(prepared.unique)
    hashes = dict(prepared.hashes)
    if interruptions:
        record_interruptions(conn, memory_id, interruptions, now_ms)
        for marked in () if new_memory else stored_rounds_to_mark(conn, memory_id, interruptions, unique):
            # A further copy of the stored round, carrying the mark: merged below like any copy.
            unique[marked.id] = marked
            hashes[marked.id] = content_hash(marked.role, marked.content)
    if not unique:
        return []
    mark_batch_rounds(conn, memory_id, unique, interruptions, new_memory)

    replace: set[str] = set()
    old_rows: dict[str, tuple[int, str]] = {}
    for part in () if new_memory else chunked(list(unique)):
        found = _rows_in(
            conn,
            "id, partial, content, timestamp_ms, metadata, seq, source, turn_id, interrupted, original",
            memory_id,
            "id",
            part,
        )
        for mid, partial, content, ts, meta, seq, source, turn_id, interrupted, original in found:
            msg = unique[mid]
            old_meta = _load_metadata(meta)
            as_stored = msg.model_copy(
                update={
                    "metadata": old_meta or {},
                    "content": content or "",
                    "timestamp_ms": int(ts),
                    "source": source,
                    "turn_id": turn_id,
                    "interrupted": bool(interrupted),
                    "original": original,
                    "partial": bool(partial),
                }
            )
            merged = _merge_same_id(msg, bool(partial), content or "", int(ts), old_meta, as_stored)
            if merged is None:
                del unique[mid]
            else:
                unique[mid] = merged
                replace.add(mid)
                old_rows[mid] = (int(seq), content or "")
                hashes[mid] = content_hash(merged.role, merged.content)

    absorbed, learned = _absorb_proxy_copies(conn, memory_id, unique, window_ms, new_memory)
    old_rows.update(absorbed)
    replace.update(absorbed)  # deleted below: not a copy the text window may keep instead

    def replace_stored(rows: dict[str, tuple[Message, int, str]]) -> None:
        # A stored copy that learned from another (a welcome message with a human turn before
        # it, a round its proxy answer marks interrupted): replaced like a merged copy.
        for mid, (updated, seq, content) in rows.items():
            unique[mid] = updated
            hashes[mid] = content_hash(updated.role, updated.content)
            replace.add(mid)
            old_rows[mid] = (seq, content)

    replace_stored(learned)

    # With the batch final: the welcome message's label (a stored one may turn to llm).
    replace_stored(label_welcome_turns(conn, memory_id, unique, new_memory))

    seen: dict[int, dict[tuple[str, str], list[_Seen]]] = {}
    wanted = sorted({h for mid, h in hashes.items() if h is not None and mid in unique})
    # A stored row further than the window from every message of the batch is never one of its
    # utterances (``one_utterance``): read only the batch's span. Without the bound a line said
    # often ("好的") read every earlier copy of it, a cost growing with the memory.
    stamps = [m.timestamp_ms for mid, m in unique.items() if hashes[mid] is not None]
    span = (min(stamps) - window_ms, max(stamps) + window_ms) if stamps else None
    for hpart in () if new_memory else chunked(wanted):
        same = _rows_in(
            conn,
            "id, role, channel, source, timestamp_ms, content_hash, round_id, metadata, content, original",
            memory_id,
            "content_hash",
            hpart,
            span,
        )
        for rid, role, channel, source, ts, h, round_id, meta, content, original in same:
            if rid not in replace:
                view = CopyView.of(
                    role, channel, content or "", original, int(ts), round_id, _load_metadata(meta)
                )
                seen.setdefault(h, {}).setdefault((channel, source), []).append(_Seen(view))

    rows: list[tuple[Any, ...]] = []
    inserted: list[str] = []
    for mid, msg in unique.items():
        h = hashes[mid]
        if h is not None and mid not in replace:
            bucket = seen.setdefault(h, {})
            if bucket and _mirrored(msg, bucket, window_ms):
                continue
            bucket.setdefault((msg.channel, msg.source), []).append(_Seen(None, msg))
        rows.append(
            (
                memory_id,
                mid,
                msg.role,
                msg.content,
                msg.channel,
                msg.source,
                msg.timestamp_ms,
                msg.turn_id,
                msg.round_id,
                msg.speaker_id,
                msg.partial,
                msg.interrupted,
                msg.original,
                dumps(msg.metadata) if msg.metadata else None,
                h,
            )
        )
        inserted.append(mid)

    if replace:
        if replaced_rows is not None:
            replaced_rows.extend(old_rows[mid] for mid in sorted(replace))
        for rpart in chunked(sorted(replace)):
            conn.execute(delete(messages).where(messages.c.memory_id == memory_id, messages.c.id.in_(rpart)))
    if rows:
        write_rows(conn, memory_id, rows, inserted)
    return inserted
