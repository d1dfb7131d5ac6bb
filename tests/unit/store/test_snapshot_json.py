"""The saved snapshot's text is ``model_dump_json()``'s, byte for byte, whatever was kept from the last save.

``SnapshotJson`` reuses each fact's JSON while the fact is the same model object with the same
values; a changed value (assigned, or a list changed in place), a new object, or another memory
serializes again. Also the snapshot's private cache (``derived()``): one new empty one per
snapshot, shared by shallow copies.
"""

from __future__ import annotations

import copy
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from convmem_graph.memory import ConvMemory
from convmem_graph.models import Fragment, MemorySnapshot, Message, Summary, VariableSpec, VariableValue
from convmem_graph.store._snapshot_json import SnapshotJson

T0 = 1_767_268_800_000


def _fact(i: int, content: str = "用户喜欢围棋。") -> Fragment:
    return Fragment(
        id=f"f{i}",
        memory_id="m",
        content=f"{content}{i}",
        key=f"hobby:x{i}",
        transient=i % 3 == 0,
        expires_at=T0 + i if i % 3 == 0 else None,
        source_message_ids=[f"u{i}"] if i % 2 else [],
        confidence=0.5 + i / 100,
        created_at=T0,
        updated_at=T0 + i,
        observed_at=T0 + i,
    )


def _snapshot(facts: list[Fragment], *, summary: bool = True, recent: int = 2) -> MemorySnapshot:
    return MemorySnapshot(
        memory_id="m",
        variables={"city": VariableValue(name="city", value="北京", origin="manual", updated_at=T0)},
        specs={"city": VariableSpec(name="city", description='where "quoted"\n')},
        fragments=facts,
        summary=Summary(text="已知：\u2028x", tokens=3, covers_until_ms=T0, version=2, updated_at=T0)
        if summary
        else None,
        recent=[
            Message(
                id=f"u{i}",
                role="user",
                content=f"我住在北京{i}。",
                channel="api",
                source="message",
                timestamp_ms=T0 + i,
                metadata={"k": [i]},
            )
            for i in range(recent)
        ],
    )


def test_the_text_is_model_dump_json_and_kept_facts_are_reused() -> None:
    kept = SnapshotJson()
    facts = [_fact(i) for i in range(6)]
    first = _snapshot(facts)
    assert kept.dumps(first) == first.model_dump_json()
    assert (kept.reused, kept.serialized) == (0, 6)
    # The same models in another order, one new fact and one dropped: only the new one is serialized.
    second = _snapshot([facts[3], _fact(9), *facts[:3], facts[5]], summary=False, recent=0)
    assert kept.dumps(second) == second.model_dump_json()
    assert (kept.reused, kept.serialized) == (5, 7)


def test_a_changed_fact_is_serialized_again() -> None:
    kept = SnapshotJson()
    facts = [_fact(i) for i in range(4)]
    kept.dumps(_snapshot(facts))
    facts[0].content = "用户不再喜欢围棋。"  # assigned (validated)
    facts[1].source_message_ids.append("u9")  # a list changed in place
    facts[2].confidence = 1  # validated to 1.0: equal and of the kept type
    snap = _snapshot(facts)
    assert kept.dumps(snap) == snap.model_dump_json()
    assert '"content":"用户不再喜欢围棋。"' in kept.dumps(snap) and '"u9"' in kept.dumps(snap)


def test_equal_facts_of_another_object_or_memory_are_serialized_again() -> None:
    kept = SnapshotJson(memories=1)
    facts = [_fact(i) for i in range(3)]
    kept.dumps(_snapshot(facts))
    again = [f.model_copy() for f in facts]
    assert kept.dumps(_snapshot(again)) == _snapshot(again).model_dump_json()
    assert kept.reused == 0
    other = _snapshot(facts).model_copy(update={"memory_id": "n"})
    assert kept.dumps(other) == other.model_dump_json()
    assert kept.reused == 0  # "m"'s entries hold the copies now; "n" had none
    kept.dumps(_snapshot(again))
    assert kept.reused == 0  # one memory kept: "n" pushed "m" out


def test_an_empty_snapshot() -> None:
    snap = MemorySnapshot(memory_id="m")
    assert SnapshotJson().dumps(snap) == snap.model_dump_json()


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.integers(min_value=0, max_value=30), max_size=12),
    st.lists(st.integers(min_value=0, max_value=30), max_size=12),
    st.text(max_size=8),
    st.booleans(),
)
def test_any_two_saves_give_model_dump_json(a: list[int], b: list[int], text: str, summary: bool) -> None:
    pool = {i: _fact(i, text) for i in set(a) | set(b)}
    kept = SnapshotJson()
    for ids in (a, b):
        snap = _snapshot([pool[i] for i in dict.fromkeys(ids)], summary=summary)
        assert kept.dumps(snap) == snap.model_dump_json()


def test_live_turns_save_the_text_the_snapshot_dumps(tmp_path: Path) -> None:
    mem = ConvMemory.open(str(tmp_path / "m.db"))
    try:
        for i in range(12):
            mem.ingest(
                "u1",
                [
                    {"role": "user", "content": f"我最近特别喜欢围棋{i}号。"},
                    {"role": "assistant", "content": "好的。"},
                ],
                source="openai",
            )
        kept = mem.store._snapshot_json
        assert kept.reused > kept.serialized  # the facts of the previous turn's snapshot
        with mem.store.engine.connect() as conn:
            driver = conn.connection.driver_connection
            assert driver is not None
            data = driver.execute("SELECT data FROM cm_snapshots WHERE memory_id = 'u1'").fetchone()[0]
        assert data == MemorySnapshot.model_validate_json(data).model_dump_json()
    finally:
        mem.close()


def test_each_snapshot_has_its_own_cache_and_shallow_copies_share_it() -> None:
    a, b = MemorySnapshot(memory_id="a"), MemorySnapshot.model_validate_json('{"memory_id":"b"}')
    assert a.derived() == {} and b.derived() == {} and a.derived() is not b.derived()
    a.derived()["k"] = 1
    assert MemorySnapshot(memory_id="c").derived() == {}  # no default shared between snapshots
    assert a.model_copy().derived() is a.derived()
    assert a.model_copy(deep=True).derived() == {} and copy.deepcopy(a).derived() == {}
    assert a == a.model_copy(deep=True)  # a cache never makes two snapshots unequal
