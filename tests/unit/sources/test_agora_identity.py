"""Issue 20, items 1-2 for Agora: ``GET history`` and the 103 of one call are one timeline.

Every copy of an agent's utterance carries the id its transcript gives it (agent, role, words,
occurrence), so copies merge whatever their order and whichever runs they arrive in, with one
field precedence (``convmem_graph._copies``); a real repeat stays two messages. A few run orders
also run on a database of each backend, PostgreSQL included (``backend_url``).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from convmem_graph._copies import merge_copies
from convmem_graph.memory import ConvMemory
from convmem_graph.models import Message
from convmem_graph.sources import read_payload
from convmem_graph.state import RawInput

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
HISTORY = json.loads((FIXTURES / "agora_history_response.json").read_text(encoding="utf-8"))
HOOK_103 = json.loads((FIXTURES / "agora_webhook_103_agent_history.json").read_text(encoding="utf-8"))

Row = tuple[str, str, str, int | None, int, str, bool]


def _timeline(mem: ConvMemory, memory_id: str) -> list[Row]:
    return [
        (m.id, m.role, m.content, m.turn_id, m.timestamp_ms, m.source, m.interrupted)
        for m in mem.store.recent_messages(memory_id, 1_000)
    ]


def _ingest_runs(runs: list[list[dict[str, Any]]]) -> list[Row]:
    mem = ConvMemory.open(":memory:")
    try:
        for run in runs:
            mem.ingest("u_agora", [RawInput(p, "agora") for p in run])
        return _timeline(mem, "u_agora")
    finally:
        mem.close()


REFERENCE = _ingest_runs([[HISTORY, HOOK_103]])


def test_history_and_103_make_the_history_s_eleven_messages() -> None:
    assert len(REFERENCE) == 11
    by_text = {row[2]: row for row in REFERENCE}
    user = by_text["还行吧，就是今天又加班到九点，有点累。"]
    # The history's turn id, the 103's earlier start of speech.
    assert user[3] == 1 and user[4] == 1767268806400
    assert by_text["晚上好呀林晓，我是小雨。今天过得怎么样？"][5] == "greeting"


def one_timeline_in_any_order(data: st.DataObject) -> None:
    """The property of ``test_any_order_any_runs_gives_one_timeline`` (also run at full size)."""
    # Each copy may be delivered again (a vendor retry); then copies are shuffled and cut into runs.
    copies = [HISTORY, HOOK_103, *data.draw(st.lists(st.sampled_from([HISTORY, HOOK_103]), max_size=2))]
    order = data.draw(st.permutations(copies))
    cuts = sorted(data.draw(st.sets(st.integers(1, len(order) - 1), max_size=len(order) - 1)))
    runs = [list(order[a:b]) for a, b in zip([0, *cuts], [*cuts, len(order)], strict=True)]
    assert _ingest_runs(runs) == REFERENCE


# 30 examples here; tests/integration/test_agora_identity_any_order_full.py runs 150.
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_any_order_any_runs_gives_one_timeline(data: st.DataObject) -> None:
    one_timeline_in_any_order(data)


@pytest.mark.parametrize(
    "runs", [[[HOOK_103], [HISTORY]], [[HISTORY], [HOOK_103, HISTORY]], [[HISTORY, HOOK_103]]]
)
def test_copies_merge_in_any_run_order_on_each_backend(
    backend_url: str, runs: list[list[dict[str, object]]]
) -> None:
    """A few run orders on a database of each backend (``backend_url``) give the in-memory reference."""
    memory_id = "u_agora"
    mem = ConvMemory.open(backend_url)
    try:
        for run in runs:
            mem.ingest(memory_id, [RawInput(p, "agora") for p in run])
        assert _timeline(mem, memory_id) == REFERENCE
    finally:
        mem.delete(memory_id)
        mem.close()


def _with_repeat(doc: dict[str, Any], items_key: str) -> dict[str, Any]:
    """The document with the user saying "好的" twice, ten seconds apart, at its end."""
    doc = copy.deepcopy(doc)
    holder = doc
    for part in items_key.split("."):
        holder = holder[part]
    assert isinstance(holder, list)
    last = max(int(i.get("timestamp") or 0) for i in holder if isinstance(i, dict))
    for k in range(2):
        holder.append({"role": "user", "content": "好的", "timestamp": last + 10_000 * (k + 1)})
    return doc


def _items_key(doc: dict[str, Any]) -> str:
    for key in ("contents", "payload.contents"):
        node: Any = doc
        for part in key.split("."):
            node = node.get(part) if isinstance(node, dict) else None
        if isinstance(node, list):
            return key
    raise AssertionError(f"no item list in {sorted(doc)}")


def test_a_real_repeat_stays_two_messages_in_every_copy() -> None:
    history = _with_repeat(HISTORY, _items_key(HISTORY))
    hook = _with_repeat(HOOK_103, _items_key(HOOK_103))
    for runs in ([[history, hook]], [[hook], [history]], [[history], [history]]):
        rows = _ingest_runs(runs)
        assert [r[2] for r in rows].count("好的") == 2, runs


def test_merge_copies_is_symmetric() -> None:
    base = {"id": "x", "role": "assistant", "channel": "voice"}
    variants = [
        Message(**base, content="好", source="llm", timestamp_ms=5, turn_id=2),
        Message(**base, content="好", source="greeting", timestamp_ms=3),
        Message(**base, content="好", source="llm", timestamp_ms=9, interrupted=True, original="好呀"),
    ]
    for a in variants:
        for b in variants:
            assert merge_copies(a, b) == merge_copies(b, a)
    both = merge_copies(variants[0], variants[2])
    assert (both.turn_id, both.timestamp_ms, both.interrupted, both.original) == (2, 5, True, "好呀")


def test_reader_ids_do_not_depend_on_times() -> None:
    moved = copy.deepcopy(HOOK_103)
    key = _items_key(moved)
    holder: Any = moved
    for part in key.split("."):
        holder = holder[part]
    for item in holder:
        if isinstance(item, dict) and isinstance(item.get("timestamp"), int):
            item["timestamp"] += 777
    assert [m.id for m in read_payload(moved).messages] == [m.id for m in read_payload(HOOK_103).messages]
