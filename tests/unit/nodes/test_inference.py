"""The hobby walk reads only the hobby key families, through their index, and infers what it did before.

Issue 24 item 1: ``_hobby_facts`` walked every durable fact (LIMIT/OFFSET on an ORDER BY no index
covered) when fewer than 20 hobby items existed. It now walks the ``pref:``/``habit:`` facts
alone, keyset-paged through ``ix_cm_fragments_family`` (was its own partial index ``ix_cm_fragments_hobby``,
replaced by it in migration 10). These tests compare it with a copy of the
old walk on generated memories of many key families, and check the index and its upgrade.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from unittest.mock import patch

import pytest

from convmem_graph.extractors.variables import (
    _HOBBY_PREFIXES,
    DEFAULT_VARIABLE_SPECS,
    _hobbies,
    infer_variables,
)
from convmem_graph.models import FragmentCandidate, FragmentOp
from convmem_graph.nodes import _inference
from convmem_graph.nodes._inference import _Facts, infer_from_store
from convmem_graph.store import MemoryStore
from convmem_graph.store import _fact_queries as FQ
from convmem_graph.store.schema import HOBBY_PREFIXES
from tests.benchmark_scripts import load_benchmark

NOW = 1_767_000_000_000
DAY = 86_400_000
HOBBIES = [s for s in DEFAULT_VARIABLE_SPECS if s.name == "hobbies"]


#: The generator the benchmarks use (one definition of the fact shapes, many key families).
_facts = load_benchmark("_facts")
FAMILIES = _facts.FAMILIES


def generated_ops(seed: int, count: int, weights: dict[str, int]) -> list[FragmentOp]:
    """``count`` facts drawn with ``weights`` over the families, Chinese and English, with ties.

    Observed times repeat (ties broken by more than time, across page boundaries), some facts are
    temporary or expired, and some subjects repeat under two families (older facts of an item).
    """
    ops: list[FragmentOp] = _facts.generated_ops(seed, count, weights, now_ms=NOW)
    return ops


#: The walk before issue 24 (every durable fact, newest first): the reference the new walk must match.
_cliff = load_benchmark("facts_cliff")
old_hobby_facts, old_language = _cliff.old_hobby_facts, _cliff.old_language


@pytest.fixture()
def store() -> Iterator[MemoryStore]:
    s = MemoryStore.from_url("sqlite://")
    yield s
    s.close()


#: Shapes: (name, count, weights). Few hobby items (the old full walk), many, only other families,
#: only hobbies mostly negative or favourite slots (a walk to the end), and small memories.
SHAPES = [
    (
        "few-hobbies",
        600,
        {"like": 5, "dislike": 5, "plan": 5, "family": 5, "food": 5, "profile": 5, "pref": 1},
    ),
    ("mixed", 400, {f: 1 for f in FAMILIES}),
    ("no-hobbies", 300, {"like": 1, "dislike": 1, "plan": 1, "family": 1, "food": 1, "profile": 1}),
    ("negative-hobbies", 500, {"pref_neg": 6, "pref_fav": 3, "habit": 1, "plan": 1}),
    ("hobby-heavy", 700, {"pref": 3, "habit": 3, "hobby": 1, "like": 1}),
    ("small", 20, {f: 1 for f in FAMILIES}),
    ("page", 45, {"pref": 2, "like": 2, "family": 1}),
    # One family alone, each of the benchmarks' single-family shapes.
    *[(name, 300, weights) for name, weights in _facts.SHAPES.items() if name.startswith("only-")],
]


@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize(("shape", "count", "weights"), SHAPES, ids=[s[0] for s in SHAPES])
def test_new_hobby_walk_infers_what_the_old_walk_did(
    store: MemoryStore, shape: str, count: int, weights: dict[str, int], seed: int
) -> None:
    memory_id = f"{shape}_{seed}"
    store.commit_extraction(memory_id, generated_ops(seed, count, weights), upto_seq=0, now_ms=NOW - DAY)
    facts = _Facts(store, memory_id, NOW)
    new = _hobbies(_inference._hobby_facts(facts))
    old = _hobbies(old_hobby_facts(facts))
    assert new == old
    every = store.list_fragments(memory_id, status="active")
    assert new == infer_variables(HOBBIES, every, now_ms=NOW).get("hobbies")
    # The whole inference too, every variable (the old walk swapped in for the reference run).
    specs = list(DEFAULT_VARIABLE_SPECS)
    current = infer_from_store(store, memory_id, specs, now_ms=NOW)
    with patch.object(_inference, "_hobby_facts", old_hobby_facts):
        assert current == infer_from_store(store, memory_id, specs, now_ms=NOW)
    # And with every rule asking the database (no small-memory shortcut), against both old walks.
    with patch.object(_inference, "_FEW", 0):
        assert infer_from_store(store, memory_id, specs, now_ms=NOW) == current
        with (
            patch.object(_inference, "_hobby_facts", old_hobby_facts),
            patch.object(_inference, "_language", old_language),
        ):
            assert infer_from_store(store, memory_id, specs, now_ms=NOW) == current


def test_the_walk_reads_only_hobby_families(store: MemoryStore) -> None:
    ops = generated_ops(7, 3000, {"like": 1, "dislike": 1, "plan": 1, "family": 1, "food": 1, "pref": 0})
    hobby = generated_ops(8, 6, {"pref": 1, "habit": 1})
    store.commit_extraction("m", ops + hobby, upto_seq=0, now_ms=NOW - DAY)
    read_rows: list[str] = []
    real = FQ.newest_hobby_rows

    def counting(*args: Any, **kwargs: Any) -> Iterator[Any]:
        for row in real(*args, **kwargs):
            read_rows.append(row.ckey)
            yield row

    facts = _Facts(store, "m", NOW)
    with patch.object(_inference, "newest_hobby_rows", counting):
        result = _inference._hobby_facts(facts)
    assert read_rows and all(k.startswith(_HOBBY_PREFIXES) for k in read_rows)
    assert len(read_rows) <= len(hobby)
    assert _hobbies(result) == _hobbies(old_hobby_facts(facts))


def test_keyset_pages_cover_every_fact_once_in_order_across_ties(store: MemoryStore) -> None:
    # 700 hobby facts on 5 observed times: every page boundary falls inside a tie.
    ops = [
        FragmentOp(
            op="add",
            candidate=FragmentCandidate(
                content=f"用户不喜欢活动{j}。", key=f"pref:活动{j}", observed_at=NOW - (j % 5) * 1000
            ),
        )
        for j in range(700)
    ]
    store.commit_extraction("t", ops, upto_seq=0, now_ms=NOW - DAY)
    keyset = [r.id for r in FQ.newest_hobby_rows(store.read, "t", now_ms=NOW, batch=7)]
    # The order of the index, computed in Python over every fact.
    every = store.list_fragments("t")
    newest = sorted(every, key=lambda f: (f.observed_at, f.updated_at, f.created_at, f.id), reverse=True)
    assert keyset == [f.id for f in newest] and len(set(keyset)) == 700


def test_the_hobby_read_uses_its_index_in_order(store: MemoryStore) -> None:
    values: dict[str, object] = {"mid": "m", "now": NOW, "limit": 32, "o": NOW, "u": NOW, "c": NOW, "i": "x"}
    with store._read() as conn:
        for family in HOBBY_PREFIXES:
            for stmt in FQ.NEWEST_OF_KEY_FAMILY:
                compiled = stmt.compile(dialect=conn.dialect)
                names = compiled.positiontup or []
                params = tuple(
                    {**values, "family": family}.get(k, "active" if k.startswith("status") else 0)
                    for k in names
                )
                plan = conn.exec_driver_sql(f"EXPLAIN QUERY PLAN {compiled}", params).fetchall()
                details = " ".join(str(row[-1]) for row in plan)
                # Each family a range of the key-family index, in the ORDER BY's order: no sort of
                # every hobby fact per page.
                assert "ix_cm_fragments_family" in details, details
                assert "TEMP B-TREE" not in details, details


def test_the_index_prefixes_are_the_hobby_rule_prefixes() -> None:
    assert sorted(HOBBY_PREFIXES) == sorted(_HOBBY_PREFIXES)


def test_an_older_database_gains_the_family_index_and_loses_the_hobby_one_on_open(tmp_path: Path) -> None:
    db = tmp_path / "old.db"
    store = MemoryStore.from_url(str(db))
    store.commit_extraction("m", generated_ops(3, 50, {"pref": 1, "like": 1}), upto_seq=0, now_ms=NOW)
    before = infer_from_store(store, "m", HOBBIES, now_ms=NOW)
    store.close()
    with sqlite3.connect(db) as conn:  # as the version before the family index left it
        conn.execute("DROP INDEX ix_cm_fragments_family")
        conn.execute(
            "CREATE INDEX ix_cm_fragments_hobby ON cm_fragments (memory_id, status, transient, "
            "observed_at DESC, updated_at DESC, created_at DESC, id DESC) "
            "WHERE ckey >= 'habit:' AND ckey < 'habit;' OR ckey >= 'pref:' AND ckey < 'pref;'"
        )
        conn.execute("PRAGMA user_version = 1698406020")
    store = MemoryStore.from_url(str(db))
    try:
        with sqlite3.connect(db) as conn:
            names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'index'")}
        assert "ix_cm_fragments_family" in names and "ix_cm_fragments_hobby" not in names
        assert infer_from_store(store, "m", HOBBIES, now_ms=NOW) == before
    finally:
        store.close()


def test_the_large_memory_hint_never_changes_what_facts_holds(store: MemoryStore) -> None:
    """A memory last seen with more than ``_FEW`` facts is asked for ids first; same answer.

    (Some generated facts are temporary: not all of the ten left are usable.)
    """

    def plain(memory_id: str, now: int) -> tuple[bool, list[str]]:
        _inference._LARGE.pop(memory_id, None)  # no hint: the one full read of before
        facts = _Facts(store, memory_id, now)
        return facts.complete, [f.id for f in facts.page]

    def hinted(memory_id: str, now: int) -> tuple[bool, list[str]]:
        _inference._LARGE[memory_id] = None
        facts = _Facts(store, memory_id, now)
        return facts.complete, [f.id for f in facts.page]

    ops = generated_ops(3, 60, {"pref": 1, "like": 1})
    store.commit_extraction("h", ops[:20], upto_seq=0, now_ms=NOW - DAY)
    assert hinted("h", NOW) == plain("h", NOW) and plain("h", NOW)[0]  # small: a wrong hint, one more read
    assert "h" not in _inference._LARGE  # and it is dropped
    store.commit_extraction("h", ops[20:], upto_seq=0, now_ms=NOW - DAY)
    _Facts(store, "h", NOW)
    assert "h" in _inference._LARGE  # large now: the next one reads ids first
    assert hinted("h", NOW) == plain("h", NOW) == (False, [])
    ids = [f.id for f in store.list_fragments("h", status="active")]
    assert len(ids) > _inference._FEW
    for fid in ids[: len(ids) - 10]:  # small again, the hint still set
        store.delete_fragment("h", fid)
    _inference._LARGE["h"] = None
    assert hinted("h", NOW) == plain("h", NOW)
    assert plain("h", NOW)[0] and 0 < len(plain("h", NOW)[1]) <= 10
