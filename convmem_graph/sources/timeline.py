"""One ordered, de-duplicated timeline from several read results.

Rules:

- Order: ``timestamp_ms``, stable on ties (input order: results in the order given, messages in
  each result's order, which the readers already sort by their vendor sequence).
- Same id twice (a re-read, overlapping IM pages in two files): one message is kept, the finished
  one over a partial one, else the first. TRTC turns whose sentences were read from separate
  payloads share an id and are joined back (their ``sentences`` metadata is merged).
- The same utterance from two payloads (two read results: another source, channel, pull or
  webhook delivery): same role, same normalized text (NFKC, case, whitespace and punctuation
  ignored), ``|dt| <= dedupe_window_ms``, and one utterance by the identity rule the store also
  applies (:func:`convmem_graph._copies.one_utterance`). Inside one payload a repeat is a real
  repeat and is kept (the vendor's own keys already tell its items apart).
  The richer message is kept (a call's own copy over the memory proxy's, then the one with
  ``turn_id``/``round_id``, else the earlier one), taking in what a proxy copy knows (a cut
  stream: :func:`convmem_graph._copies.absorb_proxy_copy`); the other is reported as
  ``SkippedItem(reason="duplicate")``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from convmem_graph._copies import (
    CopyView,
    absorb_proxy_copy,
    merge_copies,
    merged_generated,
    one_utterance,
    original_of,
)
from convmem_graph.models import Message, ReadResult, SkippedItem
from convmem_graph.text.sentences import join_sentences, normalize_text

__all__ = ["merge_timeline", "merge_timeline_traced", "normalize_text"]


@dataclass
class _Entry:
    message: Message
    origin: int
    order: int
    dropped: bool = False


def _richness(m: Message) -> tuple[int, int]:
    # A vendor's copy over the memory proxy's (as the store keeps a call's), then a turn or round id.
    return (0 if m.channel == "api" else 1, 1 if (m.turn_id is not None or m.round_id is not None) else 0)


def _may_be_copies(a: Message, b: Message, window: int) -> bool:
    """Whether ``a`` and ``b`` (same role and words, close in time) are one utterance.

    The one identity rule the store also applies (:func:`convmem_graph._copies.one_utterance`):
    inside one channel two messages that both carry the vendor's identity are two utterances
    (the proxy's "好的" said twice, two IM messages, two TRTC rounds); a proxy answer of a TRTC
    call is only the round its request was open for. An answer whose round's sentences all came
    after its stream closed is left to the store, which links it by its words and the call's
    other copies (:func:`convmem_graph._copies.text_fallback_round`); a pair cannot.
    """
    return one_utterance(CopyView.of_message(a), CopyView.of_message(b), window)


def _absorbed(keep: Message, drop: Message) -> Message:
    # A proxy copy dropped for the call's voice copy hands over what it knows (a hung-up stream).
    if keep.channel != "api" and drop.channel == "api":
        return absorb_proxy_copy(keep, drop)
    return keep


def _path(m: Message) -> str:
    path = m.metadata.get("path")
    return path if isinstance(path, str) and path else "$"


def _merge_same_id(kept: Message, other: Message) -> Message:
    """Combine two reads of one message; TRTC sentence lists are unioned and re-joined."""
    a, b = kept.metadata.get("sentences"), other.metadata.get("sentences")
    if isinstance(a, list) and isinstance(b, list):
        pairs = {
            (p[0], p[1])
            for p in [*a, *b]
            if isinstance(p, list | tuple) and len(p) == 2 and isinstance(p[0], int) and isinstance(p[1], str)
        }
        sentences = sorted(pairs)
        joined = join_sentences([text for _, text in sentences])
        final = kept.metadata.get("final_text") or other.metadata.get("final_text")
        role = "assistant" if "assistant" in (kept.role, other.role) else "user"
        metadata: dict[str, Any] = {
            **other.metadata,
            **kept.metadata,
            "sentences": [list(p) for p in sentences],
        }
        if final:
            metadata["final_text"] = final
        content = final if role == "assistant" and isinstance(final, str) and final else joined
        interrupted = kept.interrupted or other.interrupted
        generated = merged_generated(kept.metadata, other.metadata)
        if generated:
            metadata["generated"] = generated
        text = content or kept.content
        return kept.model_copy(
            update={
                "role": role,
                "content": text,
                "timestamp_ms": sentences[0][0] if sentences else min(kept.timestamp_ms, other.timestamp_ms),
                "interrupted": interrupted,
                "original": (original_of(text, joined, generated) or kept.original)
                if interrupted
                else kept.original,
                "metadata": metadata,
            }
        )
    if kept.partial and not other.partial:
        return other
    if other.partial:
        return kept
    merged = merge_copies(kept, other)
    return kept if merged == kept else merged


def merge_timeline(
    results: Iterable[ReadResult], *, dedupe_window_ms: int = 10_000
) -> tuple[list[Message], list[SkippedItem]]:
    """Merge read results into one timeline ordered by time, without duplicates.

    Args:
        results: Read results, in input order.
        dedupe_window_ms: Largest time difference between two copies of one utterance.

    Returns:
        The messages ordered by ``timestamp_ms`` (stable on ties) and every skipped item: the
        results' own skipped items followed by the duplicates dropped here.
    """
    messages, traced = merge_timeline_traced(results, dedupe_window_ms=dedupe_window_ms)
    return messages, [item for _, item in traced]


def merge_timeline_traced(
    results: Iterable[ReadResult], *, dedupe_window_ms: int = 10_000
) -> tuple[list[Message], list[tuple[int, SkippedItem]]]:
    """Like :func:`merge_timeline`, but each skipped item comes with the index of its result.

    For a dropped duplicate the index is that of the result the dropped copy came from, so a
    caller that read several files can say which file each skipped item belongs to.
    """
    skipped: list[tuple[int, SkippedItem]] = []
    by_id: dict[str, _Entry] = {}
    entries: list[_Entry] = []
    order = 0
    for origin, result in enumerate(results):
        skipped.extend((origin, item) for item in result.skipped)
        for m in result.messages:
            seen = by_id.get(m.id)
            if seen is not None:
                merged = _merge_same_id(seen.message, m)
                # A TRTC turn read in pieces is joined; anything that adds nothing is a duplicate.
                if merged.metadata.get("sentences") == seen.message.metadata.get("sentences"):
                    # The kept copy may only have learned what names its call (a 103's channel).
                    kept = (
                        merged is seen.message
                        or merged.model_copy(update={"metadata": seen.message.metadata}) == seen.message
                    )
                    dropped, dropped_origin = (m, origin) if kept else (seen.message, seen.origin)
                    item = SkippedItem(reason="duplicate", path=_path(dropped), detail=f"same id {m.id}")
                    skipped.append((dropped_origin, item))
                if merged is m:
                    seen.origin = origin
                seen.message = merged
                continue
            entry = _Entry(message=m, origin=origin, order=order)
            order += 1
            by_id[m.id] = entry
            entries.append(entry)
    entries.sort(key=lambda e: (e.message.timestamp_ms, e.order))
    window = max(0, dedupe_window_ms)
    recent: dict[tuple[str, str], list[_Entry]] = {}
    # Copies can only come from different payloads: one payload needs no duplicate pass at all,
    # and a message with no other payload's message within the window cannot be a copy.
    if len({e.origin for e in entries}) < 2:
        return [e.message for e in entries], skipped
    for entry in _near_other_payloads(entries, window):
        m = entry.message
        norm = normalize_text(m.content)
        if not norm:  # punctuation only ("...", "？"): never collapsed
            continue
        key = (m.role, norm)
        # Entries are in time order, so copies older than the window can be forgotten.
        candidates = [
            c
            for c in recent.get(key, [])
            if not c.dropped and m.timestamp_ms - c.message.timestamp_ms <= window
        ]
        recent[key] = candidates
        match = next(
            (c for c in candidates if c.origin != entry.origin and _may_be_copies(c.message, m, window)), None
        )
        if match is None:
            candidates.append(entry)
            continue
        keep, drop = (entry, match) if _richness(m) > _richness(match.message) else (match, entry)
        drop.dropped = True
        keep.message = _absorbed(keep.message, drop.message)
        if keep is entry:
            candidates.append(entry)
        detail = f"{drop.message.id} duplicates {keep.message.id} ({drop.message.channel})"
        skipped.append(
            (drop.origin, SkippedItem(reason="duplicate", path=_path(drop.message), detail=detail))
        )
    return [e.message for e in entries if not e.dropped], skipped


def _near_other_payloads(entries: list[_Entry], window: int) -> list[_Entry]:
    """The entries (time-ordered) that have an entry of another payload within ``window`` ms.

    Two sweeps, forward and backward, each remembering the last two payloads seen and their
    latest times: enough to know the nearest time of a payload other than the current one.
    """
    near = [False] * len(entries)
    for indices in (range(len(entries)), range(len(entries) - 1, -1, -1)):
        top: tuple[int, int] | None = None  # (origin, time) of the latest payload seen
        second: tuple[int, int] | None = None  # the latest of any other payload
        for i in indices:
            e = entries[i]
            t = e.message.timestamp_ms
            other = top if top is not None and top[0] != e.origin else second
            if other is not None and abs(t - other[1]) <= window:
                near[i] = True
            if top is not None and top[0] == e.origin:
                top = (e.origin, t)
            else:
                second, top = top, (e.origin, t)
    return [e for e, is_near in zip(entries, near, strict=True) if is_near]
