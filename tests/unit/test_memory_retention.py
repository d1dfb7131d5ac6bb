"""Retention (issue 20, item 5): ``purge_summarized_messages`` deletes what the summary covers.

A facts-only deployment (``episodic=False`` + purge) keeps facts, variables and the summary, and no
transcript past the session's summary: an ID-card number said in a call is gone from every table
once the session ended. A vendor's late copy of a purged turn is not stored again; a new turn is.
:class:`TestRetention` runs on SQLite and on PostgreSQL (``backend_url``).
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest

from convmem_graph.config import MemoryConfig
from convmem_graph.memory import ConvMemory
from tests.unit.test_memory_delete import scan

T0 = 1_767_268_800_000
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def _turns(planted: str, start_ms: int, n_pairs: int = 3) -> list[dict[str, Any]]:
    turns: list[dict[str, Any]] = [
        {"role": "user", "content": "I'm a vegetarian and I live in Lisbon.", "timestamp": start_ms},
        {"role": "assistant", "content": "Noted, Lisbon it is.", "timestamp": start_ms + 1_000},
        {"role": "user", "content": f"My ID card number is {planted}.", "timestamp": start_ms + 2_000},
    ]
    for i in range(n_pairs):
        at = start_ms + 3_000 + i * 2_000
        turns.append({"role": "user", "content": f"Small talk number {i}, nothing much.", "timestamp": at})
        turns.append({"role": "assistant", "content": f"Sure thing {i}.", "timestamp": at + 1_000})
    return turns


def _open(url: str, **config: Any) -> ConvMemory:
    return ConvMemory.open(url, config=MemoryConfig(**config), clock=lambda: T0 + 3_600_000)


class TestRetention:
    """On each backend (``backend_url``: the database of the store and checkpoints)."""

    @pytest.fixture
    def url(self, backend_url: str) -> str:
        return backend_url

    def test_facts_only_keeps_no_transcript_past_the_session(self, url: str) -> None:
        run = uuid.uuid4().hex[:8]
        user, planted = f"u_ret_{run}", f"1101011990{run[:6]}45"
        mem = _open(url, episodic=False, purge_summarized_messages=True)
        try:
            mem.ingest(user, _turns(planted, T0), source="openai")
            # The session is open: the short-term window (recent_turns = 10) still holds the turns.
            assert mem.store.count_messages(user) == 9
            mem.ingest(user, [], source="openai", session_ended=True)
            assert mem.store.count_messages(user) == 0
            assert scan(mem.store.engine, [planted])[planted] == []
            # What long-term memory is made of stays.
            assert mem.store.get_summary(user) is not None
            facts = " ".join(f.content for f in mem.store.list_fragments(user))
            assert "Lisbon" in facts
            purge = [e for e in mem.store.list_audit(user) if e.action == "purge"]
            assert len(purge) == 1 and purge[0].after is not None and purge[0].after["messages"] == 9
            # A vendor's retry of the whole history after the purge brings nothing back ...
            again = mem.ingest(user, _turns(planted, T0), source="openai")
            assert mem.store.count_messages(user) == 0
            assert again.skipped.get("purged") == 9
            assert scan(mem.store.engine, [planted])[planted] == []
            # ... while a turn of the next session is stored as usual.
            mem.ingest(user, [{"role": "user", "content": "Back again!", "timestamp": T0 + 86_400_000}])
            assert [m.content for m in mem.store.recent_messages(user, 5)] == ["Back again!"]
        finally:
            mem.close()

    def test_open_session_keeps_the_short_term_window(self, url: str) -> None:
        user = f"u_win_{uuid.uuid4().hex[:8]}"
        mem = _open(url, purge_summarized_messages=True, recent_turns=4, summary_threshold_tokens=20)
        try:
            mem.ingest(user, _turns("0", T0, n_pairs=8), source="openai")
            kept = mem.store.recent_messages(user, 50)
            # 19 turns, all summarized and extracted: the newest four stay for the block.
            assert [m.content for m in kept] == [
                "Small talk number 6, nothing much.",
                "Sure thing 6.",
                "Small talk number 7, nothing much.",
                "Sure thing 7.",
            ]
            block = mem.payload(user, "openai")
            assert "Sure thing 7." in json.dumps(block, ensure_ascii=False)
        finally:
            mem.close()

    def test_off_by_default_keeps_every_turn(self, url: str) -> None:
        user = f"u_keep_{uuid.uuid4().hex[:8]}"
        mem = _open(url)
        try:
            mem.ingest(user, _turns("0", T0), source="openai", session_ended=True)
            assert mem.store.count_messages(user) == 9
            assert not [e for e in mem.store.list_audit(user) if e.action == "purge"]
        finally:
            mem.close()

    def test_trtc_retry_after_purge_is_not_stored_again(self, url: str) -> None:
        user = f"u_trtc_{uuid.uuid4().hex[:8]}"
        callbacks = json.loads((FIXTURES / "trtc_callbacks_one_call.json").read_text(encoding="utf-8"))
        mem = _open(url, episodic=False, purge_summarized_messages=True)
        try:
            first = mem.ingest(user, callbacks, session_ended=True)
            assert first.new_messages > 0
            assert mem.store.count_messages(user) == 0
            mem.ingest(user, callbacks)  # TRTC retries a delivery it saw no 2xx for
            assert mem.store.count_messages(user) == 0
        finally:
            mem.close()


def test_deleting_a_facts_only_memory_leaves_the_index_sound(tmp_path: Path) -> None:
    """A contentless FTS5 'delete' of rows never indexed used to corrupt the whole index."""
    mem = _open(str(tmp_path / "sound.db"), episodic=False)
    indexed = _open(str(tmp_path / "sound.db"))
    try:
        indexed.ingest("u_indexed", [{"role": "user", "content": "I play the cello.", "timestamp": T0}])
        mem.ingest("u_facts", _turns("0", T0), source="openai")
        assert mem.delete("u_facts") is True
        with indexed.store.engine.begin() as conn:
            conn.exec_driver_sql("INSERT INTO cm_episodes(cm_episodes) VALUES ('integrity-check')")
        assert "cello" in json.dumps(indexed.payload("u_indexed", "openai", query="cello"))
    finally:
        mem.close()
        indexed.close()
