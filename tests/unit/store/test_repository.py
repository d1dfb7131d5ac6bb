"""The store's conformance suite: :class:`StoreContract`, run on every backend in :data:`BACKENDS`.

The unit tier runs it here on the SQLite backends (a file, and in memory); the integration tier runs
the same contract on PostgreSQL (tests/integration/test_postgres_store.py). A new backend is a new
entry in :data:`BACKENDS` and a subclass providing its ``store`` and ``checkpointer`` fixtures."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.memory import InMemorySaver
from sqlalchemy import event, func, select, text

from convmem_graph.checkpoints import sqlite_checkpointer
from convmem_graph.errors import ConvMemError, MemoryNotFoundError, NotFoundError
from convmem_graph.models import (
    FragmentCandidate,
    FragmentOp,
    MemorySnapshot,
    Message,
    Summary,
    VariableGuess,
    VariableSpec,
)
from convmem_graph.store import MemoryStore, StoreRun
from convmem_graph.store import _audit as audit_module
from convmem_graph.store._optional import present
from convmem_graph.store.registry import OPTIONAL_TABLES, SIDE_TABLES
from convmem_graph.store.schema import METADATA, PER_MEMORY_TABLES, messages
from tests.unit.checkpoints.test_checkpoints import build_counter_graph, cfg

T0 = 1_767_268_800_000  # 2026-01-01T12:00:00Z


def msg(
    mid: str,
    content: str,
    ts: int = T0,
    *,
    role: str = "user",
    channel: str = "im",
    source: str = "message",
    **extra: Any,
) -> Message:
    return Message(
        id=mid, role=role, content=content, channel=channel, source=source, timestamp_ms=ts, **extra
    )


def cand(content: str, key: str, ids: list[str] | None = None, **extra: Any) -> FragmentCandidate:
    return FragmentCandidate(
        content=content, key=key, category="profile", source_message_ids=ids or [], **extra
    )


def op(
    kind: str, content: str, key: str, ids: list[str] | None = None, target: str | None = None
) -> FragmentOp:
    return FragmentOp(op=kind, candidate=cand(content, key, ids), target_id=target)  # type: ignore[arg-type]


def rows_per_table(store: MemoryStore, memory_id: str) -> dict[str, int]:
    """Rows of the memory per table (0 in an optional table a SQLite file does not have yet)."""
    with store.engine.connect() as conn:
        return {
            t.name: int(
                conn.execute(
                    select(func.count()).select_from(t).where(t.c.memory_id == memory_id)
                ).scalar_one()
            )
            if present(conn, t)
            else 0
            for t in PER_MEMORY_TABLES
        }


#: Every backend the contract runs on, and the tier that runs it (a server-backed one needs the
#: integration tier's database).
BACKENDS: dict[str, str] = {"sqlite-file": "unit", "sqlite-memory": "unit", "postgresql": "integration"}


def backends(tier: str) -> list[str]:
    """The backends whose contract run belongs to ``tier``."""
    return [name for name, where in BACKENDS.items() if where == tier]


def open_backend(name: str, tmp_path: Path, pg_url: str | None = None) -> MemoryStore:
    """A store on backend ``name`` (``pg_url`` for ``postgresql``)."""
    if name == "sqlite-file":
        return MemoryStore.from_url(str(tmp_path / "store.db"))
    if name == "sqlite-memory":
        return MemoryStore.from_url(":memory:")
    if name == "postgresql" and pg_url is not None:
        return MemoryStore.from_url(pg_url)
    raise ValueError(f"no backend {name!r} (or no URL for it)")


class StoreContract:
    """Behaviour every backend must show. Subclasses provide ``store`` and ``checkpointer`` fixtures."""

    @pytest.fixture
    def mid(self) -> Callable[[str], str]:
        run = uuid.uuid4().hex[:8]
        return lambda name: f"{name}-{run}"

    # -- memories -------------------------------------------------------------------------------
    def test_create_get_list_memories(self, store: MemoryStore, mid: Callable[[str], str]) -> None:
        a = store.create_memory(mid("a"), "first")
        assert (a.memory_id, a.description, a.message_count, a.fragment_count) == (mid("a"), "first", 0, 0)
        with pytest.raises(ConvMemError, match="already exists"):
            store.create_memory(mid("a"))
        generated = store.create_memory()
        assert generated.memory_id.startswith("mem_")
        assert store.ensure_memory(mid("a"), "ignored").description == "first"
        store.add_messages(mid("a"), [msg("m1", "hello"), msg("m2", "world", T0 + 1)])
        store.add_fragment(mid("a"), "User likes tea", key="preference:tea")
        info = store.get_memory(mid("a"))
        assert (info.message_count, info.fragment_count) == (2, 1)
        listed = {m.memory_id: m for m in store.list_memories(limit=10_000)}
        assert listed[mid("a")].message_count == 2
        assert generated.memory_id in listed
        with pytest.raises(MemoryNotFoundError):
            store.get_memory(mid("missing"))
        with pytest.raises(ValueError):
            store.ensure_memory("")

    def test_compacting_the_episodic_index_keeps_what_searches_find(
        self, store: MemoryStore, mid: Callable[[str], str]
    ) -> None:
        for k in range(6):  # one write each: one more FTS5 segment, or GIN pending-list entries
            store.add_messages(mid("c"), [msg(f"c{k}", f"I played chess with friend {k}", T0 + k)])
        store.add_messages(mid("c2"), [msg("d1", "chess on sunday", T0)])
        before = [
            store.search_episodes(m, q) for m in (mid("c"), mid("c2")) for q in ("chess", "friend 3", "jazz")
        ]
        store.compact_episodes()
        store.compact_episodes()  # again: nothing left to fold
        after = [
            store.search_episodes(m, q) for m in (mid("c"), mid("c2")) for q in ("chess", "friend 3", "jazz")
        ]
        assert after == before and len(before[0].hits) == 6 and not before[2].hits

    def test_a_long_fact_is_stored_as_linked_pieces_and_exported_with_them(
        self, store: MemoryStore, mid: Callable[[str], str]
    ) -> None:
        from convmem_graph.store.transfer import export_memory, import_memory

        story = (
            "Ana spent the summer of 2024 restoring an old sailing boat with her grandfather in Porto. "
            "They replaced the mast, sewed new sails from canvas bought at the harbour market, and "
            "repainted the hull blue. On the last day of August they sailed it along the Douro river, "
            "and Ana says it was the proudest moment of her life."
        )
        pieces = store.add_long_fragment(mid("long"), story, category="event", now_ms=T0)
        assert len(pieces) == 2 and all(len(p.content) <= 200 for p in pieces)
        assert [(p.part_of, p.part) for p in pieces] == [(pieces[0].id, 0), (pieces[0].id, 1)]
        assert store.add_long_fragment(mid("long"), story, category="event", now_ms=T0 + 5) == pieces
        assert len(store.list_fragments(mid("long"))) == 2
        short = store.add_long_fragment(mid("long"), "Ana owns a sailing boat.", now_ms=T0)
        assert len(short) == 1 and (short[0].part_of, short[0].part) == (None, None)
        doc = export_memory(store, mid("long"))
        import_memory(store, doc, memory_id=mid("long-copy"))
        copied = {f.content: (f.part_of, f.part) for f in store.list_fragments(mid("long-copy"))}
        assert copied[pieces[1].content] == (pieces[0].id, 1)

    # -- messages -------------------------------------------------------------------------------
    def test_add_messages_is_idempotent(self, store: MemoryStore, mid: Callable[[str], str]) -> None:
        m = mid("idem")
        batch = [msg("b", "second", T0 + 2000), msg("a", "first", T0), msg("c", "third", T0 + 1000)]
        assert store.add_messages(m, batch) == ["b", "a", "c"]  # seq order = given order
        assert store.add_messages(m, batch) == []
        assert store.add_messages(m, [*batch, msg("d", "fourth", T0 + 3000)]) == ["d"]
        assert store.count_messages(m) == 4
        got = store.messages_after(m, 0)
        assert [x.id for _, x in got] == ["b", "a", "c", "d"]
        seqs = [s for s, _ in got]
        assert seqs == sorted(seqs) and store.max_seq(m) == seqs[-1]
        # Recent turns follow time, not arrival.
        assert [x.id for x in store.recent_messages(m, 3)] == ["c", "b", "d"]
        assert store.recent_messages(m, 0) == []

    def test_message_fields_round_trip(self, store: MemoryStore, mid: Callable[[str], str]) -> None:
        m = mid("fields")
        full = msg(
            "v1",
            "我对芒果过敏",
            T0,
            role="assistant",
            channel="voice",
            source="llm",
            turn_id=7,
            round_id="r-1",
            speaker_id="bot",
            interrupted=True,
            original="我对芒果过敏，所以……",
            metadata={"user": "10086", "nested": {"k": [1, "二"]}},
        )
        store.add_messages(m, [full, msg("v2", "plain", T0 + 1)])
        back = store.get_messages(m, ["v2", "v1", "nope"])
        assert [x.id for x in back] == ["v2", "v1"]
        assert back[1] == full.model_copy(update={"memory_id": m})
        assert back[0].metadata == {}
        with store.engine.connect() as conn:
            raw = conn.execute(
                select(messages.c.metadata).where(messages.c.memory_id == m, messages.c.id == "v2")
            )
            assert raw.scalar() is None  # empty metadata is SQL NULL, not '{}'

    def test_cross_channel_duplicates_are_skipped(
        self, store: MemoryStore, mid: Callable[[str], str]
    ) -> None:
        m = mid("dup")
        assert store.add_messages(m, [msg("im1", "我对芒果过敏。", T0)]) == ["im1"]
        # Same sentence from the voice channel 3 s later, with full-width punctuation and spaces.
        echo = msg("tr1", " 我对芒果过敏！", T0 + 3000, channel="voice", source="asr")
        assert store.add_messages(m, [echo]) == []
        # Outside the window it is a real repeat.
        late = msg("tr2", "我对芒果过敏", T0 + 20_000, channel="voice", source="asr")
        assert store.add_messages(m, [late]) == ["tr2"]
        # Same channel and source: a real repeat even inside the window.
        assert store.add_messages(m, [msg("im2", "我对芒果过敏", T0 + 1000)]) == ["im2"]
        # Another role is another message.
        assert store.add_messages(
            m, [msg("bot1", "我对芒果过敏", T0 + 500, role="assistant", channel="voice")]
        ) == ["bot1"]
        # Inside one batch as well, and the window is a parameter.
        batch = [
            msg("x1", "Hello World", T0 + 100_000),
            msg("x2", "hello, world", T0 + 104_000, channel="voice", source="asr"),
        ]
        assert store.add_messages(m, batch, dedupe_window_ms=5000) == ["x1"]
        # Punctuation-only text is never collapsed.
        assert store.add_messages(
            m, [msg("p1", "……", T0 + 200_000), msg("p2", "……", T0 + 200_001, channel="voice")]
        ) == ["p1", "p2"]
        with pytest.raises(ValueError):
            store.add_messages(m, [msg("n", "x")], dedupe_window_ms=-1)

    def test_partial_message_is_replaced_by_its_final_version(
        self, store: MemoryStore, mid: Callable[[str], str]
    ) -> None:
        m = mid("partial")
        store.add_messages(
            m, [msg("s1", "我最近", T0, role="assistant", partial=True), msg("o", "other", T0 + 1)]
        )
        first_seq = store.messages_after(m, 0)[0][0]
        final = msg("s1", "我最近在学做饭", T0, role="assistant")
        assert store.add_messages(m, [final]) == ["s1"]
        assert store.add_messages(m, [final]) == []
        assert store.add_messages(m, [msg("s1", "我最近", T0, role="assistant", partial=True)]) == []
        rows = store.messages_after(m, 0)
        assert [(x.id, x.content, x.partial) for _, x in rows] == [
            ("o", "other", False),
            ("s1", "我最近在学做饭", False),
        ]
        assert rows[-1][0] > first_seq  # a new seq: extraction sees the completed text

    def test_message_texts_after_answers_as_messages_after(
        self, store: MemoryStore, mid: Callable[[str], str]
    ) -> None:
        # summary_due counts the backlog's tokens from these: every cursor and page size, the
        # caller's own messages (a run's fresh ones, also where a run holds its insert's rows)
        # and a partial message replaced by its final text must read as messages_after's contents.
        m = mid("texts")
        store.add_messages(m, [msg(f"m{i}", f"文本 {i} text", T0 + i) for i in range(5)])
        store.add_messages(m, [msg("p", "我最近", T0 + 9, role="assistant", partial=True)])
        store.add_messages(m, [msg("p", "我最近在学做饭", T0 + 9, role="assistant")])

        def same(reader: Any, known: dict[str, Message] | None) -> None:
            seqs = [0] + [seq for seq, _ in reader.messages_after(m, 0)]
            for after in seqs:
                for limit in (1, 2, 3, 500):
                    got = reader.messages_after(m, after, limit=limit, known=known)
                    want = [(seq, x.content) for seq, x in got]
                    assert reader.message_texts_after(m, after, limit=limit, known=known) == want

        same(store, None)
        same(store, {})
        with store.run(m) as run:
            fresh = [msg("r1", "run one", T0 + 20), msg("r2", "运行二", T0 + 21)]
            ids = run.add_messages(m, fresh)
            assert ids == ["r1", "r2"]
            known = {x.id: x for x in fresh}
            same(run, known)
            # A held message is the caller's object: its content is what is counted.
            held = {"r1": fresh[0].model_copy(update={"content": "held"})}
            tail = run.message_texts_after(m, 0, known=held)
            assert [c for _, c in tail][-2:] == ["held", "运行二"]

    def test_cursor_pages_and_extracted_seq(self, store: MemoryStore, mid: Callable[[str], str]) -> None:
        m = mid("cursor")
        store.add_messages(m, [msg(f"m{i}", f"text {i}", T0 + i) for i in range(5)])
        page = store.messages_after(m, 0, limit=2)
        assert [x.id for _, x in page] == ["m0", "m1"]
        rest = store.messages_after(m, page[-1][0], limit=10)
        assert [x.id for _, x in rest] == ["m2", "m3", "m4"]
        assert store.messages_after(m, rest[-1][0]) == []
        assert store.extracted_seq(m) == 0
        store.commit_extraction(m, [], upto_seq=page[-1][0], now_ms=T0)
        assert store.extracted_seq(m) == page[-1][0]
        store.commit_extraction(m, [], upto_seq=1, now_ms=T0)  # never goes back
        assert store.extracted_seq(m) == page[-1][0]
        assert store.extracted_seq(mid("unknown")) == 0 and store.max_seq(mid("unknown")) == 0

    def test_messages_after_gives_the_callers_messages_and_rebuilds_the_rest(
        self, store: MemoryStore, mid: Callable[[str], str]
    ) -> None:
        # A run's fresh messages come back as the run's own objects (on SQLite after a read of
        # ids only); a row the caller does not hold is read and rebuilt in the same place.
        m = mid("known")
        batch = [msg(f"k{i}", f"text {i}", T0 + i, metadata={"n": i}) for i in range(5)]
        store.add_messages(m, batch)
        stored = store.messages_after(m, 0)
        known = {x.id: x for x in batch}
        every = store.messages_after(m, 0, known=known)
        assert [s for s, _ in every] == [s for s, _ in stored]
        assert all(x is known[x.id] for _, x in every)
        partial = {k: v for k, v in known.items() if k != "k2"}
        mixed = store.messages_after(m, 0, known=partial)
        assert [(s, x.id) for s, x in mixed] == [(s, x.id) for s, x in stored]
        assert [x is partial.get(x.id) for _, x in mixed] == [True, True, False, True, True]
        assert mixed[2][1] == stored[2][1] and mixed[2][1].metadata == {"n": 2}
        page = store.messages_after(m, stored[0][0], limit=2, known=known)
        assert [x.id for _, x in page] == ["k1", "k2"]

    def test_purge_keeps_recent_and_unprocessed(self, store: MemoryStore, mid: Callable[[str], str]) -> None:
        m = mid("purge")
        store.add_messages(m, [msg(f"m{i}", f"text {i}", T0 + i * 1000) for i in range(10)])
        seqs = [s for s, _ in store.messages_after(m, 0)]
        assert store.purge_messages(m, before_ms=T0 + 100_000, keep_recent=2) == 0  # nothing processed yet
        store.commit_extraction(m, [], upto_seq=seqs[7], now_ms=T0)
        store.commit_summary(m, "s", tokens=1, covers_until_ms=T0, upto_seq=seqs[5], now_ms=T0)
        assert store.purge_messages(m, before_ms=T0 + 100_000, keep_recent=2) == 6  # m0..m5
        assert [x.id for _, x in store.messages_after(m, 0)] == ["m6", "m7", "m8", "m9"]
        assert store.purge_messages(m, before_ms=T0 + 100_000, keep_recent=2, only_processed=False) == 2
        assert [x.id for x in store.recent_messages(m, 10)] == ["m8", "m9"]

    # -- fragments ------------------------------------------------------------------------------
    def test_extraction_ops_supersede_chain_and_audit(
        self, store: MemoryStore, mid: Callable[[str], str]
    ) -> None:
        m = mid("frag")
        first = [
            op("add", "User lives in Beijing", "profile:city", ["m1"]),
            op("add", "User likes tea", "pref:tea"),
        ]
        assert store.commit_extraction(m, first, upto_seq=1, now_ms=T0) == {
            "add": 2,
            "update": 0,
            "supersede": 0,
            "noop": 0,
        }
        beijing = next(f for f in store.list_fragments(m) if f.key == "profile:city")
        assert beijing.source_message_ids == ["m1"] and beijing.origin == "extracted"
        audit_count = len(store.list_audit(m, limit=1000))
        # Replaying the same step changes nothing and audits nothing.
        assert store.commit_extraction(m, first, upto_seq=1, now_ms=T0 + 5)["noop"] == 2
        assert len(store.list_audit(m, limit=1000)) == audit_count

        step2 = [op("supersede", "User lives in Hangzhou", "profile:city", ["m5"], target=beijing.id)]
        assert store.commit_extraction(m, step2, upto_seq=5, now_ms=T0 + 10)["supersede"] == 1
        hangzhou = next(f for f in store.list_fragments(m) if f.key == "profile:city")
        step3 = [op("supersede", "User lives in Shanghai", "profile:city", ["m9"], target=hangzhou.id)]
        store.commit_extraction(m, step3, upto_seq=9, now_ms=T0 + 20)
        assert store.commit_extraction(m, step3, upto_seq=9, now_ms=T0 + 30)["noop"] == 1

        every = {f.content: f for f in store.list_fragments(m, status=None)}
        shanghai = every["User lives in Shanghai"]
        assert every["User lives in Beijing"].status == "superseded"
        assert every["User lives in Beijing"].superseded_by == hangzhou.id
        assert every["User lives in Hangzhou"].superseded_by == shanghai.id
        assert shanghai.status == "active" and shanghai.source_message_ids == ["m9"]
        assert [f.content for f in store.list_fragments(m, status="superseded")] == [
            "User lives in Beijing",
            "User lives in Hangzhou",
        ]
        entries = store.list_audit(m, limit=1000)
        assert [(e.action, e.object_id) for e in entries[:2]] == [
            ("supersede", hangzhou.id),
            ("add", shanghai.id),
        ]
        assert entries[0].cause == f"superseded by fragment {shanghai.id}"
        assert entries[0].before == {"status": "active"}
        assert entries[0].after == {"status": "superseded", "superseded_by": shanghai.id}
        assert entries[1].cause.startswith("extracted from messages [m9]")

        # Moving back to Beijing revives the old fragment (same id) instead of duplicating it.
        back = [op("supersede", "User lives in Beijing", "profile:city", ["m20"], target=shanghai.id)]
        store.commit_extraction(m, back, upto_seq=20, now_ms=T0 + 40)
        active_city = [f for f in store.list_fragments(m) if f.key == "profile:city"]
        assert [(f.id, f.source_message_ids) for f in active_city] == [(beijing.id, ["m1", "m20"])]

    def test_update_and_noop_ops(self, store: MemoryStore, mid: Callable[[str], str]) -> None:
        m = mid("upd")
        store.commit_extraction(m, [op("add", "User runs", "habit:running", ["m1"])], upto_seq=1, now_ms=T0)
        target = store.list_fragments(m)[0]
        before_audit = len(store.list_audit(m))
        noop = [op("noop", "User runs", "habit:running", ["m2"], target=target.id)]
        assert store.commit_extraction(m, noop, upto_seq=2, now_ms=T0 + 1)["noop"] == 1
        assert store.get_fragment(m, target.id).source_message_ids == ["m1", "m2"]
        assert len(store.list_audit(m)) == before_audit  # merging provenance is not a change
        upd = [op("update", "User runs along West Lake", "habit:running", ["m3"], target=target.id)]
        assert store.commit_extraction(m, upd, upto_seq=3, now_ms=T0 + 2)["update"] == 1
        changed = store.get_fragment(m, target.id)
        assert (changed.content, changed.source_message_ids, changed.updated_at) == (
            "User runs along West Lake",
            ["m1", "m2", "m3"],
            T0 + 2,
        )
        last = store.list_audit(m)[0]
        assert (last.action, last.before, last.after) == (
            "update",
            {"content": "User runs"},
            {"content": "User runs along West Lake"},
        )
        assert store.commit_extraction(m, upd, upto_seq=3, now_ms=T0 + 3)["noop"] == 1
        # An update whose target is gone falls back to an add.
        orphan = [op("update", "User swims", "habit:swimming", ["m4"], target="fr_missing")]
        assert store.commit_extraction(m, orphan, upto_seq=4, now_ms=T0 + 4)["add"] == 1

    def test_commit_extraction_is_one_transaction(
        self, store: MemoryStore, mid: Callable[[str], str], monkeypatch: pytest.MonkeyPatch
    ) -> None:
        m = mid("atomic")
        store.add_messages(m, [msg("m1", "hi")])

        def boom(*_: Any, **__: Any) -> None:
            raise RuntimeError("disk full")

        monkeypatch.setattr("convmem_graph.store._fragments.write_audit", boom)
        with pytest.raises(RuntimeError, match="disk full"):
            store.commit_extraction(
                m, [op("add", "User likes tea", "pref:tea", ["m1"])], upto_seq=1, now_ms=T0
            )
        monkeypatch.setattr("convmem_graph.store._fragments.write_audit", audit_module.write_audit)
        assert store.list_fragments(m, status=None) == []
        assert store.extracted_seq(m) == 0
        assert store.list_audit(m) == []

    def test_manual_fragment_operations(self, store: MemoryStore, mid: Callable[[str], str]) -> None:
        m = mid("manual")
        f = store.add_fragment(m, "User is allergic to mango", category="health", now_ms=T0)
        assert (f.origin, f.status, f.category, f.created_at) == ("manual", "active", "health", T0)
        assert store.add_fragment(m, "User is allergic to mango", category="health") == f  # idempotent
        edited = store.update_fragment(m, f.id, content="User is allergic to mango and kiwi", now_ms=T0 + 1)
        assert edited.content == "User is allergic to mango and kiwi" and edited.id == f.id
        store.update_fragment(m, f.id, content="User is allergic to mango and kiwi")  # no change, no audit
        store.delete_fragment(m, f.id, now_ms=T0 + 2)
        store.delete_fragment(m, f.id, now_ms=T0 + 3)
        assert store.get_fragment(m, f.id).status == "deleted"
        assert store.list_fragments(m) == []
        assert [(e.action, e.cause) for e in store.list_audit(m)] == [
            ("delete", "deleted by hand"),
            ("update", "edited by hand"),
            ("add", "set by hand"),
        ]
        with pytest.raises(NotFoundError):
            store.get_fragment(m, "fr_nope")
        with pytest.raises(NotFoundError):
            store.update_fragment(m, "fr_nope", content="x")
        with pytest.raises(NotFoundError):
            store.delete_fragment(m, "fr_nope")
        api = store.add_fragment(m, "User has a cat", origin="api", key="pet:cat")
        assert api.origin == "api" and store.list_audit(m)[0].cause == "added through the API"

    def test_list_fragments_filters_and_pages(self, store: MemoryStore, mid: Callable[[str], str]) -> None:
        m = mid("list")
        for i in range(5):
            store.add_fragment(m, f"Fact {i}", key=f"k{i}", now_ms=T0 + i)
        store.add_fragment(
            m, "No spicy food this week", key="diet:spicy", transient=True, expires_at=T0 + 100
        )
        store.add_fragment(m, "Trying yoga", key="habit:yoga", transient=True, expires_at=T0 + 1000)
        assert len(store.list_fragments(m)) == 7
        live = store.list_fragments(m, include_expired=False, now_ms=T0 + 500)
        assert "No spicy food this week" not in {f.content for f in live} and len(live) == 6
        assert [f.content for f in store.list_fragments(m, limit=2, offset=1)] == ["Fact 1", "Fact 2"]
        store.delete_fragment(m, store.list_fragments(m)[0].id)
        assert len(store.list_fragments(m, status="deleted")) == 1
        assert len(store.list_fragments(m, status=None)) == 7

    # -- variables ------------------------------------------------------------------------------
    def test_specs_upsert_and_order(self, store: MemoryStore, mid: Callable[[str], str]) -> None:
        m = mid("specs")
        assert store.get_specs(m) == []
        store.define_variables(m, [VariableSpec(name="city"), VariableSpec(name="diet", infer=False)])
        store.define_variables(
            m, [VariableSpec(name="age", type="integer"), VariableSpec(name="city", description="x")]
        )
        specs = store.get_specs(m)
        assert [s.name for s in specs] == ["city", "diet", "age"]
        assert specs[0].description == "x" and specs[1].infer is False
        store.delete_spec(m, "diet")
        assert [s.name for s in store.get_specs(m)] == ["city", "age"]

    def test_manual_wins_over_inferred_and_clear_reveals_it(
        self, store: MemoryStore, mid: Callable[[str], str]
    ) -> None:
        m = mid("vars")
        assert store.commit_inferred_variables(
            m, {"city": VariableGuess(value="杭州", fragment_ids=["f1"])}, now_ms=T0
        )
        assert (
            store.commit_inferred_variables(
                m, {"city": VariableGuess(value="杭州", fragment_ids=["f1"])}, now_ms=T0
            )
            == []
        )
        audit_after_infer = len(store.list_audit(m))
        assert audit_after_infer == 1
        manual = store.set_manual_variable(m, "city", "上海", now_ms=T0 + 1)
        assert (manual.origin, manual.value) == ("manual", "上海")
        assert store.set_manual_variable(m, "city", "上海") == manual  # unchanged: no audit
        # Inference keeps running underneath and never overwrites the manual value.
        assert store.commit_inferred_variables(
            m, {"city": VariableGuess(value="成都", fragment_ids=["f2"])}, now_ms=T0 + 2
        ) == ["city"]
        assert store.get_variables(m)["city"].value == "上海"
        store.clear_manual_variable(m, "city", now_ms=T0 + 3)
        store.clear_manual_variable(m, "city", now_ms=T0 + 4)  # nothing to clear: no audit
        effective = store.get_variables(m)["city"]
        assert (effective.value, effective.origin, effective.fragment_ids) == ("成都", "inferred", ["f2"])
        assert [e.action for e in store.list_audit(m)] == ["clear_manual", "infer", "set_manual", "infer"]
        cleared = store.list_audit(m)[0]
        assert cleared.before == {"value": "上海", "origin": "manual", "fragment_ids": []}
        assert cleared.after == {"value": "成都", "origin": "inferred", "fragment_ids": ["f2"]}
        # A new supporting fragment list alone is stored silently.
        assert (
            store.commit_inferred_variables(
                m, {"city": VariableGuess(value="成都", fragment_ids=["f3"])}, now_ms=T0 + 5
            )
            == []
        )
        assert store.get_variables(m)["city"].fragment_ids == ["f3"]
        assert len(store.list_audit(m)) == 4

    def test_manual_values_follow_the_spec(self, store: MemoryStore, mid: Callable[[str], str]) -> None:
        m = mid("typed")
        store.define_variables(
            m,
            [
                VariableSpec(name="birth_year", type="integer"),
                VariableSpec(name="diet", allowed_values=["vegetarian", "omnivore"]),
                VariableSpec(name="hobbies", type="list"),
            ],
        )
        assert store.set_manual_variable(m, "birth_year", 1996).value == 1996
        assert store.set_manual_variable(m, "hobbies", ["running", "猫"]).value == ["running", "猫"]
        with pytest.raises(ValueError, match="integer"):
            store.set_manual_variable(m, "birth_year", "1996")
        with pytest.raises(ValueError, match="allowed"):
            store.set_manual_variable(m, "diet", "carnivore")
        with pytest.raises(ValueError, match="must match"):
            store.set_manual_variable(m, "bad name", "x")
        assert store.get_variables(m)["hobbies"].value == ["running", "猫"]

    # -- summary, snapshot, dead letters ----------------------------------------------------------
    def test_summary_versions_and_cursor(self, store: MemoryStore, mid: Callable[[str], str]) -> None:
        m = mid("sum")
        assert store.get_summary(m) is None and store.summarized_seq(m) == 0
        s1 = store.commit_summary(
            m, "User lives in Hangzhou.", tokens=6, covers_until_ms=T0, upto_seq=4, now_ms=T0
        )
        assert (s1.version, store.summarized_seq(m)) == (1, 4)
        s2 = store.commit_summary(
            m, "User lives in Hangzhou; runs.", tokens=8, covers_until_ms=T0 + 9, upto_seq=9, now_ms=T0 + 1
        )
        assert s2.version == 2
        s3 = store.commit_summary(
            m, "User lives in Hangzhou; runs.", tokens=8, covers_until_ms=T0 + 5, upto_seq=3, now_ms=T0 + 2
        )
        assert (s3.version, s3.covers_until_ms, store.summarized_seq(m)) == (2, T0 + 9, 9)
        assert store.get_summary(m) == Summary(
            text="User lives in Hangzhou; runs.",
            tokens=8,
            covers_until_ms=T0 + 9,
            version=2,
            updated_at=T0 + 2,
        )

    def test_snapshot_round_trip_and_invalidation(
        self, store: MemoryStore, mid: Callable[[str], str]
    ) -> None:
        m = mid("snap")
        store.add_messages(m, [msg("m1", "我叫林晓", T0, metadata={"k": "v"})])
        store.set_manual_variable(m, "name", "林晓")
        snap = MemorySnapshot(
            memory_id=m,
            variables=store.get_variables(m),
            specs={"name": VariableSpec(name="name")},
            fragments=[store.add_fragment(m, "User is called 林晓", key="profile:name")],
            summary=store.commit_summary(m, "林晓.", tokens=3, covers_until_ms=T0, upto_seq=1, now_ms=T0),
            recent=store.recent_messages(m, 10),
        )
        store.save_snapshot(m, snap, now_ms=T0)
        assert store.load_snapshot(m) == snap
        store.save_snapshot(m, snap, now_ms=T0 + 1)  # replaced, still one row
        assert rows_per_table(store, m)["cm_snapshots"] == 1
        # Any change drops the cached snapshot: a stale memory is never served.
        store.set_manual_variable(m, "name", "小林")
        assert store.load_snapshot(m) is None
        store.save_snapshot(m, snap, now_ms=T0 + 2)
        store.add_messages(m, [msg("m1", "我叫林晓", T0)])  # nothing new: cache kept
        assert store.load_snapshot(m) == snap
        store.add_messages(m, [msg("m2", "new", T0 + 5)])
        assert store.load_snapshot(m) is None
        with pytest.raises(ValueError, match="cannot be saved"):
            store.save_snapshot(mid("other"), snap, now_ms=T0)
        assert store.load_snapshot(mid("never")) is None

    def test_dead_letters_are_idempotent(self, store: MemoryStore, mid: Callable[[str], str]) -> None:
        m = mid("dead")
        raw = '{"MsgBody": [}' + m
        assert store.add_dead_letter(m, source="tencent_im", raw=raw, error="bad json", path="MsgList[3]")
        assert not store.add_dead_letter(m, source="tencent_im", raw=raw, error="bad json again")
        assert store.add_dead_letter(None, source="trtc", raw=raw, error="no memory")
        assert store.add_dead_letter(mid("other"), source="trtc", raw=raw, error="x")
        mine = store.list_dead_letters(m)
        assert [(d.source, d.raw, d.error, d.path, d.memory_id) for d in mine] == [
            ("tencent_im", raw, "bad json", "MsgList[3]", m)
        ]
        everything = [d for d in store.list_dead_letters(limit=10_000) if d.raw == raw]
        assert len(everything) == 3 and everything[0].memory_id == mid("other")  # newest first

    # -- deletion and isolation -------------------------------------------------------------------
    def _populate(self, store: MemoryStore, saver: BaseCheckpointSaver[Any], m: str) -> None:
        store.add_messages(
            m,
            [msg("m1", "I live in Hangzhou"), msg("m2", "I have a cat", T0 + 1)],
            interruptions=[("task-1", "round-1")],  # a TRTC interruption mark (cm_round_interruptions)
        )
        store.commit_extraction(
            m, [op("add", "User lives in Hangzhou", "profile:city", ["m1"])], upto_seq=1, now_ms=T0
        )
        store.define_variables(m, [VariableSpec(name="city")])
        store.commit_inferred_variables(m, {"city": VariableGuess(value="Hangzhou")}, now_ms=T0)
        store.set_manual_variable(m, "nickname", "Xiao")
        store.commit_summary(m, "Lives in Hangzhou.", tokens=4, covers_until_ms=T0, upto_seq=2, now_ms=T0)
        store.save_snapshot(m, MemorySnapshot(memory_id=m), now_ms=T0)
        store.add_dead_letter(m, source="agora", raw="{" + m, error="bad")
        app = build_counter_graph(saver)
        app.invoke({"fail": False}, cfg(m))

    def test_delete_memory_removes_every_row_and_checkpoints(
        self, store: MemoryStore, checkpointer: BaseCheckpointSaver[Any], mid: Callable[[str], str]
    ) -> None:
        a, b = mid("del-a"), mid("del-b")
        self._populate(store, checkpointer, a)
        self._populate(store, checkpointer, b)
        assert set(METADATA.tables) == {t.name for t in PER_MEMORY_TABLES}  # no table forgotten
        counts_a = rows_per_table(store, a)
        assert all(n > 0 for n in counts_a.values()), counts_a
        counts_b = rows_per_table(store, b)

        assert store.delete_memory(a, checkpointer=checkpointer) is True

        assert rows_per_table(store, a) == dict.fromkeys(counts_a, 0)
        assert rows_per_table(store, b) == counts_b
        assert list(checkpointer.list(cfg(a))) == []
        assert len(list(checkpointer.list(cfg(b)))) == 4
        with pytest.raises(MemoryNotFoundError):
            store.get_memory(a)
        assert store.delete_memory(a) is False

    @pytest.mark.parametrize("kind", ["wildcards", "quotes", "prefixes", "unicode"])
    def test_isolation_between_tricky_ids(
        self, store: MemoryStore, mid: Callable[[str], str], kind: str
    ) -> None:
        suffix = mid("")
        ids = {
            "wildcards": ["%", "_", "%%", "a%", "a_"],
            "quotes": ["a'b", 'a"b', "a\\b", "a;b--", "a b"],
            "prefixes": ["a", "ab", "abc", "A", "a "],
            "unicode": ["记忆", "记忆2", "ﬁ", "fi", "🙂"],
        }[kind]
        ids = [i + suffix for i in ids] if kind != "prefixes" else [suffix + i for i in ids]
        for n, memory_id in enumerate(ids):
            store.add_messages(
                memory_id, [msg("same-id", f"text of {n}", T0), msg(f"own-{n}", f"only {n}", T0 + 1)]
            )
            store.add_fragment(memory_id, f"Fact of {n}", key="k")
            store.set_manual_variable(memory_id, "v", str(n))
            store.commit_summary(
                memory_id, f"summary {n}", tokens=2, covers_until_ms=T0, upto_seq=0, now_ms=T0
            )
        for n, memory_id in enumerate(ids):
            assert [x.content for _, x in store.messages_after(memory_id, 0)] == [f"text of {n}", f"only {n}"]
            assert {x.id for x in store.get_messages(memory_id, [f"own-{k}" for k in range(len(ids))])} == {
                f"own-{n}"
            }
            assert [f.content for f in store.list_fragments(memory_id)] == [f"Fact of {n}"]
            assert store.get_variables(memory_id)["v"].value == str(n)
            summary = store.get_summary(memory_id)
            assert summary is not None and summary.text == f"summary {n}"
            assert store.count_messages(memory_id) == 2
            info = store.get_memory(memory_id)
            assert (info.message_count, info.fragment_count) == (2, 1)
            other = ids[(n + 1) % len(ids)]
            fid = store.list_fragments(other)[0].id
            with pytest.raises(NotFoundError):
                store.get_fragment(memory_id, fid)
            with pytest.raises(NotFoundError):
                store.delete_fragment(memory_id, fid)
        store.delete_memory(ids[0])
        for memory_id in ids[1:]:
            assert store.count_messages(memory_id) == 2

    # -- serialization --------------------------------------------------------------------------
    def test_lock_blocks_same_memory_but_not_others(
        self, store: MemoryStore, mid: Callable[[str], str]
    ) -> None:
        a, b = mid("lock-a"), mid("lock-b")
        holding, release = threading.Event(), threading.Event()
        entered: dict[str, float] = {}

        def holder() -> None:
            with store.run(a):
                holding.set()
                release.wait(10)

        def contender(name: str, memory_id: str) -> None:
            with store.run(memory_id):
                entered[name] = time.monotonic()

        threads = [threading.Thread(target=holder)]
        threads[0].start()
        assert holding.wait(10)
        same = threading.Thread(target=contender, args=("same", a))
        other = threading.Thread(target=contender, args=("other", b))
        same.start()
        other.start()
        other.join(10)
        assert "other" in entered  # a different memory is never blocked
        time.sleep(0.3)
        assert "same" not in entered  # the same memory waits
        released_at = time.monotonic()
        release.set()
        same.join(10)
        threads[0].join(10)
        assert entered["same"] >= released_at

    def test_lock_is_reentrant(self, store: MemoryStore, mid: Callable[[str], str]) -> None:
        m = mid("reentrant")
        with store.run(m) as outer, store.run(m) as inner, outer.run(m) as joined:
            assert inner is outer and joined is outer  # one run of the memory, however entered
            inner.add_messages(m, [msg("x", "inside")])
        assert store.count_messages(m) == 1
        done = threading.Event()

        def after() -> None:
            with store.memory_lock(m):  # the earlier name of run()
                done.set()

        t = threading.Thread(target=after)
        t.start()
        t.join(10)
        assert done.is_set()  # fully released after nested use

    # -- one connection per session --------------------------------------------------------------
    def test_session_checks_out_one_connection(self, store: MemoryStore, mid: Callable[[str], str]) -> None:
        m = mid("pinned")
        checkouts: list[int] = []
        listener = lambda *_: checkouts.append(1)  # noqa: E731
        event.listen(store.engine, "checkout", listener)
        try:
            with store.session() as s:
                s.add_messages(m, [msg("a", "I live in Lyon")])
                with s.session() as nested:  # nested: the outer connection
                    assert nested is s
                    assert [x.id for _, x in nested.messages_after(m, 0)] == ["a"]
                s.commit_summary(m, "Lives in Lyon.", tokens=4, covers_until_ms=T0, upto_seq=1, now_ms=T0)
                assert s.get_summary(m) is not None
                assert s.cursors(m).summarized_seq == 1
        finally:
            event.remove(store.engine, "checkout", listener)
        assert len(checkouts) == 1
        assert store.count_messages(m) == 1  # and unpinned calls still work afterwards

    def test_failed_write_in_a_pinned_block_is_rolled_back_and_the_block_goes_on(
        self, store: MemoryStore, mid: Callable[[str], str]
    ) -> None:
        m = mid("pinfail")
        store.define_variables(m, [VariableSpec(name="age", type="integer")])
        with store.session() as s:
            s.add_messages(m, [msg("a", "hello")])
            with pytest.raises(ValueError):
                s.set_manual_variable(m, "age", "not a number")
            # Nothing of the failed transaction stays, and the connection takes further writes.
            assert s.get_variables(m) == {}
            s.set_manual_variable(m, "age", 41)
            s.add_messages(m, [msg("b", "bye")])
        assert store.get_variables(m)["age"].value == 41
        assert store.count_messages(m) == 2
        assert [e.action for e in store.list_audit(m)] == ["set_manual"]

    def test_store_calls_inside_a_transaction_join_it(
        self, store: MemoryStore, mid: Callable[[str], str]
    ) -> None:
        m = mid("txn")
        with pytest.raises(RuntimeError, match="planned"), store.session() as s, s.transaction(m):
            s.add_messages(m, [msg("a", "I live in Lyon")])
            s.set_manual_variable(m, "city", "Lyon")
            assert s.count_messages(m) == 1  # visible inside the transaction
            raise RuntimeError("planned")
        assert store.count_messages(m) == 0 and store.get_variables(m) == {}
        with store.session() as s, s.transaction(m):
            s.add_messages(m, [msg("a", "I live in Lyon")])
            s.set_manual_variable(m, "city", "Lyon")
        assert store.count_messages(m) == 1 and store.get_variables(m)["city"].value == "Lyon"

    def test_pinned_blocks_of_two_threads_do_not_share_a_connection(
        self, store: MemoryStore, mid: Callable[[str], str]
    ) -> None:
        errors: list[BaseException] = []
        start = threading.Barrier(2)

        def work(name: str) -> None:
            try:
                with store.session() as s:
                    start.wait(10)
                    for i in range(20):
                        s.add_messages(mid(name), [msg(f"{name}{i}", f"{name} says {i}", T0 + i)])
                        assert s.cursors(mid(name)).max_seq > 0
            except BaseException as exc:  # surfaced below
                errors.append(exc)

        threads = [threading.Thread(target=work, args=(n,)) for n in ("left", "right")]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert errors == []
        assert store.count_messages(mid("left")) == store.count_messages(mid("right")) == 20

    def test_the_object_decides_the_transaction_not_the_thread(
        self, store: MemoryStore, mid: Callable[[str], str]
    ) -> None:
        m, other = mid("scope"), mid("scope-other")
        store.ensure_memory(other)
        with pytest.raises(RuntimeError, match="planned"), store.session() as s, s.transaction(m):
            s.add_messages(m, [msg("a", "I live in Lyon")])
            # A call on the session from another thread joins the session's transaction ...
            worker = threading.Thread(target=lambda: s.add_messages(m, [msg("b", "I moved to Oslo")]))
            worker.start()
            worker.join(10)
            assert s.count_messages(m) == 2
            raise RuntimeError("planned")
        assert store.count_messages(m) == 0  # ... and is undone with it
        with store.run(other) as run:
            assert run is not store and store._scope is None
            # A call on the store itself inside the run is its own transaction, on a connection
            # of its own: visible to the run before the run ends.
            store.add_messages(m, [msg("c", "hello")])
            assert run.count_messages(m) == 1

    def test_a_run_view_cannot_be_built_directly(self, store: MemoryStore) -> None:
        with pytest.raises(TypeError, match="MemoryStore.session"):
            StoreRun(store.url)


class TestSqliteStore(StoreContract):
    @pytest.fixture(params=backends("unit"))
    def store(self, request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[MemoryStore]:
        s = open_backend(request.param, tmp_path)
        yield s
        s.close()

    @pytest.fixture
    def checkpointer(self, store: MemoryStore) -> Iterator[BaseCheckpointSaver[Any]]:
        if store.url == "sqlite://":
            yield InMemorySaver()
            return
        saver = sqlite_checkpointer(store.url)  # the same file, as in the default setup
        yield saver
        saver.conn.close()


# -- SQLite-only behaviour ------------------------------------------------------------------------
def test_from_url_defaults_and_masking(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    default = MemoryStore.from_url()
    assert default.url == f"sqlite:///{tmp_path / 'convmem.db'}" and default.dialect == "sqlite"
    default.close()
    assert (tmp_path / "convmem.db").exists()
    bare = MemoryStore.from_url("sub.db")
    assert bare.url == f"sqlite:///{tmp_path / 'sub.db'}"
    with bare.engine.connect() as conn:
        assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
        assert conn.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1
        assert conn.exec_driver_sql("PRAGMA synchronous").scalar() == 1  # NORMAL
        assert conn.exec_driver_sql("PRAGMA busy_timeout").scalar() == 30000
    bare.close()
    from convmem_graph.store import mask_url, normalize_url

    assert normalize_url("postgresql://u:s3cret@db:5432/app") == "postgresql+psycopg://u:s3cret@db:5432/app"
    assert normalize_url("postgres://u@db/app") == "postgresql+psycopg://u@db/app"
    assert mask_url("postgresql+psycopg://u:s3cret@db/app") == "postgresql+psycopg://u:***@db/app"
    with pytest.raises(ValueError, match="unsupported"):
        normalize_url("mysql://u@db/app")


def test_repr_uses_the_masked_url(tmp_path: Path) -> None:
    store = MemoryStore.from_url(str(tmp_path / "x.db"))
    assert repr(store) == f"MemoryStore('sqlite:///{tmp_path / 'x.db'}')"
    assert store.safe_url == store.url  # nothing to mask; PostgreSQL masking: tests/integration
    store.close()


def test_tables_are_created_once_and_reopen(tmp_path: Path) -> None:
    path = str(tmp_path / "re.db")
    first = MemoryStore.from_url(path)
    first.add_messages("m", [msg("a", "x")])
    first.close()
    again = MemoryStore.from_url(path)
    assert again.count_messages("m") == 1
    with again.engine.connect() as conn:
        names = {r[0] for r in conn.execute(text("SELECT name FROM sqlite_master WHERE type = 'table'"))}
    # The store's tables, the side tables of the layers above, the migration record, the snapshot
    # revisions' clock, plus the episodic index (an FTS5 table and its shadow tables); not the
    # optional tables (vectors, the server's, the IM pull's, Bailian's, dead letters): nothing
    # wrote to one (store._optional).
    ours = {t for t in names if t.startswith("cm_") and not t.startswith("cm_episode")}
    optional = {t.name for t in OPTIONAL_TABLES}
    assert (
        ours
        == (
            set(METADATA.tables)
            | {t.name for t in SIDE_TABLES}
            | {
                "cm_schema_migrations",
                "cm_snapshot_clock",
            }
        )
        - optional
    )
    assert {"cm_episodes", "cm_episode_meta"} <= names
    again.close()


def test_concurrent_writers_on_one_file_lose_nothing(tmp_path: Path) -> None:
    """Two store instances (separate connection pools), no memory lock, overlapping batches."""
    path = str(tmp_path / "conc.db")
    stores = [MemoryStore.from_url(path), MemoryStore.from_url(path)]
    errors: list[BaseException] = []
    start = threading.Barrier(2)

    def writer(store: MemoryStore, offset: int) -> None:
        try:
            start.wait(10)
            for r in range(10):
                lo = (r * 10 + offset) % 100
                store.add_messages(
                    "shared", [msg(f"m{i}", f"message {i}", T0 + i) for i in range(lo, lo + 20)]
                )
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(s, k * 5)) for k, s in enumerate(stores)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert errors == []
    ids = [x.id for _, x in stores[0].messages_after("shared", 0, limit=1000)]
    assert len(ids) == len(set(ids))
    # Writer 0 covers m0..m109 in windows of 20, writer 1 covers m5..m114.
    assert set(ids) == {f"m{i}" for i in range(115)}
    for s in stores:
        s.close()


def test_add_messages_bulk_uses_a_constant_number_of_statements(tmp_path: Path) -> None:
    """A 5,000-message batch is a few statements (chunked lookups, one executemany), not per-row trips."""
    store = MemoryStore.from_url(str(tmp_path / "bulk.db"))
    batch = [msg(f"m{i}", f"第{i}条 message {i}", T0 + i * 1000) for i in range(5000)]
    statements: list[str] = []
    listener = lambda _c, _cur, sql, *_: statements.append(sql)  # noqa: E731
    event.listen(store.engine, "before_cursor_execute", listener)
    assert len(store.add_messages("bulk", batch)) == 5000
    event.remove(store.engine, "before_cursor_execute", listener)
    assert store.count_messages("bulk") == 5000
    # BEGIN, memory row, 10 + 10 chunked lookups (500 ids/hashes each), one executemany, 2 touch,
    # and for the episodic index: the seq before, the new rows, one executemany into the index.
    assert len(statements) <= 29, statements
    assert sum("cm_episodes" in sql for sql in statements) == 1
    store.close()


def test_a_new_memorys_first_batch_makes_no_duplicate_lookups(tmp_path: Path) -> None:
    """A memory created by the write holds no message to compare with; duplicates in the batch still go."""
    store = MemoryStore.from_url(str(tmp_path / "new.db"))
    statements: list[str] = []
    listener = lambda _c, _cur, sql, *_: statements.append(sql)  # noqa: E731
    event.listen(store.engine, "before_cursor_execute", listener)
    first = [
        msg("a", "I moved to Hangzhou", T0),
        msg("a", "I moved to Hangzhou", T0),  # the same id twice
        msg("b", "i moved to hangzhou!", T0 + 1000, channel="voice"),  # mirrored by another channel
        msg("c", "I moved to Hangzhou", T0 + 2000),  # a real repeat on the same channel
    ]
    assert store.add_messages("fresh", first) == ["a", "c"]
    lookups = [s for s in statements if "FROM cm_messages WHERE" in s]
    assert lookups == []
    statements.clear()
    again = [msg("a", "I moved to Hangzhou", T0), msg("d", "new", T0 + 3000)]
    assert store.add_messages("fresh", again) == ["d"]
    assert len([s for s in statements if "FROM cm_messages WHERE" in s]) == 2  # ids, then content hashes
    event.remove(store.engine, "before_cursor_execute", listener)
    store.close()


def test_the_duplicate_lookup_reads_only_the_batchs_window(tmp_path: Path) -> None:
    """Earlier copies of a line said often are not read again; copies at the window's edges still count."""
    store = MemoryStore.from_url(str(tmp_path / "often.db"))
    window = 10_000
    # A line said every minute for a while (same channel: real repeats, all stored).
    old = [msg(f"o{k}", "好的", T0 + k * 60_000, role="assistant") for k in range(50)]
    assert len(store.add_messages("m", old, dedupe_window_ms=window)) == 50
    start = T0 + 100 * 60_000
    store.add_messages("m", [msg("edge1", "I moved", start - window, channel="voice")])
    store.add_messages("m", [msg("edge2", "I moved", start + 5_000 + window, channel="voice")])

    statements: list[tuple[str, Any]] = []
    listener = lambda _c, _cur, sql, params, *_: statements.append((sql, params))  # noqa: E731
    event.listen(store.engine, "before_cursor_execute", listener)
    batch = [
        msg("n1", "I moved", start),  # the voice copy window ms before: the same utterance
        msg("n2", "好的", start + 1_000, role="assistant"),
        msg("n3", "i moved!", start + 5_000),  # the voice copy window ms after: the same
    ]
    assert store.add_messages("m", batch, dedupe_window_ms=window) == ["n2"]
    event.remove(store.engine, "before_cursor_execute", listener)
    lookups = [(sql, params) for sql, params in statements if "content_hash IN" in sql]
    assert len(lookups) == 1
    sql, params = lookups[0]
    assert "timestamp_ms BETWEEN" in sql
    assert tuple(params[-2:]) == (start - window, start + 5_000 + window)
    with store.engine.connect() as conn:
        found = conn.exec_driver_sql(sql, tuple(params)).fetchall()
    # Run again after the insert: the new "好的" is in the span, none of the 50 earlier ones.
    assert {r[0] for r in found} == {"edge1", "edge2", "n2"}
    store.close()


def test_a_line_repeated_on_one_channel_still_meets_its_copy_from_another(tmp_path: Path) -> None:
    """In one batch: same-channel repeats are all kept; another channel's copy near any one of them goes."""
    store = MemoryStore.from_url(str(tmp_path / "groups.db"))
    batch = [msg(f"im{k}", "好的", T0 + k * 60_000, role="assistant") for k in range(5)]
    batch += [
        msg("v-near", "好的！", T0 + 3 * 60_000 + 2_000, role="assistant", channel="voice", source="asr"),
        msg("v-far", "好的", T0 + 30 * 60_000, role="assistant", channel="voice", source="asr"),
        msg("api-near", "好的", T0 + 4 * 60_000 - 1_000, role="assistant", channel="api", source="llm"),
    ]
    assert store.add_messages("m", batch, dedupe_window_ms=10_000) == [f"im{k}" for k in range(5)] + ["v-far"]
    # Stored copies take part the same way in the next batch.
    later = [
        msg("v2", "好的", T0 + 4 * 60_000 + 5_000, role="assistant", channel="voice", source="asr"),
        msg("im9", "好的", T0 + 4 * 60_000 + 6_000, role="assistant"),
    ]
    assert store.add_messages("m", later, dedupe_window_ms=10_000) == ["im9"]
    store.close()


def test_messages_after_on_sqlite_reads_ids_only_when_the_caller_holds_every_row(tmp_path: Path) -> None:
    """A replay's extraction batches (200 rows it just stored) skip reading and decoding the rows."""
    store = MemoryStore.from_url(str(tmp_path / "ids.db"))
    batch = [msg(f"m{i}", f"text {i}", T0 + i, metadata={"n": i}) for i in range(6)]
    store.add_messages("ids", batch)
    known = {m.id: m for m in batch}
    statements: list[str] = []
    listener = lambda _c, _cur, sql, *_: statements.append(sql)  # noqa: E731
    event.listen(store.engine, "before_cursor_execute", listener)
    covered = store.messages_after("ids", 0, limit=6, known=known)
    reads_covered = list(statements)
    statements.clear()
    uncovered = store.messages_after("ids", 0, limit=5, known={k: v for k, v in known.items() if k != "m3"})
    reads_uncovered = list(statements)
    statements.clear()
    store.messages_after("ids", 0, limit=6, known={"m0": batch[0]})  # fewer held than a page: one read
    few = list(statements)
    event.remove(store.engine, "before_cursor_execute", listener)
    assert [x.id for _, x in covered] == [f"m{i}" for i in range(6)]
    assert [x.id for _, x in uncovered] == [f"m{i}" for i in range(5)]
    assert len(reads_covered) == 1 and "content" not in reads_covered[0], reads_covered
    assert len(reads_uncovered) == 2 and "content" in reads_uncovered[1], reads_uncovered  # ids, rows
    assert len(few) == 1 and "content" in few[0], few
    store.close()
