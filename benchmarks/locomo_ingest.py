"""Ingest LoCoMo as one memory per conversation, twice, and report time and bytes on disk.

The first pass runs the whole lifecycle (heuristic extractor, extractive summary) on the 10
conversations, one lifecycle run per session; the second pass ingests the same payloads again and
must add nothing (no message, fragment, variable change or audit entry).

Usage:
    python benchmarks/locomo_ingest.py ../shared/data/locomo/locomo10.json [--workdir DIR]
"""

from __future__ import annotations

import argparse
import sqlite3
import sys
import tempfile
import time
from pathlib import Path

from replay import load_sessions  # type: ignore[import-not-found]

from convmem_graph.checkpoints import open_checkpointer
from convmem_graph.runner import Lifecycle
from convmem_graph.state import RawInput
from convmem_graph.store import MemoryStore


def _counts(db: Path) -> dict[str, int]:
    with sqlite3.connect(db) as conn:
        return {
            table: conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
            for table in (
                "cm_messages",
                "cm_fragments",
                "cm_variables",
                "cm_audit",
                "cm_summaries",
                "checkpoints",
            )
        }


def _disk(db: Path) -> int:
    with sqlite3.connect(db) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return sum(p.stat().st_size for p in db.parent.glob(db.name + "*") if p.is_file())


def _ingest(lifecycle: Lifecycle, conversations: list[list[list[dict[str, object]]]]) -> tuple[float, int]:
    started = time.perf_counter()
    new = 0
    for k, sessions in enumerate(conversations):
        for session in sessions:
            new += lifecycle.run(f"locomo_conv_{k:02d}", [RawInput(session, source="openai")]).new_messages
    return time.perf_counter() - started, new


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("locomo", type=Path)
    parser.add_argument("--workdir", type=Path, default=None)
    args = parser.parse_args()
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="convmem-locomo-"))
    workdir.mkdir(parents=True, exist_ok=True)
    db = workdir / "locomo.db"
    conversations = load_sessions(args.locomo)
    total = sum(len(s) for c in conversations for s in c)
    store = MemoryStore.from_url(str(db))
    saver, close = open_checkpointer(store.url)
    lifecycle = Lifecycle(store, saver)  # default durability "sync": every step checkpointed

    seconds, new = _ingest(lifecycle, conversations)
    first = _counts(db)
    size = _disk(db)
    print(
        f"LoCoMo: {len(conversations)} conversations, "
        f"{sum(len(c) for c in conversations)} sessions, {total:,} messages"
    )
    print(f"first ingest: {seconds:.1f} s ({total / seconds:,.0f} messages/s), {new:,} new messages")
    print(f"  rows: {first}")
    print(
        f"  disk (store + checkpoints): {size / 1e6:.2f} MB = "
        f"{size / max(1, first['cm_messages']):,.0f} bytes/message"
    )

    seconds2, new2 = _ingest(lifecycle, conversations)
    second = _counts(db)
    size2 = _disk(db)
    print(f"second ingest of the same data: {seconds2:.1f} s, {new2} new messages")
    changed = {k: (first[k], second[k]) for k in first if first[k] != second[k] and k != "checkpoints"}
    print(
        f"  rows changed: {changed or 'none'}; checkpoints {first['checkpoints']} -> {second['checkpoints']}"
    )
    print(f"  disk: {size2 / 1e6:.2f} MB")
    close()
    store.close()
    return 0 if new2 == 0 and not changed else 1


if __name__ == "__main__":
    sys.exit(main())
