"""TRTC interruption marks: a round's bot turn is interrupted whatever run the metric came in.

An interruption metric (906/908) names a round (``TaskId``, ``RoundId``) and nothing else: no
speaker, no text. Read in the same payload as the round, the reader marks the turn itself. Read
alone, before or after the round was stored (a webhook per callback, a file per callback, a
server or the library), it would mark nothing. So every mark is kept (``cm_round_interruptions``)
and applied where a batch is stored, in both directions:

- a stored bot turn of a marked round becomes interrupted (it is read again as a copy with the
  flag, and the round merge in ``store._messages`` decides its row: the spoken text stays, the
  generated sentences become ``original``);
- a bot turn of a marked round arriving later is stored interrupted.

The result is the one a single run over all the round's deliveries gives.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from sqlalchemy import Connection, select

from convmem_graph._text import join_sentences
from convmem_graph.models import Message
from convmem_graph.store._rows import MESSAGE_COLUMN_NAMES, row_to_message
from convmem_graph.store.engine import chunked, insert_ignore
from convmem_graph.store.schema import messages, round_interruptions

__all__ = ["interrupted_copy", "mark_batch_rounds", "record_interruptions", "stored_rounds_to_mark"]

Round = tuple[str, str]


def _round_of(msg: Message) -> Round | None:
    """The (task, round) of a TRTC bot turn not yet known to be interrupted, else ``None``."""
    if msg.role != "assistant" or msg.channel != "voice" or msg.round_id is None or msg.interrupted:
        return None
    if not isinstance(msg.metadata.get("sentences"), list):
        return None  # not a TRTC round (sources/trtc.py keeps its sentences)
    task = msg.metadata.get("task_id")
    return (task if isinstance(task, str) else "", msg.round_id)


def _sentence_texts(metadata: dict[str, Any]) -> list[str]:
    raw = metadata.get("sentences")
    if not isinstance(raw, list):
        return []
    pairs = [item for item in raw if isinstance(item, list | tuple) and len(item) == 2]
    return [text for _ts, text in pairs if isinstance(text, str)]


def interrupted_copy(msg: Message) -> Message:
    """``msg`` marked interrupted, with its generated sentences as ``original`` when they differ."""
    joined = join_sentences(_sentence_texts(msg.metadata))
    original = joined if joined and joined != msg.content else msg.original
    return msg.model_copy(update={"interrupted": True, "original": original})


def record_interruptions(conn: Connection, memory_id: str, rounds: Collection[Round], now_ms: int) -> None:
    """Keep the rounds' marks (a mark already kept stays as it is)."""
    if not rounds:
        return
    rows = [{"memory_id": memory_id, "task_id": t, "round_id": r, "at": now_ms} for t, r in sorted(rounds)]
    conn.execute(insert_ignore(conn.dialect.name, round_interruptions), rows)


def stored_rounds_to_mark(
    conn: Connection, memory_id: str, rounds: Collection[Round], skip: Collection[str]
) -> list[Message]:
    """Stored bot turns of ``rounds`` not yet marked, as copies carrying the mark (ids in ``skip`` left out).

    Each goes into the batch like any further copy of its round: the store's round merge then
    replaces the row (with a new seq, so the turn is processed again).
    """
    wanted = set(rounds)
    out: list[Message] = []
    for part in chunked(sorted({r for _t, r in wanted})):
        query = select(*(messages.c[name] for name in MESSAGE_COLUMN_NAMES)).where(
            messages.c.memory_id == memory_id,
            messages.c.round_id.in_(part),
            messages.c.role == "assistant",
            messages.c.channel == "voice",
            messages.c.interrupted.is_(False),
        )
        for row in conn.execute(query):
            msg = row_to_message(row)
            if msg.id not in skip and _round_of(msg) in wanted:
                out.append(msg.model_copy(update={"interrupted": True}))
    return out


def mark_batch_rounds(
    conn: Connection, memory_id: str, unique: dict[str, Message], rounds: Collection[Round], new_memory: bool
) -> None:
    """Mark the batch's bot turns of rounds marked now (``rounds``) or kept from an earlier run.

    One lookup of the kept marks per batch holding an unmarked TRTC bot turn (none for a memory
    created in this transaction).
    """
    pending = {mid: key for mid, msg in unique.items() if (key := _round_of(msg)) is not None}
    if not pending:
        return
    marked = set(rounds)
    if not new_memory:
        for part in chunked(sorted({r for _t, r in pending.values()})):
            query = select(round_interruptions.c.task_id, round_interruptions.c.round_id).where(
                round_interruptions.c.memory_id == memory_id, round_interruptions.c.round_id.in_(part)
            )
            marked.update((str(t), str(r)) for t, r in conn.execute(query))
    for mid, key in pending.items():
        if key in marked:
            unique[mid] = interrupted_copy(unique[mid])
