"""LoCoMo: load the conversations, ingest them into convmem, build each method's context per question.

Protocol (the one issue 9 describes): one memory per conversation, ``speaker_a`` as the user and
``speaker_b`` as the assistant, each message carrying its speaker's name (OpenAI ``name``), one
lifecycle run per session through ``ConvMemory.ingest`` with the memory's clock at that session's
time, image captions kept in the turn text. Questions of
categories 1-4 (5 is adversarial: no gold answer). Methods, each at a token budget except ``full``:

- ``convmem``: the system message of ``payload(mid, "openai", query=question, budget_tokens=B,
  recent_turns=0)``, with the clock at the end of the conversation;
- ``recent``: the newest turns that fit in B (a contiguous window);
- ``bm25``: BM25 over the conversation's turns (question -> turns), best turns packed to B;
- ``full``: every turn;
- ``bm25-lines`` (not run by default): issue 23's BM25 baseline, BM25 over the rendered lines, so
  the date and the speaker's name are indexed words of each turn ("What did Caroline..." favours
  Caroline's lines, "... in May 2023" lines of May 2023), packed as ``bm25``.

Raw turns are rendered ``[8 May 2023] Caroline: text`` (the session's date, LoCoMo's day-month-year
form) for ``recent``, ``bm25``, ``bm25-lines`` and ``full`` alike.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from benchmarks.recall_kit.bm25 import BM25, pack
from benchmarks.recall_kit.text import en_words, normalize
from convmem_graph import ConvMemory
from convmem_graph.tokens import count_tokens

__all__ = [
    "EXTRA_METHODS",
    "METHODS",
    "Clock",
    "Context",
    "Conversation",
    "ConversationIndex",
    "DatasetError",
    "Question",
    "Session",
    "Turn",
    "build_contexts",
    "ingest_conversation",
    "ingest_session",
    "load_locomo",
    "memory_id",
    "normalized",
    "parse_session_date",
]

#: Seconds between two turns of a session (LoCoMo dates sessions, not turns).
TURN_SPACING_MS = 30_000
_DATE = re.compile(
    r"^\s*(\d{1,2}):(\d{2})\s*(am|pm)\s+on\s+(\d{1,2})\s+([A-Za-z]+),?\s+(\d{4})\s*$", re.IGNORECASE
)


class DatasetError(ValueError):
    """A benchmark data file does not have the expected shape (the message names the field path)."""


@dataclass(frozen=True)
class Turn:
    """One LoCoMo turn as the benchmark uses it."""

    dia_id: str
    session: int
    speaker: str
    role: str
    text: str
    timestamp_ms: int
    date: str

    def render(self) -> str:
        """The line used by the raw-turn methods: ``[8 May 2023] Caroline: text``."""
        return f"[{self.date}] {self.speaker}: {self.text}"


@dataclass(frozen=True)
class Session:
    """A dated session with at least one turn."""

    number: int
    date_time: str
    turns: list[Turn]


@dataclass(frozen=True)
class Question:
    """A question with its gold answer and category (1 multi-hop, 2 temporal, 3 open-domain, 4 single-hop)."""

    index: int
    question: str
    answer: str
    category: int


@dataclass
class Conversation:
    """A LoCoMo sample: two speakers, their sessions and the questions about them."""

    sample_id: str
    speaker_a: str
    speaker_b: str
    sessions: list[Session]
    questions: list[Question]
    turns: list[Turn] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.turns = [t for s in self.sessions for t in s.turns]


@dataclass
class Clock:
    """A settable clock for ``ConvMemory.open(clock=...)``: the benchmark moves it session by session."""

    now_ms: int = 0

    def __call__(self) -> int:
        return self.now_ms


def parse_session_date(text: str, path: str) -> tuple[int, str]:
    """Parse ``"1:56 pm on 8 May, 2023"`` into (ms UTC, ``"8 May 2023"``).

    Raises:
        DatasetError: If the text is not in that form.

    Example:
        >>> parse_session_date("1:56 pm on 8 May, 2023", "x")
        (1683554160000, '8 May 2023')
    """
    m = _DATE.match(text if isinstance(text, str) else "")
    if not m:
        raise DatasetError(f"LoCoMo: {path}: expected a date like '1:56 pm on 8 May, 2023', got {text!r}")
    hour, minute, ampm, day, month, year = m.groups()
    h = int(hour) % 12 + (12 if ampm.lower() == "pm" else 0)
    try:
        dt = datetime.strptime(f"{day} {month[:3]} {year} {h}:{minute}", "%d %b %Y %H:%M").replace(tzinfo=UTC)
    except ValueError as exc:
        raise DatasetError(f"LoCoMo: {path}: not a valid date: {text!r} ({exc})") from None
    return int(dt.timestamp() * 1000), f"{int(day)} {dt.strftime('%B')} {year}"


def _str(value: Any, path: str) -> str:
    if not isinstance(value, str):
        raise DatasetError(f"LoCoMo: {path}: expected a string, got {type(value).__name__}")
    return value


def _turn_text(turn: dict[str, Any], path: str) -> str:
    text = _str(turn.get("text", ""), f"{path}.text").strip()
    caption = turn.get("blip_caption")
    if caption:
        text = f"{text} [shares a photo: {_str(caption, f'{path}.blip_caption').strip()}]".strip()
    return text


def load_locomo(path: Path) -> list[Conversation]:
    """Read ``locomo10.json`` (or a file of the same schema).

    Raises:
        DatasetError: On a missing or mistyped field, naming its path (``$[3].conversation...``).
    """
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise DatasetError(f"LoCoMo: {path}: cannot read JSON: {exc}") from None
    if not isinstance(data, list):
        raise DatasetError(f"LoCoMo: {path}: $: expected a list of samples")
    out = []
    for k, sample in enumerate(data):
        where = f"$[{k}]"
        if not isinstance(sample, dict) or not isinstance(sample.get("conversation"), dict):
            raise DatasetError(f"LoCoMo: {where}.conversation: expected an object")
        conv = sample["conversation"]
        speaker_a = _str(conv.get("speaker_a"), f"{where}.conversation.speaker_a")
        speaker_b = _str(conv.get("speaker_b"), f"{where}.conversation.speaker_b")
        numbers = sorted(int(m[1]) for key in conv if (m := re.fullmatch(r"session_(\d+)", key)) is not None)
        sessions = []
        for n in numbers:
            spath = f"{where}.conversation.session_{n}"
            raw = conv[f"session_{n}"]
            if not isinstance(raw, list):
                raise DatasetError(f"LoCoMo: {spath}: expected a list of turns")
            if not raw:
                continue
            date_key = f"session_{n}_date_time"
            base, day = parse_session_date(conv.get(date_key), f"{where}.conversation.{date_key}")
            turns = []
            for i, t in enumerate(raw):
                tpath = f"{spath}[{i}]"
                if not isinstance(t, dict):
                    raise DatasetError(f"LoCoMo: {tpath}: expected a turn object")
                speaker = _str(t.get("speaker"), f"{tpath}.speaker")
                text = _turn_text(t, tpath)
                if not text:
                    continue
                turns.append(
                    Turn(
                        dia_id=str(t.get("dia_id", f"D{n}:{i + 1}")),
                        session=n,
                        speaker=speaker,
                        role="user" if speaker == speaker_a else "assistant",
                        text=text,
                        timestamp_ms=base + i * TURN_SPACING_MS,
                        date=day,
                    )
                )
            if turns:
                sessions.append(Session(n, conv[date_key], turns))
        qa = sample.get("qa", [])
        if not isinstance(qa, list):
            raise DatasetError(f"LoCoMo: {where}.qa: expected a list")
        questions = []
        for j, q in enumerate(qa):
            qpath = f"{where}.qa[{j}]"
            if not isinstance(q, dict) or not isinstance(q.get("category"), int):
                raise DatasetError(f"LoCoMo: {qpath}.category: expected an integer")
            if q["category"] == 5:
                continue  # adversarial: no gold answer to find
            if q.get("answer") is None:
                raise DatasetError(f"LoCoMo: {qpath}.answer: missing")
            questions.append(
                Question(j, _str(q.get("question"), f"{qpath}.question"), str(q["answer"]), q["category"])
            )
        out.append(
            Conversation(str(sample.get("sample_id", f"conv-{k}")), speaker_a, speaker_b, sessions, questions)
        )
    return out


def memory_id(conv: Conversation) -> str:
    """The convmem memory id of a conversation."""
    return "locomo_" + re.sub(r"[^A-Za-z0-9_-]", "_", conv.sample_id)


def ingest_session(mem: ConvMemory, conv: Conversation, session: Session, clock: Clock) -> int:
    """One lifecycle run for one session, the clock at the session's last turn; returns new messages."""
    clock.now_ms = session.turns[-1].timestamp_ms
    # The speaker's name rides along as an OpenAI message's ``name``, as a chat app would send it.
    messages = [
        {"role": t.role, "content": t.text, "timestamp": t.timestamp_ms, "name": t.speaker}
        for t in session.turns
    ]
    return mem.ingest(memory_id(conv), messages, source="openai").new_messages


def ingest_conversation(mem: ConvMemory, conv: Conversation, clock: Clock) -> int:
    """Ingest one conversation, one lifecycle run per session; returns the new messages stored."""
    return sum(ingest_session(mem, conv, session, clock) for session in conv.sessions)


@dataclass(frozen=True)
class Context:
    """One method's context for one question."""

    method: str
    budget: int | None
    text: str
    tokens: int
    ms: float

    @property
    def label(self) -> str:
        """``bm25@300``, ``full``."""
        return self.method if self.budget is None else f"{self.method}@{self.budget}"


METHODS = ("convmem", "recent", "bm25", "full")
#: Methods run only when named in ``--methods``.
EXTRA_METHODS = ("bm25-lines",)
#: Methods that need ``--embeddings`` (not run by default).
EMBEDDING_METHODS = ("hybrid",)


class ConversationIndex:
    """What the raw-turn methods precompute once per conversation (rendered lines, BM25, full text)."""

    def __init__(self, conv: Conversation) -> None:
        self.conv = conv
        self.lines = [t.render() for t in conv.turns]
        self.bm25 = BM25([en_words(t.text) for t in conv.turns])
        # Issue 23's baseline indexes the whole rendered line (date and speaker included).
        self.bm25_lines = BM25([en_words(line) for line in self.lines])
        self.full = "\n".join(self.lines)
        self.full_tokens = count_tokens(self.full)
        self.newest_first = list(range(len(self.lines) - 1, -1, -1))


def _recent(index: ConversationIndex, budget: int) -> str:
    # A contiguous window: stop at the first turn that does not fit.
    taken: list[int] = []
    used = 0
    for i in index.newest_first:
        cost = count_tokens(index.lines[i])
        if used + cost > budget:
            break
        taken.append(i)
        used += cost
    text, _ = pack(index.lines, taken, budget)
    return text


def build_contexts(
    mem: ConvMemory,
    index: ConversationIndex,
    question: str,
    budgets: tuple[int, ...],
    methods: tuple[str, ...] = METHODS,
    *,
    timer: Callable[[], float] = time.perf_counter,
    hybrid: ConvMemory | None = None,
) -> Iterator[Context]:
    """Yield each method's context for ``question`` (budgeted methods once per budget).

    ``hybrid``: the same database opened with an embeddings model; method ``hybrid`` is its
    payload (lexical and dense candidates fused), ``convmem`` stays lexical only.
    """
    mid = memory_id(index.conv)
    for method in methods:
        if method == "full":
            started = timer()
            text = index.full
            yield Context("full", None, text, index.full_tokens, (timer() - started) * 1000)
            continue
        for budget in budgets:
            started = timer()
            if method in ("convmem", "hybrid"):
                source = hybrid if method == "hybrid" and hybrid is not None else mem
                if method == "hybrid" and hybrid is None:
                    raise ValueError("method 'hybrid' needs --embeddings")
                messages = source.payload(mid, "openai", query=question, budget_tokens=budget, recent_turns=0)
                text = messages[0]["content"] if messages and messages[0]["role"] == "system" else ""
            elif method == "recent":
                text = _recent(index, budget)
            elif method == "bm25":
                text, _ = pack(index.lines, index.bm25.top(en_words(question)), budget)
            elif method == "bm25-lines":
                text, _ = pack(index.lines, index.bm25_lines.top(en_words(question)), budget)
            else:
                raise ValueError(f"unknown method {method!r}; expected one of {', '.join(METHODS)}")
            ms = (timer() - started) * 1000
            yield Context(method, budget, text, count_tokens(text), ms)


def normalized(context: Context, cache: dict[str, str]) -> str:
    """The normalized context text (cached by text: the recent window and full text repeat)."""
    found = cache.get(context.text)
    if found is None:
        found = cache[context.text] = normalize(context.text)
    return found
