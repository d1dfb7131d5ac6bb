"""What a replay records as it goes: per-file progress rows, dead letters, the report.

Progress rows make a rerun skip finished files. ``ConvMemory.delete`` removes a memory's rows (the
table is registered in ``store/registry.py``); ``forget_replay_file`` removes a file's rows that
no single memory owns.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import or_

from convmem_graph.state import MAX_DEAD_LETTERS_PER_RUN
from convmem_graph.store import MemoryStore
from convmem_graph.store._optional import present
from convmem_graph.store.registry import replay_progress
from convmem_graph.store.schema import dead_letters

__all__ = ["ReplayReport", "forget_replay_file"]


def _storable(text: str) -> str:
    return text if text.isascii() else text.encode("utf-8", "backslashreplace").decode("utf-8")


class _FileLetters:
    """The dead letters of one file, held until the file is read (at most ``MAX_DEAD_LETTERS_PER_RUN``).

    With several shards (worker processes, ``--shard``), every shard reads a file: a bad item that
    belongs to no memory (an unreadable line, a document without a user id) is seen by all of them
    and is *shared*; it is written and counted by one shard only (see ``Replayer._replay_file``).
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self.items: list[dict[str, str]] = []
        self.shared: list[bool] = []
        #: The memory a letter names itself (an unreadable IM page's request account), else None.
        self.owners: list[str | None] = []
        self.dropped = 0
        #: Quarantine counts of the shared items, by reason.
        self.shared_counts: Counter[str] = Counter()

    @property
    def count(self) -> int:
        """Bad documents and items seen in the file so far."""
        return len(self.items) + self.dropped

    def add(
        self, *, source: str, raw: str, error: str, path: str, shared: bool = False, owner: str | None = None
    ) -> None:
        if len(self.items) >= MAX_DEAD_LETTERS_PER_RUN:
            self.dropped += 1
            return
        # Lone surrogates (ids like "mem_\udc00") cannot be stored; kept visible as escapes.
        self.items.append(
            {k: _storable(v) for k, v in (("source", source), ("raw", raw), ("error", error), ("path", path))}
        )
        self.shared.append(shared)
        self.owners.append(owner)

    def write(self, store: MemoryStore, owner: str | None, *, shared: bool = True) -> None:
        """Store the letters attributed to ``owner``; the shared ones only when ``shared``."""
        for item, is_shared, named in zip(self.items, self.shared, self.owners, strict=True):
            if shared or not is_shared:
                store.add_dead_letter(named if named is not None else owner, **item)
        if self.dropped and shared:
            store.add_dead_letter(
                owner,
                source="file",
                raw=f"{self.path}: {self.dropped} more bad documents",
                error=f"dead-letter limit of {MAX_DEAD_LETTERS_PER_RUN} per file reached",
                path=str(self.path),
            )


def forget_replay_file(store: MemoryStore, path: str | Path) -> int:
    """Delete what a replay kept about one file that cannot be attributed to a single memory.

    Removes the file's progress rows and the dead letters without a memory that name it (a file
    feeding several memories, or none). Returns the number of rows deleted.
    """
    name = str(path)
    like = name.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    with store.transaction() as conn:
        deleted = int(conn.execute(replay_progress.delete().where(replay_progress.c.path == name)).rowcount)
        if not present(conn, dead_letters):
            return deleted  # a SQLite file that never kept a dead letter (store._optional)
        stmt = dead_letters.delete().where(
            dead_letters.c.memory_id.is_(None),
            or_(
                dead_letters.c.raw == name,
                dead_letters.c.raw.startswith(name + ": "),
                dead_letters.c.path == name,
                dead_letters.c.path.like(like + ":%", escape="\\"),
                dead_letters.c.error.like(like + ":%", escape="\\"),
            ),
        )
        return deleted + int(conn.execute(stmt).rowcount)


@dataclass
class ReplayReport:
    """What a replay did; ``quarantined`` counts bad items by reason."""

    files: int = 0
    files_skipped_done: int = 0
    documents: int = 0
    messages_read: int = 0
    new_messages: int = 0
    memories: set[str] = field(default_factory=set)
    quarantined: Counter[str] = field(default_factory=Counter)
    skipped: Counter[str] = field(default_factory=Counter)
    #: Model calls and prompt/completion tokens per stage (see :mod:`convmem_graph.accounting`).
    model_usage: dict[str, dict[str, int]] = field(default_factory=dict)
    #: Milliseconds spent inside each lifecycle node, summed over every run (batch) of the replay.
    node_ms: dict[str, float] = field(default_factory=dict)
    #: Lifecycle runs (batches) that completed.
    runs: int = 0
    seconds: float = 0.0
    #: Turns and facts that got a vector, and the seconds that took (a replay with ``embeddings`` only).
    embedded_turns: int = 0
    embedded_facts: int = 0
    embed_seconds: float = 0.0
    #: Seconds the end's fold of the episodic index took (part of ``seconds``).
    compact_seconds: float = 0.0

    @property
    def messages_per_second(self) -> float:
        """Messages read per wall-clock second."""
        return self.messages_read / self.seconds if self.seconds > 0 else 0.0

    def as_dict(self) -> dict[str, object]:
        """A JSON-friendly view."""
        return {
            "files": self.files,
            "files_skipped_done": self.files_skipped_done,
            "documents": self.documents,
            "messages_read": self.messages_read,
            "new_messages": self.new_messages,
            "memories": len(self.memories),
            "quarantined": dict(self.quarantined),
            "skipped": dict(self.skipped),
            "model_usage": self.model_usage,
            "runs": self.runs,
            "node_ms": self.node_ms,
            "seconds": round(self.seconds, 3),
            "messages_per_second": round(self.messages_per_second, 1),
            # Only when the replay embedded: reports of a replay without a model stay as they were.
            **(
                {
                    "embedded_turns": self.embedded_turns,
                    "embedded_facts": self.embedded_facts,
                    "embed_seconds": round(self.embed_seconds, 3),
                }
                if self.embedded_turns or self.embed_seconds
                else {}
            ),
        }


class _ProgressSender:
    """Sends a worker's progress to the parent at most ten times a second.

    A queue put per document kept the queue's feeder thread busy, and every wake-up of it took the
    GIL from the replay.
    """

    def __init__(self, queue: Any, interval_s: float = 0.1, worker: int = 0) -> None:
        self.queue = queue
        self.interval_s = interval_s
        self.worker = worker
        self.pending = 0
        self.files_done = self.files_sent = 0
        self.sent_at = time.monotonic()

    def __call__(self, delta: int, report: ReplayReport) -> None:
        self.pending += delta
        # ``report.files`` counts files started: the one being read is not done yet.
        self.files_done = max(report.files - 1, self.files_done)
        if time.monotonic() - self.sent_at >= self.interval_s:
            self.flush()

    def flush(self) -> None:
        """Send what is pending (messages read, and files done when that changed)."""
        if self.pending:
            self.queue.put(("progress", self.pending))
            self.pending = 0
        if self.files_done != self.files_sent:
            self.queue.put(("files", (self.worker, self.files_done)))
            self.files_sent = self.files_done
        self.sent_at = time.monotonic()
