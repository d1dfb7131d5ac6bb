"""Issue 20, item 4: an Agora call's turns through the memory proxy and the call's own transcript.

Agora's request to a custom LLM names no agent, channel or call (``../shared/specs/vendor-formats.md``
1.10: ``messages``, top-level ``turn_id``/``timestamp``/``interruptable`` and the ``llm.params`` keys,
where call registration puts only the memory id). So the proxy's copy of an Agora turn carries no
call identity, and it meets the call's voice copy (``GET history``, the 103) through the text
window: a whole turn said the same within ``dedupe_window_ms`` is one message, in any order and
run, and the voice copy's row is the one kept (a proxy copy stored first is deleted). An answer
cut short is not linked (the proxy's streamed text is not the spoken one): documented in the
README's identity table.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from convmem_graph.memory import ConvMemory
from convmem_graph.models import Message, ReadResult
from convmem_graph.state import RawInput

_FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
HISTORY = json.loads((_FIXTURES / "agora_history_response.json").read_text(encoding="utf-8"))
USER_TEXT = "还行吧，就是今天又加班到九点，有点累。"
ANSWER = "辛苦啦！加班到这么晚，晚饭吃了吗？"


def _proxy_turn(voice: list[Message]) -> ReadResult:
    """The proxy's copy of one whole exchange of the call, a few hundred ms from the voice copy."""
    at = {m.content: m.timestamp_ms for m in voice}
    meta = {"proxy_request_id": "req-agora-1"}
    return ReadResult(
        source="openai",
        messages=[
            Message(
                id="proxy-agora-1-user",
                role="user",
                content=USER_TEXT,
                channel="api",
                source="message",
                timestamp_ms=at[USER_TEXT] + 300,
                metadata=dict(meta),
            ),
            Message(
                id="proxy-agora-1-assistant",
                role="assistant",
                content=ANSWER,
                channel="api",
                source="llm",
                timestamp_ms=at[ANSWER] + 250,
                metadata=dict(meta),
            ),
        ],
    )


def _rows(mem: ConvMemory, memory_id: str) -> list[tuple[Any, ...]]:
    return [(m.role, m.content, m.channel) for m in mem.store.recent_messages(memory_id, 100)]


@pytest.mark.parametrize("arrangement", ["voice first", "proxy first", "together"])
def test_a_whole_agora_turn_through_the_proxy_is_one_message(arrangement: str) -> None:
    with ConvMemory.open(":memory:") as mem:
        mem.ingest("ref", HISTORY, source="agora")
        voice = mem.store.recent_messages("ref", 100)
        reference = _rows(mem, "ref")
        proxy = RawInput(_proxy_turn(voice), "openai")
        history = RawInput(HISTORY, "agora")
        runs = {
            "voice first": [[history], [proxy]],
            "proxy first": [[proxy], [history]],
            "together": [[history, proxy]],
        }[arrangement]
        for run in runs:
            mem.ingest("u", run)
        rows = _rows(mem, "u")
    assert rows == reference  # one message per turn, the voice copy kept whatever came first
