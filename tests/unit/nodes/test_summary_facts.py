"""The summary's fact read keeps what it read before: same facts, same summary text, every history.

Issue 24 item 1: a full memory's live turn refreshed its summary every turn, and that commit read
the ``budget // 4 + margin`` strongest durable and temporary facts and made each row a
``Fragment`` (~400 models a turn on a memory of a few thousand facts; an empty memory makes
none). ``SummaryRecords.summary_facts`` reads the same rows as driver tuples and makes a model
only for a row it has not made one for before (the rows are compared whole, so a change that
leaves ``updated_at`` as it was still makes a new one).

On SQLite the rows of the last read are kept and only the facts written since are read (the
facts' revision, kept by triggers: ``store/_fact_revisions.py``). These tests hold, after every
step of generated histories (lifecycle turns, bulk facts of the benchmark generator's key
families with ties in time, hand adds, updates in the same millisecond, deletes, raw SQL edits
that bypass the store, edits and deletes by another connection to the file, facts whose
``created_at`` is past their ``updated_at``, expiry as the clock moves, manual variables), the
new read equal to the old one (``strongest_fragments`` of each kind) and the stored summary text
equal to the one the old ``summarize`` commit produces from those reads; and that a merge which
ignores what changed fails them.
"""

from __future__ import annotations

import sqlite3
import tempfile
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import update

from convmem_graph.config import MemoryConfig
from convmem_graph.extractors.extractive import ExtractiveSummarizer
from convmem_graph.nodes.summarize import _RECENT
from convmem_graph.runner import Lifecycle
from convmem_graph.snapshot import _FACT_MARGIN, SNAPSHOT_RECENT, build_snapshot
from convmem_graph.state import RawInput
from convmem_graph.store import MemoryStore
from convmem_graph.store import _summary_facts as summary_facts_module
from convmem_graph.store.schema import fragments
from convmem_graph.tokens import count_tokens
from tests.benchmark_scripts import load_benchmark

NOW = 1_767_000_000_000
DAY = 86_400_000
MID = "m1"


#: The generator the benchmarks use: eleven key families, both languages, ties, temporary facts.
_facts = load_benchmark("_facts")

TURNS = [
    "我住在杭州，是一名护士。",
    "我最近特别喜欢羽毛球，每周都去。",
    "这周我在试着吃素。",
    "I also love hiking and jazz.",
    "我对芒果过敏。",
    "我打算下个月去成都旅行。",
    "My friend Tom plays the guitar.",
    "I live in Lisbon now.",
    "明天我要去看牙医。",
]
HAND = ["用户喜欢喝绿茶。", "User is learning Portuguese.", "用户这周在减肥。", "User has a dog named Rex."]

action = st.one_of(
    st.tuples(st.just("turn"), st.sampled_from(TURNS)),
    st.tuples(
        st.just("bulk"),
        st.sampled_from(sorted(_facts.SHAPES)),
        st.integers(min_value=1, max_value=320),
        st.integers(min_value=0, max_value=10_000),
    ),
    st.tuples(st.just("add"), st.sampled_from(HAND), st.booleans(), st.sampled_from([None, 1, 20])),
    st.tuples(st.just("update"), st.integers(min_value=0, max_value=10_000), st.sampled_from(HAND)),
    st.tuples(st.just("delete"), st.integers(min_value=0, max_value=10_000)),
    st.tuples(st.just("raw_content"), st.integers(min_value=0, max_value=10_000), st.sampled_from(HAND)),
    st.tuples(st.just("raw_created"), st.integers(min_value=0, max_value=10_000)),
    st.tuples(st.just("raw_rank"), st.integers(min_value=0, max_value=10_000), st.sampled_from([0.3, 0.95])),
    # Whole days land a fact added with an expiry exactly on it (expired at ``expires_at``).
    st.tuples(st.just("tick"), st.integers(min_value=0, max_value=9), st.sampled_from([0, 1])),
    st.tuples(st.just("var"), st.sampled_from(["杭州", "Lisbon", "Oslo"])),
    # Another connection to the file (another process): no store, no trigger of ours skipped.
    st.tuples(st.just("foreign_content"), st.integers(min_value=0, max_value=10_000), st.sampled_from(HAND)),
    st.tuples(st.just("foreign_delete"), st.integers(min_value=0, max_value=10_000)),
)


class _Clock:
    def __init__(self) -> None:
        self.now = NOW

    def __call__(self) -> int:
        return self.now


def _pick(store: MemoryStore, index: int) -> str | None:
    active = store.list_fragments(MID, status="active")
    return active[index % len(active)].id if active else None


def _apply(store: MemoryStore, clock: _Clock, step: tuple[Any, ...], path: Path | None = None) -> None:
    """One change of the memory between two lifecycle runs (``turn`` is the run itself).

    ``path``: the SQLite file, for the changes another connection makes (none on PostgreSQL).
    """
    kind, now = step[0], clock.now
    if kind == "turn" or (kind.startswith("foreign") and path is None):
        return
    if kind == "bulk":
        ops = _facts.generated_ops(step[3], step[2], _facts.SHAPES[step[1]], now_ms=now, ties=True)
        store.commit_extraction(MID, ops, upto_seq=store.max_seq(MID), now_ms=now)
    elif kind == "add":
        expires = None if step[3] is None else now + step[3] * DAY
        store.add_fragment(
            MID, step[1], transient=step[2], expires_at=expires if step[2] else None, now_ms=now
        )
    elif kind == "tick":
        clock.now += step[1] * DAY + step[2]
    elif kind == "var":
        store.set_manual_variable(MID, "city", step[1], now_ms=now)
    else:
        fid = _pick(store, step[1])
        if fid is None:
            return
        if kind == "update":  # the same millisecond as the last write: updated_at may not move
            store.update_fragment(MID, fid, content=step[2], now_ms=now)
        elif kind.startswith("foreign"):
            with closing(sqlite3.connect(str(path))) as other, other:
                if kind == "foreign_content":  # updated_at as it was
                    where = "WHERE memory_id = ? AND id = ?"
                    other.execute(f"UPDATE cm_fragments SET content = ? {where}", (step[2], MID, fid))
                else:
                    other.execute("DELETE FROM cm_fragments WHERE memory_id = ? AND id = ?", (MID, fid))
        elif kind == "delete":
            store.delete_fragment(MID, fid, now_ms=now)
        else:
            # Behind the store's back: no write count, no snapshot dropped, updated_at unchanged.
            column = {"raw_content": "content", "raw_created": "created_at", "raw_rank": "confidence"}[kind]
            row = store.get_fragment(MID, fid)
            value = {"raw_content": step[-1], "raw_created": row.updated_at + 5_000}.get(kind, step[-1])
            with store.transaction() as conn:
                conn.execute(update(fragments).where(fragments.c.id == fid).values({column: value}))


def _old_reads(store: MemoryStore, limit: int, now: int) -> tuple[list[Any], list[Any]]:
    """What the summary commit read before: ``strongest_fragments`` of each kind."""
    durable, transient = (
        store.strongest_fragments(MID, limit=limit, now_ms=now, transient=kind) for kind in (False, True)
    )
    return durable, transient


def _old_text(store: MemoryStore, limit: int, budget: int, now: int) -> str:
    """The summary text the old commit made from those reads (same summarizer, same inputs)."""
    durable, transient = _old_reads(store, limit, now)
    recent = store.recent_messages(MID, max(_RECENT, SNAPSHOT_RECENT))[-_RECENT:]
    return ExtractiveSummarizer().summarize(
        store.get_summary(MID),
        recent,
        dict(store.get_variables(MID)),
        durable + transient,
        budget_tokens=budget,
        counter=count_tokens,
        now_ms=now,
    )


def check_history(steps: list[tuple[Any, ...]], budget: int, url: str | None = None) -> None:
    """Run ``steps`` on a new memory (a new SQLite file, or the empty database at ``url``) checking each.

    A SQLite ``url`` is a file path: the changes another connection makes go to that file.
    """
    limit = budget // 4 + _FACT_MARGIN
    config = MemoryConfig(summary_budget_tokens=budget)
    clock = _Clock()
    with tempfile.TemporaryDirectory() as tmp:
        url = url or str(Path(tmp) / "m.db")
        path = None if "://" in url else Path(url)  # another connection's changes: SQLite only
        store = MemoryStore.from_url(url)
        try:
            lc = Lifecycle(store, config=config, clock=clock)
            for i, step in enumerate(steps):
                _apply(store, clock, step, path)
                text = step[1] if step[0] == "turn" else f"好的，记下了 {i}"
                turn = [{"role": "user", "content": text}, {"role": "assistant", "content": f"嗯 {i}"}]
                result = lc.run(MID, [RawInput(turn, "openai")], session_ended=True)
                now = clock.now
                # The read the summary commit makes now, against the one it made before.
                assert store.summary_facts(MID, limit=limit, now_ms=now) == _old_reads(store, limit, now), (
                    step
                )
                summary = store.get_summary(MID)
                if "summarize" in result.node_ms and summary is not None and summary.updated_at == now:
                    assert summary.text == _old_text(store, limit, budget, now), step
                # inject's snapshot, built from what summarize held, equals one from fresh reads.
                fresh = build_snapshot(store, MID, config, now_ms=now)
                assert store.load_snapshot(MID) == fresh, step
                # Without held rows build_snapshot cuts the store's kept lists (SQLite): the facts the
                # database's own strongest read gives.
                cap = config.snapshot_max_fragments
                assert fresh.fragments == store.strongest_fragments(MID, limit=cap, now_ms=now), step
        finally:
            store.close()


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=st.lists(action, min_size=1, max_size=8), budget=st.sampled_from([20, 60, 300]))
def test_summary_text_and_fact_read_equal_the_old_ones_over_generated_histories(
    steps: list[tuple[Any, ...]], budget: int
) -> None:
    check_history(steps, budget)


#: Live turns, then every kind of change between them, each followed by a run.
FULL_MEMORY_STEPS: list[tuple[Any, ...]] = [
    *[("turn", t) for t in TURNS[:4]],
    ("update", 3, HAND[0]),
    ("raw_content", 5, HAND[1]),
    ("raw_created", 2),
    ("delete", 0),
    ("raw_rank", 4, 0.95),
    ("tick", 3, 1),
    ("add", HAND[2], True, 1),
    ("tick", 1, 0),  # exactly at that fact's expiry
    ("var", "Oslo"),
    ("foreign_content", 6, HAND[3]),
    ("foreign_delete", 1),
    ("turn", TURNS[5]),
]


@pytest.mark.parametrize("shape", ["only-plan", "only-like", "mixed"])
def test_a_full_memory_keeps_the_summary_of_the_old_read_turn_after_turn(
    backend_url: str, shape: str
) -> None:
    """Past the read limit (the cut matters), with every kind of change between live turns.

    On PostgreSQL: booleans, the JSON column as psycopg decodes it, and the UNION's order.
    """
    check_history([("bulk", shape, 700, 7), *FULL_MEMORY_STEPS], 300, url=backend_url)


def test_a_row_changed_behind_the_store_is_read_again(tmp_path: Path) -> None:
    """The kept models are reused only for a row equal in every column, not one with the same id and time."""
    store = MemoryStore.from_url(str(tmp_path / "m.db"))
    fact = store.add_fragment(MID, "用户喜欢喝绿茶。", key="pref:绿茶", now_ms=NOW)
    first, _ = store.summary_facts(MID, limit=10, now_ms=NOW)
    again, _ = store.summary_facts(MID, limit=10, now_ms=NOW)
    assert again[0] is first[0]  # unchanged row: the model made before
    with store.transaction() as conn:
        conn.execute(update(fragments).where(fragments.c.id == fact.id).values(content="用户喜欢喝红茶。"))
    changed, _ = store.summary_facts(MID, limit=10, now_ms=NOW)
    assert changed[0].content == "用户喜欢喝红茶。" and changed[0].updated_at == first[0].updated_at
    store.close()


def _full_memory(url: str | Path, facts: int = 400) -> MemoryStore:
    """A memory past the read limit of both kinds (``only-plan``: many temporary facts)."""
    store = MemoryStore.from_url(str(url))
    store.ensure_memory(MID)
    ops = _facts.generated_ops(7, facts, _facts.SHAPES["only-plan"], now_ms=NOW, ties=True)
    store.commit_extraction(MID, ops, upto_seq=0, now_ms=NOW)
    return store


def test_a_live_turn_of_a_full_memory_reads_only_the_facts_it_wrote(tmp_path: Path) -> None:
    """After the first read, turns that add facts are merged in: no read of the whole lists again."""
    store = _full_memory(tmp_path / "m.db")
    clock = _Clock()
    lc = Lifecycle(store, config=MemoryConfig(), clock=clock)
    limit = MemoryConfig().summary_budget_tokens // 4 + _FACT_MARGIN
    kept = store._strongest
    for i, text in enumerate(TURNS):
        clock.now += 1_000
        turn = [{"role": "user", "content": text}, {"role": "assistant", "content": f"嗯 {i}"}]
        lc.run(MID, [RawInput(turn, "openai")], session_ended=True)  # the summary is refreshed
        assert store.summary_facts(MID, limit=limit, now_ms=clock.now) == _old_reads(store, limit, clock.now)
        if i == 0:
            full, delta = kept.full_reads, kept.delta_reads
    # Each later turn: the summary's read in the run and the one above, both merged.
    assert kept.full_reads == full and kept.delta_reads - delta == 2 * (len(TURNS) - 1)
    store.close()


@pytest.mark.parametrize("keeps", [True, False])
def test_the_snapshot_reads_the_kept_lists_only_where_the_store_keeps_them(
    tmp_path: Path, monkeypatch: Any, keeps: bool
) -> None:
    """``build_snapshot`` asks the store which read to make, not the dialect: same facts either way."""
    store = _full_memory(tmp_path / "m.db")
    config = MemoryConfig()
    assert store.keeps_summary_facts  # SQLite keeps revisions per fact
    monkeypatch.setattr(type(store), "keeps_summary_facts", property(lambda self: keeps))
    calls: list[str] = []
    for name in ("summary_facts", "strongest_fragments"):
        real = getattr(store, name)

        def spy(*args: Any, _name: str = name, _real: Any = real, **kwargs: Any) -> Any:
            calls.append(_name)
            return _real(*args, **kwargs)

        monkeypatch.setattr(store, name, spy)
    snap = build_snapshot(store, MID, config, now_ms=NOW)
    assert calls == (["summary_facts"] if keeps else ["strongest_fragments"])
    monkeypatch.undo()
    assert snap.fragments == store.strongest_fragments(MID, limit=config.snapshot_max_fragments, now_ms=NOW)
    store.close()


def test_rows_read_inside_a_transaction_that_rolled_back_are_not_kept(tmp_path: Path) -> None:
    """The revision goes back with a rollback; a fact written after it must not pass for the kept one."""
    store = _full_memory(tmp_path / "m.db")
    limit = 40
    with pytest.raises(RuntimeError), store.session() as s, s.transaction():
        s.add_fragment(MID, "用户喜欢喝绿茶。", key="pref:绿茶", now_ms=NOW + 5)
        durable, _ = s.summary_facts(MID, limit=limit, now_ms=NOW + 5)
        assert durable[0].content == "用户喜欢喝绿茶。"  # read inside the transaction
        raise RuntimeError("the transaction fails")
    # Another fact takes the rolled-back one's revision.
    store.add_fragment(MID, "User has a dog named Rex.", key="pet:rex", now_ms=NOW + 6)
    assert store.summary_facts(MID, limit=limit, now_ms=NOW + 6) == _old_reads(store, limit, NOW + 6)
    store.close()


def test_a_memory_deleted_and_made_again_by_another_store_is_read_again(backend_url: str) -> None:
    """Its revisions start over, past the kept one by the time this store reads: the cut tells.

    (On PostgreSQL the new memory row's random cut tells this store's kept lists apart.)
    """
    store = _full_memory(backend_url, facts=40)
    assert store.summary_facts(MID, limit=30, now_ms=NOW)[0]
    other = MemoryStore.from_url(backend_url)  # another process
    other.delete_memory(MID)
    other.ensure_memory(MID)
    ops = _facts.generated_ops(8, 60, _facts.SHAPES["mixed"], now_ms=NOW, ties=True)
    other.commit_extraction(MID, ops, upto_seq=0, now_ms=NOW)
    other.close()
    assert store.summary_facts(MID, limit=30, now_ms=NOW) == _old_reads(store, 30, NOW)
    store.close()


def test_the_equivalence_checks_fail_when_the_merge_ignores_what_changed(monkeypatch: Any) -> None:
    """A deliberately broken variant (the kept lists never move) must fail the history check."""
    monkeypatch.setattr(summary_facts_module._Ranked, "merged", lambda self, changed, rows, cap, **kw: self)
    with pytest.raises(AssertionError):
        check_history([("bulk", "only-plan", 700, 7), *FULL_MEMORY_STEPS], 300)
