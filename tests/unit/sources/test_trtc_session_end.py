"""A TRTC 902 (task ended) read from a file or replayed ends the session, as ``--session-ended`` does."""

from __future__ import annotations

import json
from typing import Any

from convmem_graph import ConvMemory, MemoryConfig
from convmem_graph.sources import read_payload
from tests.conftest import load_fixture

BOT = "ai_xiaoyu_bot"


def _deliveries(with_902: bool) -> dict[str, Any]:
    call = load_fixture("trtc_callbacks_one_call.json")
    kept = [d for d in call["deliveries"] if with_902 or json.loads(d["raw_body"])["EventType"] != 902]
    return {"deliveries": kept, "bot_user_id": BOT}


def test_reading_a_902_marks_the_session_ended() -> None:
    assert read_payload(_deliveries(True), "trtc").session_ended
    assert not read_payload(_deliveries(False), "trtc").session_ended
    # The 902 is still reported as an event the reader does not turn into a message.
    assert any("902" in s.detail for s in read_payload(_deliveries(True), "trtc").skipped)


def test_a_902_in_the_payload_refreshes_the_summary_like_session_ended() -> None:
    # A threshold no call reaches: only the end of a session can make a summary.
    config = MemoryConfig(bot_ids=[BOT], summary_threshold_tokens=1_000_000)
    summaries = {}
    for name, payload, flag in (
        ("flag", _deliveries(False), True),
        ("902", _deliveries(True), False),
        ("neither", _deliveries(False), False),
    ):
        with ConvMemory.open("sqlite://", config=config) as mem:
            mem.ingest("u_10086", payload, source="trtc", session_ended=flag)
            summary = mem.summary("u_10086")
            summaries[name] = None if summary is None else (summary.version, summary.text)
    assert summaries["neither"] is None
    assert summaries["902"] is not None and summaries["902"] == summaries["flag"]
