"""Per-turn work independent of memory size: the index reads give what reading every fact gave.

The generated-fact properties (inference, reconcile, the snapshot's strongest facts) run on SQLite
and on PostgreSQL (``backend_store``).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from unittest.mock import patch

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import insert, update

from convmem_graph.extractors.reconcile import reconcile
from convmem_graph.extractors.variables import DEFAULT_VARIABLE_SPECS, infer_variables
from convmem_graph.memory import ConvMemory
from convmem_graph.models import FragmentCandidate, FragmentOp, VariableSpec
from convmem_graph.nodes import _inference
from convmem_graph.nodes._extract_reads import related_facts
from convmem_graph.nodes._inference import affected_specs, infer_from_store
from convmem_graph.nodes.inject import select_fragments
from convmem_graph.store import MemoryStore
from convmem_graph.store import _fragments as fragments_module
from convmem_graph.store.schema import fragments

NOW = 1_767_000_000_000
DAY = 86_400_000

SUBJECTS = ["芒果", "跑步", "coffee", "hiking", "香菜", "guitar", "杭州", "上海", "nurse", "猫"]
KEYS = [
    "profile:city",
    "profile:name",
    "profile:occupation",
    "profile:birth_year",
    "profile:language",
    "pref:{s}",
    "habit:{s}",
    "hobby:{s}",
    "food:{s}",
    "diet:{s}",
    "allergy:{s}",
    "pref:favorite_{s}",
    "pet:{s}",
    "plan:{s}",
    "tag:{s}",
]
CONTENTS = [
    "用户住在{s}。",
    "用户喜欢{s}。",
    "用户不吃{s}。",
    "用户对{s}过敏。",
    "User likes {s}.",
    "User doesn't like {s}.",
    "User lives in {s}.",
    "User works as a {s}.",
    "用户出生于1990年。",
    "User speaks English.",
    "用户说中文。",
    "用户叫{s}。",
]

#: key template, content template, subject, transient, observed (days ago), confidence, expiry (days).
Fact = tuple[str, str, str, bool, int, float, "int | None"]
fact = st.tuples(
    st.sampled_from(KEYS),
    st.sampled_from(CONTENTS),
    st.sampled_from(SUBJECTS),
    st.booleans(),  # transient
    st.integers(min_value=0, max_value=40),  # observed (days)
    st.sampled_from([0.5, 0.8, 1.0]),
    st.sampled_from([None, -2, 30]),  # expiry, days from now
)


@pytest.fixture()
def store() -> Iterator[MemoryStore]:
    s = MemoryStore.from_url("sqlite://")
    yield s
    s.close()


def fill(store: MemoryStore, memory_id: str, facts: list[Fact]) -> None:
    ops = []
    for i, (key, content, subject, transient, observed, confidence, expiry) in enumerate(facts):
        ops.append(
            FragmentOp(
                op="add",
                candidate=FragmentCandidate(
                    content=content.format(s=subject) + ("" if i % 3 else f" ({i})"),
                    key=key.format(s=subject),
                    transient=transient,
                    expires_at=None if expiry is None else NOW + expiry * DAY,
                    confidence=confidence,
                    observed_at=NOW - observed * DAY,
                ),
            )
        )
    store.commit_extraction(memory_id, ops, upto_seq=0, now_ms=NOW - 50 * DAY)


CUSTOM = [*DEFAULT_VARIABLE_SPECS, VariableSpec(name="tag", type="list"), VariableSpec(name="diet2")]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(facts=st.lists(fact, max_size=60))
def test_inference_from_index_reads_equals_inference_over_every_fact(
    backend_store: MemoryStore, facts: list[Fact]
) -> None:
    store = backend_store
    memory_id = f"m{abs(hash(tuple(facts)))}"
    fill(store, memory_id, facts)
    every = store.list_fragments(memory_id, status="active")
    # All facts read at once (the usual small memory), every rule asking the database, and both.
    for few in (_inference._FEW, 0, 5):
        with patch.object(_inference, "_FEW", few):
            for specs in (list(DEFAULT_VARIABLE_SPECS), CUSTOM):
                assert infer_from_store(store, memory_id, specs, now_ms=NOW) == infer_variables(
                    specs, every, now_ms=NOW
                ), few


def test_hobbies_walk_stops_early_but_keeps_ids_of_older_facts(store: MemoryStore) -> None:
    # 30 hobbies stated on different days, the oldest one restated long ago under habit:.
    facts = [("pref:{s}", "用户喜欢{s}。", f"爱好{i}", False, i, 1.0, None) for i in range(30)]
    facts.append(("habit:{s}", "用户经常{s}。", "爱好0", False, 39, 1.0, None))
    facts.append(("habit:{s}", "用户经常{s}。", "爱好1", False, 39, 1.0, None))
    fill(store, "m", facts)
    every = store.list_fragments("m", status="active")
    hobbies = [s for s in DEFAULT_VARIABLE_SPECS if s.name == "hobbies"]
    expected = infer_variables(hobbies, every, now_ms=NOW)
    assert infer_from_store(store, "m", hobbies, now_ms=NOW) == expected
    assert len(expected["hobbies"].fragment_ids) == 22  # 20 items, two of them stated twice


def test_only_variables_depending_on_touched_keys_are_reinferred() -> None:
    names = lambda touched: [s.name for s in affected_specs(DEFAULT_VARIABLE_SPECS, touched)]  # noqa: E731
    assert names(None) == [s.name for s in DEFAULT_VARIABLE_SPECS if s.infer]
    assert names([]) == []
    assert names(["profile:city"]) == ["city", "language"]
    assert names(["pref:running"]) == ["hobbies", "language"]
    assert names(["food:香菜"]) == ["diet", "language"]
    # Without a language spec, diet is worded by a language that any change may flip.
    no_language = [s for s in DEFAULT_VARIABLE_SPECS if s.name != "language"]
    assert [s.name for s in affected_specs(no_language, ["pref:x"])] == ["diet", "hobbies"]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    facts=st.lists(fact, max_size=40),
    candidates=st.lists(
        st.tuples(st.sampled_from(KEYS), st.sampled_from(CONTENTS), st.sampled_from(SUBJECTS)), max_size=6
    ),
)
def test_reconcile_against_related_facts_equals_reconcile_against_all(
    backend_store: MemoryStore,
    facts: list[Fact],
    candidates: list[tuple[str, str, str]],
) -> None:
    store = backend_store
    memory_id = f"r{abs(hash((tuple(facts), tuple(candidates))))}"
    fill(store, memory_id, facts)
    cands = [FragmentCandidate(content=c.format(s=s), key=k.format(s=s)) for k, c, s in candidates]
    related = related_facts(store, memory_id, [c.key for c in cands], [c.content for c in cands])
    every = store.list_fragments(memory_id, status="active")
    assert reconcile(cands, related) == reconcile(cands, every)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(facts=st.lists(fact, max_size=60), limit=st.integers(min_value=1, max_value=30))
def test_the_database_picks_the_snapshots_strongest_facts(
    backend_store: MemoryStore, facts: list[Fact], limit: int
) -> None:
    store = backend_store
    memory_id = f"s{abs(hash(tuple(facts)))}"
    fill(store, memory_id, facts)
    live = store.list_fragments(memory_id, status="active", include_expired=False, now_ms=NOW)
    assert store.strongest_fragments(memory_id, limit=limit, now_ms=NOW) == select_fragments(live, limit)
    durable = [f for f in select_fragments(live, len(live)) if not f.transient]
    assert store.strongest_fragments(memory_id, limit=limit, now_ms=NOW, transient=False) == durable[:limit]


def test_rows_inserted_without_derived_columns_get_them(tmp_path: Path) -> None:
    store = MemoryStore.from_url(str(tmp_path / "d.db"))
    try:
        store.ensure_memory("imp")
        row = {
            "memory_id": "imp",
            "id": "f1",
            "content": "用户不吃香菜。",
            "category": "diet",
            "key": "diet:香菜",
            "status": "active",
            "origin": "extracted",
            "created_at": 1,
            "updated_at": 1,
        }
        with store.transaction("imp") as conn:  # as an import of an older export inserts it
            conn.execute(insert(fragments).values(row))
        cand = FragmentCandidate(content="用户爱吃香菜。", key="food:香菜")
        assert [f.id for f in related_facts(store, "imp", [cand.key], [])] == ["f1"]
        with store.transaction() as conn:  # as a database written by an older version has them
            conn.execute(update(fragments).values(ckey=None, norm_hash=None, cjk=None))
        assert related_facts(store, "imp", [cand.key], []) == []
    finally:
        store.close()
    reopened = MemoryStore.from_url(str(tmp_path / "d.db"))  # opening fills them in
    try:
        assert [f.id for f in related_facts(reopened, "imp", [cand.key], ["用户 不吃 香菜"])] == ["f1"]
    finally:
        reopened.close()


def test_a_live_turns_fact_reads_do_not_grow_with_the_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    mem = ConvMemory.open("sqlite://", clock=lambda: NOW)
    built = 0
    real = fragments_module.row_to_fragment

    def counting(row):  # type: ignore[no-untyped-def]
        nonlocal built
        built += 1
        return real(row)

    try:
        per_turn = {}
        for size in (20, 2_000):
            memory_id = f"size_{size}"
            facts = [("pref:{s}", "用户喜欢{s}。", f"东西{i}", False, i % 40, 0.8, None) for i in range(size)]
            fill(mem.store, memory_id, facts)
            mem.lifecycle.run(memory_id)
            for module in ("convmem_graph.store.fact_records", "convmem_graph.store._fragments"):
                monkeypatch.setattr(f"{module}.row_to_fragment", counting)
            built = 0
            turn = [
                {"role": "user", "content": "我最近特别喜欢榴莲。"},
                {"role": "assistant", "content": "好呀"},
            ]
            result = mem.ingest(memory_id, turn, source="openai")
            assert result.fragment_ops.get("add") == 1
            per_turn[size] = built
            monkeypatch.undo()
        # The snapshot holds up to snapshot_max_fragments (200) facts; the rest is a few dozen.
        assert per_turn[2_000] <= mem.config.snapshot_max_fragments + 60, per_turn
        assert mem.variables("size_2000")["hobbies"].value  # inference still ran
    finally:
        mem.close()


def test_after_turns_and_hand_edits_inferred_variables_equal_a_full_inference(backend_url: str) -> None:
    clock = iter(range(NOW, NOW + 10**9, 60_000))
    mem = ConvMemory.open(backend_url, clock=lambda: next(clock))
    try:
        steps: list[str | tuple[str, str]] = [
            "我住在杭州。",
            "我喜欢跑步，也喜欢游泳。",
            ("add", "用户住在北京。"),
            "我不吃香菜。",
            "I love hiking and I'm allergic to peanuts.",
            ("delete", "profile:city"),
            "我搬到上海了。",
        ]
        for i, step in enumerate(steps):
            if isinstance(step, str):
                msg = {"role": "user", "content": step, "timestamp": NOW // 1000 + i}
                mem.ingest("seq", [msg], source="openai")
            elif step[0] == "add":
                mem.store.ensure_memory("seq")
                mem.store.add_fragment("seq", step[1], category="profile", key="profile:city")
                mem.lifecycle.run("seq")  # facts changed outside a run: which keys is unknown
            else:
                for f in mem.fragments("seq"):
                    if f.key == step[1]:
                        mem.delete_fragment("seq", f.id)
            every = mem.store.list_fragments("seq", status="active")
            expected = infer_variables(DEFAULT_VARIABLE_SPECS, every, now_ms=mem.lifecycle.clock())
            stored = mem.store.inferred_variables("seq")
            assert {n: v.value for n, v in stored.items()} == {n: g.value for n, g in expected.items()}, step
        assert mem.store.inferred_variables("seq")["city"].value == "上海"
        assert mem.variables("seq")["city"].value == "上海"
    finally:
        mem.close()


def test_pool_sizes_come_from_the_environment_with_named_errors() -> None:
    from convmem_graph.store.engine import POOL_DEFAULTS, pool_settings

    assert pool_settings({}) == POOL_DEFAULTS
    custom = pool_settings(
        {
            "CONVMEM_PG_POOL_SIZE": "20",
            "CONVMEM_PG_CHECKPOINT_POOL_SIZE": "3",
            "CONVMEM_PG_PREPARE_THRESHOLD": "none",
        }
    )
    assert (custom.store_size, custom.checkpoint_size, custom.prepare_threshold) == (20, 3, None)
    assert pool_settings({"CONVMEM_PG_PREPARE_THRESHOLD": "0"}).prepare_threshold == 0
    with pytest.raises(ValueError, match="CONVMEM_PG_MAX_OVERFLOW"):
        pool_settings({"CONVMEM_PG_MAX_OVERFLOW": "lots"})
    with pytest.raises(ValueError, match="CONVMEM_PG_PREPARE_THRESHOLD"):
        pool_settings({"CONVMEM_PG_PREPARE_THRESHOLD": "never"})
    with pytest.raises(ValueError, match="at least 1"):
        pool_settings({"CONVMEM_PG_POOL_SIZE": "0"})
    with pytest.raises(ValueError, match="CONVMEM_PG_CHECKPOINT_POOL_SIZE at least 2"):
        pool_settings({"CONVMEM_PG_CHECKPOINT_POOL_SIZE": "1"})
    # The advisory-lock pool is gone (the lock lives in each run's transaction): its settings are
    # reported, not refused.
    assert pool_settings({"CONVMEM_PG_LOCK_POOL_SIZE": "0"}) == POOL_DEFAULTS
