"""TRTC rounds across runs: interruption marks and the welcome message's label, in any order.

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

import json
from collections.abc import Collection
from typing import Any

from sqlalchemy import Connection, select

from convmem_graph._copies import original_of
from convmem_graph.models import Message
from convmem_graph.store._rows import MESSAGE_COLUMN_NAMES, row_to_message
from convmem_graph.store.engine import chunked, insert_ignore
from convmem_graph.store.schema import messages, round_interruptions
from convmem_graph.text.sentences import join_sentences

__all__ = [
    "interrupted_copy",
    "label_welcome_turns",
    "mark_batch_rounds",
    "record_interruptions",
    "stored_rounds_to_mark",
]

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
    """``msg`` marked interrupted, with its generated text as ``original`` when it differs.

    The generated text is its sentences, or the proxy's streamed answer when that extends them
    (``metadata.generated``, :func:`convmem_graph._copies.original_of`).
    """
    joined = join_sentences(_sentence_texts(msg.metadata))
    generated = msg.metadata.get("generated")
    original = original_of(msg.content, joined, generated if isinstance(generated, str) else None)
    return msg.model_copy(update={"interrupted": True, "original": original or msg.original})


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


def _call_of(msg: Message) -> str | None:
    """The TRTC task of a voice round (a turn ``sources/trtc.py`` read), else ``None``."""
    if msg.channel != "voice" or msg.round_id is None or not isinstance(msg.metadata.get("sentences"), list):
        return None
    task = msg.metadata.get("task_id")
    return task if isinstance(task, str) else ""


def _task_in(raw: Any) -> str | None:
    meta = raw if isinstance(raw, dict) else None
    if meta is None and isinstance(raw, str):
        try:
            meta = json.loads(raw)
        except ValueError:
            meta = None
    task = meta.get("task_id") if isinstance(meta, dict) else None
    return task if isinstance(task, str) else None


def label_welcome_turns(
    conn: Connection, memory_id: str, unique: dict[str, Message], new_memory: bool
) -> dict[str, tuple[Message, int, str]]:
    """Label a call's bot turns ``greeting`` (the welcome message) or ``llm``, whatever the order.

    The rule, on what is stored: a TRTC bot turn is the welcome message when no human turn of the
    same call (``TaskId``) is stored with an earlier time. A reader can only tell from the one
    payload it reads (a welcome delivered alone looked like any answer), so the store decides:

    - a bot turn of the batch is labelled by the human turns of its call in the batch and by the
      newest stored voice turn of the human before it (one lookup per bot turn: calls of one
      memory follow each other, so an earlier turn of its call is that one if any);
    - a human turn of the batch turns a stored ``greeting`` of its call that comes after it into
      ``llm`` (returned: ``{id: (relabelled message, seq, stored content)}``, replaced by the caller).
    """
    humans: dict[str, int] = {}
    for msg in unique.values():
        task = _call_of(msg)
        if task is not None and msg.role == "user":
            humans[task] = min(humans.get(task, msg.timestamp_ms), msg.timestamp_ms)
    for mid, msg in list(unique.items()):
        task = _call_of(msg)
        if task is None or msg.role != "assistant":
            continue
        earlier = humans.get(task, msg.timestamp_ms) < msg.timestamp_ms
        if not earlier and not new_memory:
            query = (
                select(messages.c.metadata)
                .where(
                    messages.c.memory_id == memory_id,
                    messages.c.timestamp_ms < msg.timestamp_ms,
                    messages.c.channel == "voice",
                    messages.c.role == "user",
                )
                .order_by(messages.c.timestamp_ms.desc())
                .limit(1)
            )
            row = conn.execute(query).first()
            earlier = row is not None and _task_in(row[0]) == task
        label = "llm" if earlier else "greeting"
        if msg.source != label:
            unique[mid] = msg.model_copy(update={"source": label})
    relabelled: dict[str, tuple[Message, int, str]] = {}
    if humans and not new_memory:
        query = select(*(messages.c[name] for name in MESSAGE_COLUMN_NAMES)).where(
            messages.c.memory_id == memory_id,
            messages.c.timestamp_ms > min(humans.values()),
            messages.c.channel == "voice",
            messages.c.role == "assistant",
            messages.c.source == "greeting",
        )
        for row in conn.execute(query):
            stored = row_to_message(row)
            task = _call_of(stored)
            if stored.id in unique or task not in humans or stored.timestamp_ms <= humans[task]:
                continue
            relabelled[stored.id] = (stored.model_copy(update={"source": "llm"}), int(row[0]), stored.content)
    return relabelled
