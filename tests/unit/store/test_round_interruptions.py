"""Issue 20, item 2 on the library path: a TRTC round comes out whole whatever run each delivery is in.

No server: each run is ``ConvMemory.ingest`` over a few callbacks, as a team feeding webhooks (or
files of them) to the library does. An interruption metric (906/908) delivered alone, before or
after its round was stored, and a 905 delivered before the round's last 903 give the timeline one
run over everything gives: the one the script says (the same comparison as the server's property
test, ``tests/unit/server/test_trtc_live_any_order.py``).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from convmem_graph.config import MemoryConfig
from convmem_graph.memory import ConvMemory
from convmem_graph.store.schema import round_interruptions
from tests.unit.server import test_trtc_live_any_order as live

_MEM: list[ConvMemory] = []


@pytest.fixture(scope="module", autouse=True)
def _memory() -> Iterator[None]:
    """One in-memory store for every example (each scripted call has new ids)."""
    mem = ConvMemory.open(":memory:", config=MemoryConfig(bot_ids=[live.BOT]))
    _MEM.append(mem)
    try:
        yield
    finally:
        _MEM.clear()
        mem.close()


def _stored(mem: ConvMemory, memory_id: str) -> list[tuple[Any, ...]]:
    return sorted(
        (
            (m.role, m.content, m.original, m.interrupted, m.round_id, m.timestamp_ms, m.source)
            for m in mem.store.recent_messages(memory_id, 1000)
        ),
        key=lambda r: (r[5], r[0], r[1], r[4] or ""),
    )


def _ingest_in_runs(mem: ConvMemory, memory_id: str, bodies: list[dict[str, Any]], sizes: list[int]) -> None:
    pos, k = 0, 0
    while pos < len(bodies):
        size = sizes[k % len(sizes)]
        mem.ingest(memory_id, bodies[pos : pos + size], source="trtc")
        pos, k = pos + size, k + 1


def separate_runs_store_one_timeline(rounds: list[live.Round], data: st.DataObject) -> None:
    """The property: one drawn call, fed in drawn orders and run sizes, is stored as one run stores it."""
    ids = live.CallIds()
    script = live.deliveries(rounds, ids)
    bodies = live._retried(script, data.draw(st.lists(st.integers(0, 1000), max_size=3)))
    order = data.draw(st.permutations(range(len(bodies))))
    sizes = data.draw(st.lists(st.integers(1, 6), min_size=1, max_size=4))
    mem = _MEM[0]
    _ingest_in_runs(mem, ids.human, [bodies[i] for i in order], sizes)
    assert _stored(mem, ids.human) == live.expected(rounds, script, ids)


# 30 drawn calls here; the integration tier draws 150 (tests/integration/test_round_interruptions_full.py).
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rounds=live.calls(), data=st.data())
def test_separate_library_runs_store_each_round_as_one_run_does(
    rounds: list[live.Round], data: st.DataObject
) -> None:
    separate_runs_store_one_timeline(rounds, data)


def _cut_round() -> tuple[live.CallIds, list[dict[str, Any]], list[live.Round]]:
    rounds = [live.Round("r-000", ["讲个故事吧。"], ["从前有座山，", "山里有座庙。"], 1, True, 906)]
    ids = live.CallIds()
    return ids, live.deliveries(rounds, ids), rounds


class TestRoundInterruptions:
    """A lone 906/908 and its round in separate library runs, on each backend (``backend_url``)."""

    @pytest.fixture
    def url(self, backend_url: str) -> str:
        return backend_url

    def test_a_lone_interruption_metric_marks_the_round_stored_in_an_earlier_run(self, url: str) -> None:
        ids, bodies, rounds = _cut_round()
        metric = next(b for b in bodies if b["EventInfo"]["Payload"].get("Metric") == "interruption")
        rest = [b for b in bodies if b is not metric]
        with ConvMemory.open(url, config=MemoryConfig(bot_ids=[live.BOT])) as mem:
            mem.ingest(ids.human, rest, source="trtc")
            before = _stored(mem, ids.human)
            assert before[-1][2:4] == (None, False)  # not known yet: stored as spoken, whole
            result = mem.ingest(ids.human, [metric], source="trtc")
            assert result.new_messages == 1  # the marked turn is stored again (a new seq: processed again)
            assert _stored(mem, ids.human) == live.expected(rounds, bodies, ids)
            assert _stored(mem, ids.human)[-1][1:4] == ("从前有座山，", "从前有座山，山里有座庙。", True)
            # Retried, the metric changes nothing.
            assert mem.ingest(ids.human, [metric], source="trtc").new_messages == 0

    def test_a_lone_interruption_metric_marks_the_round_stored_in_a_later_run(self, url: str) -> None:
        ids, bodies, rounds = _cut_round()
        metric = next(b for b in bodies if b["EventInfo"]["Payload"].get("Metric") == "interruption")
        with ConvMemory.open(url, config=MemoryConfig(bot_ids=[live.BOT])) as mem:
            mem.ingest(ids.human, [metric], source="trtc")
            with mem.store.read() as conn:
                mine = round_interruptions.select().where(round_interruptions.c.memory_id == ids.human)
                kept = conn.execute(mine).all()
            assert [(r.task_id, r.round_id) for r in kept] == [(ids.task, "r-000")]
            mem.ingest(ids.human, [b for b in bodies if b is not metric], source="trtc")
            assert _stored(mem, ids.human) == live.expected(rounds, bodies, ids)
            mem.delete(ids.human)
            with mem.store.read() as conn:
                gone = round_interruptions.select().where(round_interruptions.c.memory_id == ids.human)
                assert conn.execute(gone).all() == []
