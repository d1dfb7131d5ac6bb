"""A custom list variable reads its key family newest first until its items are full.

Issue 24: a list variable a user defines (``like``, ``books``) read every active fact of its key
family on each turn that touched one (``prefix_rows``: the whole ``(memory, status, ckey)``
range, every row made into a model). It now walks the family newest stated first through
``ix_cm_fragments_family`` (keyset-paged), stops at ``MAX_LIST_ITEMS`` items (after the facts
stated at the same time as the last one) and reads the older facts of those items by key. These
tests hold the store path equal, over generated facts (raw key spellings that normalize alike,
legacy prefixes of the same canonical family, Chinese and English, positive and negative wording,
repeated items, ties in time, temporary facts, expiries before, exactly at and after ``now``,
supersedes, hand edits and deletes, any order of writing), to :func:`infer_variables` over every
fact and to the old read, with the items capped at 1, 2, 3 and 20, on SQLite and on PostgreSQL
(``backend_store``); and the walk's SQLite plan free of a sort. The bounded-read test is in
``test_inference_reads_flat.py``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any
from unittest.mock import patch

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from convmem_graph.extractors import variables as V
from convmem_graph.extractors.variables import infer_variables
from convmem_graph.models import FragmentCandidate, FragmentOp, VariableGuess, VariableSpec
from convmem_graph.nodes import _inference
from convmem_graph.nodes._inference import infer_from_store
from convmem_graph.store import MemoryStore
from convmem_graph.store import _fact_queries as FQ

NOW = 1_767_000_000_000
DAY = 86_400_000
SPECS = [
    VariableSpec(name="like", type="list"),
    VariableSpec(name="books", type="list"),
    VariableSpec(name="hobby", type="list"),  # a legacy prefix: its family is pref:
]
#: Raw key prefixes: spellings of one family, a legacy one, and neighbours of other families.
PREFIXES = ["like", "Like", " LIKE", "books", "Books", "hobby", "pref", "likes", "dislike"]
ITEMS = ["tea", "Tea", "ice cream", "ice_cream", "jazz", "围棋", "芒果", "war and peace", "chess"]
WORDING = {
    (True, False): "User likes {}.",
    (True, True): "用户喜欢{}。",
    (False, False): "User does not like {}.",
    (False, True): "用户不喜欢{}。",
}
EXPIRIES = [None, -DAY, 0, DAY]

_FACT = st.tuples(
    st.just("add"),
    st.sampled_from(PREFIXES),
    st.sampled_from(ITEMS),
    st.booleans(),  # positive
    st.integers(0, 3),  # observed time: ties across facts
    st.booleans(),  # transient
    st.sampled_from(EXPIRIES),
    st.booleans(),  # through the API (a durable fact may carry an expiry) or extraction
)
_CHANGE = st.tuples(st.sampled_from(["supersede", "edit", "delete"]), st.integers(0, 50))
ACTIONS = st.lists(st.one_of(_FACT, _FACT, _CHANGE), min_size=1, max_size=30)


@pytest.fixture()
def store() -> Iterator[MemoryStore]:
    s = MemoryStore.from_url("sqlite://")
    yield s
    s.close()


def _content(item: str, positive: bool) -> str:
    zh = any("\u4e00" <= ch <= "\u9fff" for ch in item)
    return WORDING[(positive, zh)].format(item)


def apply(store: MemoryStore, memory_id: str, action: tuple[Any, ...], step: int) -> None:
    """One write: an extracted or API-added fact, or a supersede, hand edit or delete of one."""
    now = NOW - DAY + step
    if action[0] == "add":
        _, prefix, item, positive, t, transient, expiry, api = action
        content, key = _content(item, positive), f"{prefix}:{item}"
        expires_at = None if expiry is None else NOW + expiry
        if api:
            store.add_fragment(
                memory_id,
                content,
                key=key,
                origin="api",
                transient=transient and expires_at is not None,
                expires_at=expires_at,
                now_ms=now,
            )
            return
        candidate = FragmentCandidate(
            content=content,
            category="preference",
            key=key,
            transient=transient,
            expires_at=expires_at,
            observed_at=NOW - DAY - t * 1000,
        )
        store.commit_extraction(
            memory_id, [FragmentOp(op="add", candidate=candidate)], upto_seq=0, now_ms=now
        )
        return
    kind, n = action
    ids = [f.id for f in store.list_fragments(memory_id)]
    if not ids:
        return
    target = ids[n % len(ids)]
    if kind == "supersede":
        item = ITEMS[n % len(ITEMS)]
        candidate = FragmentCandidate(
            content=_content(item, n % 3 != 0),
            category="preference",
            key=f"{PREFIXES[n % len(PREFIXES)]}:{item}",
            observed_at=NOW - DAY - (n % 4) * 1000,
        )
        op = FragmentOp(op="supersede", candidate=candidate, target_id=target)
        store.commit_extraction(memory_id, [op], upto_seq=0, now_ms=now)
    elif kind == "edit":  # the wording flips between liking and not
        fact = store.get_fragment(memory_id, target)
        negative = "not" in fact.content or "不" in fact.content
        store.update_fragment(memory_id, target, content=_content(f"x{n}", negative), now_ms=now)
    else:
        store.delete_fragment(memory_id, target, now_ms=now)


def _old_read(store: MemoryStore, memory_id: str, spec: VariableSpec, now: int) -> VariableGuess | None:
    """The read before the walk: every usable fact of the family's canonical-key range."""
    with store.read() as conn:
        rows = list(FQ.prefix_rows(conn, memory_id, [_inference._list_prefix(spec)], now_ms=now))
    return V._list(spec, [_inference.row_to_fragment(r) for r in rows])


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@example(  # two spellings of one item, the newest negative, at the cap of one item
    actions=[
        ("add", "like", "Tea", True, 1, False, None, False),
        ("add", "Like", "tea", False, 0, False, None, False),
        ("add", "like", "jazz", True, 2, False, None, False),
    ],
    cap=1,
)
@example(  # ties in time at the cut: the facts stated with the last item are all read
    actions=[
        ("add", "like", "tea", True, 0, False, None, False),
        ("add", "like", "jazz", True, 0, False, None, False),
        ("add", "like", "chess", True, 0, False, None, False),
        ("add", "like", "tea", True, 3, False, None, False),
    ],
    cap=1,
)
@given(actions=ACTIONS, cap=st.sampled_from([1, 2, 3, 20]))
def test_the_walk_gives_the_value_of_every_fact(
    backend_store: MemoryStore, actions: list[tuple[Any, ...]], cap: int
) -> None:
    """On PostgreSQL the walk's order ties are broken by the server's collation of ``id``, which need
    not be Python's (the walk reads on past the last item's time for that reason)."""
    store = backend_store
    memory_id = f"m{abs(hash((tuple(actions), cap))) % 10**9}"
    store.ensure_memory(memory_id)
    for step, action in enumerate(actions):
        apply(store, memory_id, action, step)
    every = store.list_fragments(memory_id, status="active")
    with patch.object(V, "MAX_LIST_ITEMS", cap), patch.object(_inference, "MAX_LIST_ITEMS", cap):
        for now in (NOW - 2 * DAY, NOW, NOW + 2 * DAY):
            expected = infer_variables(SPECS, every, now_ms=now)
            names = {s.name for s in SPECS}
            want = {k: v for k, v in expected.items() if k in names}
            assert infer_from_store(store, memory_id, SPECS, now_ms=now) == want
            with patch.object(_inference, "_FEW", 0):  # the index walk, never the small page
                assert infer_from_store(store, memory_id, SPECS, now_ms=now) == want
                for spec in SPECS[:2]:  # (hobby falls back to the hobbies rule when empty)
                    assert _old_read(store, memory_id, spec, now) == want.get(spec.name)


def test_key_family_rows_reject_a_non_family() -> None:
    with pytest.raises(ValueError, match="key family"):
        next(FQ.newest_key_family_rows(lambda: None, "m", "like", now_ms=NOW))  # type: ignore[arg-type, return-value]


def test_the_walk_is_one_index_range_without_a_sort(store: MemoryStore) -> None:
    first, after = FQ.NEWEST_OF_KEY_FAMILY
    values: dict[str, Any] = {"mid": "m", "now": NOW, "family": "like:", "limit": 32}
    values.update(o=NOW, u=NOW, c=NOW, i="x")
    with store.read() as conn:
        for stmt in (first, after):
            compiled = stmt.compile(dialect=conn.dialect)
            params = tuple(
                values.get(k, "active" if k.startswith("status") else 0) for k in compiled.positiontup or []
            )
            plan = " ".join(
                str(r[-1]) for r in conn.exec_driver_sql(f"EXPLAIN QUERY PLAN {compiled}", params)
            )
            assert "ix_cm_fragments_family" in plan and "TEMP B-TREE" not in plan, plan
