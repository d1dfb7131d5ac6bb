"""MADial-Bench: each user's memory archive as convmem long-term memory, recalled from a dialogue's opening.

The archive (``*-memory.json``) holds dated one-sentence events per user; a dialogue
(``*-dialogue.json``) names its user, the assistant turns that should bring a memory up
(``test-turn``) and the archive memories it is about (``relevant-id``). Every event becomes a
fragment of its user's memory through ``ConvMemory.add_fragment`` (what an application that already
keeps such a profile would do), category from the event's scene. An event over the fragment limit
(200 characters, 13 English events) is split at sentence ends, and counts as recalled only when all
of its pieces are in the block.

Queries, from the dialogue lines before the first test turn: ``last`` = the last user line,
``user`` = all user lines, ``context`` = all lines (``Name: text``). Metric, per dialogue:
recall@block = the share of its relevant memories whose event text occurs in the 300-token block
(normalized as in ``text.normalize``), averaged over dialogues. Baseline: BM25 (jieba words for
Chinese, English words minus stop words) over the same user's events, best events packed to the
same budget.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from benchmarks.recall_kit.bm25 import BM25, pack
from benchmarks.recall_kit.locomo import Clock, DatasetError
from benchmarks.recall_kit.text import contains, normalize, tokenize
from convmem_graph import ConvMemory
from convmem_graph.models import FRAGMENT_MAX_CHARS
from convmem_graph.tokens import count_tokens

if TYPE_CHECKING:
    from langchain_core.embeddings import Embeddings

__all__ = [
    "QUERY_MODES",
    "Dialogue",
    "Event",
    "UserIndex",
    "block_tokens",
    "bm25_block",
    "convmem_block",
    "day_ms",
    "load_madial",
    "load_user_chats",
    "load_user_memories",
    "memory_id",
    "queries",
    "recall",
    "split_event",
]

QUERY_MODES = ("last", "user", "context")
_LINE = re.compile(r'^\s*<([^<>\s]{1,40})>\s*:\s*"?(.*?)"?\s*$', re.DOTALL)
_SCENE_CATEGORY = {
    "活动类": "event",
    "activity": "event",
    "情绪类": "event",
    "emotional": "event",
    "喜好类": "preference",
    "preferences": "preference",
    "物品类": "other",
    "其他类": "other",
    "others": "other",
}
_SENTENCE_END = re.compile(r"(?<=[.!?。！？；;])\s*")


@dataclass(frozen=True)
class Event:
    """One archive memory."""

    id: int
    user_id: int
    time: str
    scene: str
    text: str


@dataclass(frozen=True)
class Dialogue:
    """One dialogue: its user, its lines ``(speaker, text)`` (no BOD/EOD), the test turns, the gold ids."""

    index: int
    user_id: int
    lines: list[tuple[str, str]]
    first_test: int
    relevant: list[int]


def _read_jsonl(path: Path) -> list[Any]:
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise DatasetError(f"MADial: {path}: cannot read: {exc}") from None
    rows = []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError as exc:
            raise DatasetError(f"MADial: {path}: line {n}: not JSON: {exc}") from None
    return rows


def _one(directory: Path, pattern: str) -> Path:
    found = sorted(p for p in directory.glob(pattern) if "setting" not in p.name)
    if len(found) != 1:
        raise DatasetError(f"MADial: {directory}: expected one file matching {pattern}, found {len(found)}")
    return found[0]


def _parse_line(raw: Any, path: str) -> tuple[str | None, str] | None:
    # (speaker, text); speaker None for an untagged line: 35 English lines lack the tag and are
    # only quoted ("...") or bracketed (<...>).
    if not isinstance(raw, str):
        raise DatasetError(f"MADial: {path}: expected a string")
    if raw.strip() in ("<BOD>", "<EOD>"):
        return None
    m = _LINE.match(raw)
    if m:
        return m[1].strip(), m[2].strip()
    if raw.strip()[:1] in ('"', "<"):
        return None, raw.strip().strip('"<>').strip()
    raise DatasetError(f"MADial: {path}: expected '<Name>:\"text\"', got {raw[:60]!r}")


def load_madial(directory: Path) -> tuple[list[Dialogue], list[Event]]:
    """Read one language folder (``ch/`` or ``en/``): its dialogues and its archive.

    English archive lines carry no ``user-id``: an event belongs to the user whose name (as the
    dialogues spell it) it mentions; an event naming no user or both goes to both.

    Raises:
        DatasetError: On a missing file or a mistyped field, naming the field path.
    """
    dpath = _one(directory, "*-dialogue.json")
    mpath = _one(directory, "*-memory.json")
    dialogues: list[Dialogue] = []
    names: dict[int, str] = {}
    for k, row in enumerate(_read_jsonl(dpath)):
        where = f"{dpath.name}: line {k + 1}"
        if not isinstance(row, dict):
            raise DatasetError(f"MADial: {where}: expected an object")
        raw = row.get("dialogue")
        tests = row.get("test-turn")
        relevant = row.get("relevant-id")
        user = row.get("user-id")
        if not isinstance(raw, list):
            raise DatasetError(f"MADial: {where}: dialogue: expected a list of strings")
        if not isinstance(tests, list) or not tests or not all(isinstance(t, int) for t in tests):
            raise DatasetError(f"MADial: {where}: test-turn: expected a non-empty list of integers")
        if not isinstance(relevant, list) or not all(isinstance(r, int) for r in relevant):
            raise DatasetError(f"MADial: {where}: relevant-id: expected a list of integers")
        if not isinstance(user, int):
            raise DatasetError(f"MADial: {where}: user-id: expected an integer")
        # test-turn indexes the raw list, where index 0 is <BOD>.
        parsed_lines: list[tuple[str | None, str]] = []
        first_test = None
        for i, item in enumerate(raw):
            parsed = _parse_line(item, f"{where}: dialogue[{i}]")
            if parsed is None:
                continue
            if i == min(tests):
                first_test = len(parsed_lines)
            parsed_lines.append(parsed)
        if first_test is None:
            raise DatasetError(f"MADial: {where}: test-turn {min(tests)} is not a dialogue line")
        name = next((s for s, _ in parsed_lines if s and s.lower() != "assistant"), None)
        if name is None:
            raise DatasetError(f"MADial: {where}: dialogue: no line of the user")
        names.setdefault(user, name)
        # An untagged line is the other speaker of the line before it (the dialogues alternate).
        lines: list[tuple[str, str]] = []
        for speaker, text in parsed_lines:
            if speaker is None:
                previous = lines[-1][0] if lines else "Assistant"
                speaker = "Assistant" if previous.lower() != "assistant" else name
            lines.append((speaker, text))
        dialogues.append(Dialogue(k, user, lines, first_test, relevant))
    events: list[Event] = []
    for k, row in enumerate(_read_jsonl(mpath)):
        where = f"{mpath.name}: line {k + 1}"
        if not isinstance(row, dict) or len(row) != 1:
            raise DatasetError(f"MADial: {where}: expected an object with one memory id")
        ((key, value),) = row.items()
        if not isinstance(value, dict) or not isinstance(value.get("event"), str):
            raise DatasetError(f"MADial: {where}: {key}.event: expected a string")
        try:
            mid = int(key)
        except ValueError:
            raise DatasetError(f"MADial: {where}: memory id {key!r} is not an integer") from None
        owners = [value["user-id"]] if isinstance(value.get("user-id"), int) else []
        if not owners:
            owners = [u for u, name in names.items() if name in value["event"]] or list(names)
        for owner in owners:
            events.append(
                Event(
                    mid,
                    owner,
                    str(value.get("time", "")),
                    str(value.get("scene", "")),
                    value["event"].strip(),
                )
            )
    return dialogues, events


def split_event(text: str, limit: int = FRAGMENT_MAX_CHARS) -> list[str]:
    """Split text longer than ``limit`` characters at sentence ends (then hard) into pieces.

    Example:
        >>> split_event("One. Two. Three.", limit=10)
        ['One. Two.', 'Three.']
    """
    if len(text) <= limit:
        return [text]
    pieces: list[str] = []
    current = ""
    for sentence in (s for s in _SENTENCE_END.split(text) if s):
        while len(sentence) > limit:
            if current:
                pieces.append(current)
                current = ""
            pieces.append(sentence[:limit])
            sentence = sentence[limit:]
        joined = f"{current} {sentence}".strip() if current else sentence
        if len(joined) <= limit:
            current = joined
        else:
            pieces.append(current)
            current = sentence
    if current:
        pieces.append(current)
    return pieces


def memory_id(lang: str, user_id: int) -> str:
    """The convmem memory id of a user of one language."""
    return f"madial_{lang}_user{user_id}"


def load_user_memories(mem: ConvMemory, lang: str, events: list[Event]) -> int:
    """Add every event as a fact of its user's memory; returns the fragments stored.

    An event longer than a fragment holds is stored as linked pieces (``add_long_fragment``).
    """
    for event in events:
        category = _SCENE_CATEGORY.get(event.scene.strip().lower(), "other")
        mem.add_long_fragment(memory_id(lang, event.user_id), event.text, category=category)
    return sum(len(mem.fragments(memory_id(lang, u))) for u in {e.user_id for e in events})


def day_ms(day: str) -> int:
    """``YYYY-MM-DD`` as ms UTC at midnight.

    Raises:
        DatasetError: If ``day`` is not in that form.
    """
    try:
        return int(datetime.strptime(day, "%Y-%m-%d").replace(tzinfo=UTC).timestamp() * 1000)
    except ValueError:
        raise DatasetError(f"MADial: memory time {day!r}: expected YYYY-MM-DD") from None


def load_user_chats(mem: ConvMemory, lang: str, events: list[Event], clock: Clock) -> int:
    """Write every event out as a past chat; returns the messages stored.

    Each event becomes one user message at 20:00 UTC on its date; a user's events of one day are
    one lifecycle run, with the clock at that evening; days run in date order.
    """
    days: dict[tuple[str, int], list[Event]] = {}
    for event in sorted(events, key=lambda e: (e.time, e.user_id, e.id)):
        days.setdefault((event.time, event.user_id), []).append(event)
    stored = 0
    for (day, user), todays in days.items():
        start = day_ms(day) + 20 * 3_600_000
        times = [start + i * 60_000 for i in range(len(todays))]
        messages = [
            {"role": "user", "content": e.text, "timestamp": t} for e, t in zip(todays, times, strict=True)
        ]
        clock.now_ms = times[-1]
        stored += mem.ingest(memory_id(lang, user), messages, source="openai").new_messages
    return stored


def queries(dialogue: Dialogue) -> dict[str, str]:
    """The three queries of a dialogue, from the lines before its first test turn."""
    before = dialogue.lines[: dialogue.first_test]
    user_lines = [text for speaker, text in before if speaker.lower() != "assistant"]
    return {
        "last": user_lines[-1] if user_lines else "",
        "user": "\n".join(user_lines),
        "context": "\n".join(f"{speaker}: {text}" for speaker, text in before),
    }


class UserIndex:
    """BM25 over one user's events (rendered as the events' text)."""

    def __init__(self, events: list[Event]) -> None:
        self.events = events
        self.lines = [e.text for e in events]
        self.bm25 = BM25([tokenize(e.text) for e in events])


def recall(dialogue: Dialogue, block: str, by_id: dict[int, Event]) -> float:
    """Share of the dialogue's relevant events whose text (every piece) occurs in ``block``."""
    if not dialogue.relevant:
        return 0.0
    haystack = normalize(block)
    hits = sum(
        all(contains(normalize(piece), haystack) for piece in split_event(by_id[r].text))
        for r in dialogue.relevant
    )
    return hits / len(dialogue.relevant)


def convmem_block(mem: ConvMemory, lang: str, user_id: int, query: str, budget: int) -> tuple[str, float]:
    """The payload's memory block for ``query`` and the ms it took."""
    started = time.perf_counter()
    messages = mem.payload(
        memory_id(lang, user_id), "openai", query=query, budget_tokens=budget, recent_turns=0
    )
    ms = (time.perf_counter() - started) * 1000
    text = messages[0]["content"] if messages and messages[0]["role"] == "system" else ""
    return text, ms


def bm25_block(index: UserIndex, query: str, budget: int) -> tuple[str, float]:
    """BM25's best events packed to ``budget`` tokens, and the ms it took."""
    started = time.perf_counter()
    text, _ = pack(index.lines, index.bm25.top(tokenize(query)), budget, chronological=False)
    return text, (time.perf_counter() - started) * 1000


def dense_block(embeddings: Embeddings, events: list[Event], query: str, budget: int) -> tuple[str, float]:
    """The user's events nearest ``query`` by the model's cosine, packed like BM25's, and the ms it took.

    The events' vectors come from ``embeddings`` (a disk cache makes a rerun cheap); the ms cover
    the query's vector (a cache lookup when the model is cached) and the ranking, not the events'.
    """
    lines = [e.text for e in events]
    vectors = np.asarray(embeddings.embed_documents(lines), dtype=np.float32)
    started = time.perf_counter()
    if not query.strip():
        return "", (time.perf_counter() - started) * 1000
    q = np.asarray(embeddings.embed_query(query), dtype=np.float32)
    cos = vectors @ q / np.maximum(np.linalg.norm(vectors, axis=1) * np.linalg.norm(q), 1e-12)
    order = [int(i) for i in np.argsort(-cos, kind="stable")]
    text, _ = pack(lines, order, budget, chronological=False)
    return text, (time.perf_counter() - started) * 1000


def block_tokens(text: str) -> int:
    """Tokens of a block."""
    return count_tokens(text)
