"""Pooled PostgreSQL connections: a run is one transaction holding its memory's lock, never a session lock.

What is checked against the real server: a lifecycle run takes ``pg_advisory_xact_lock`` on its
own pooled store connection (the one its store writes and checkpoint writes go through) and the
lock is gone when the run commits, although that connection stays open in the pool; runs reuse
pooled connections (store and checkpointer); two processes running the lifecycle on one memory
never interleave; a failed run keeps what its completed steps stored, and a broken one keeps
nothing; pool sizes follow the environment.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.types.json import Jsonb
from sqlalchemy import event, text
from sqlalchemy.exc import DBAPIError

from convmem_graph.checkpoints import thread_id_for
from convmem_graph.checkpoints.postgres import _RUN_CONNECTION
from convmem_graph.errors import ConvMemError
from convmem_graph.extractors.heuristic import HeuristicExtractor
from convmem_graph.memory import ConvMemory
from convmem_graph.models import Message
from convmem_graph.store import MemoryStore
from convmem_graph.store.engine import advisory_key
from convmem_graph.store.postgres import int32_pair as _int32_pair
from convmem_graph.store.urls import libpq_url

pytestmark = [pytest.mark.integration, pytest.mark.postgres]


def _turn(i: int) -> list[dict[str, str]]:
    return [
        {"role": "user", "content": f"我喜欢第{i}种水果。"},
        {"role": "assistant", "content": f"好的，记住第{i}种了。"},
    ]


def _advisory_locks(url: str, pid: int) -> list[tuple[Any, ...]]:
    with psycopg.connect(libpq_url(url)) as conn:
        return conn.execute(
            "SELECT classid, objid, objsubid, granted FROM pg_locks WHERE locktype = 'advisory' AND pid = %s",
            (pid,),
        ).fetchall()


class _Probe(HeuristicExtractor):
    """Looks, from another session, at the locks of the run's connection while the run extracts."""

    def __init__(self, mem: ConvMemory, url: str) -> None:
        super().__init__()
        self.mem, self.url = mem, url
        self.seen: list[dict[str, Any]] = []

    def extract(self, *args: Any, **kwargs: Any) -> Any:
        binding = _RUN_CONNECTION.get()  # the run's connection, as the run's checkpoints see it
        assert binding is not None  # extraction runs inside the run's transaction
        conn = binding.connection
        pid = conn.info.backend_pid
        with psycopg.connect(libpq_url(self.url)) as other:
            state = other.execute(
                "SELECT state, xact_start IS NOT NULL FROM pg_stat_activity WHERE pid = %s", (pid,)
            ).fetchone()
        self.seen.append({"pid": pid, "locks": _advisory_locks(self.url, pid), "state": state})
        return super().extract(*args, **kwargs)


def test_a_run_holds_its_lock_in_its_own_transaction_and_releases_it_at_commit(pg_url: str) -> None:
    memory_id = f"xact-{uuid.uuid4().hex[:8]}"
    with ConvMemory.open(pg_url) as mem:
        probe = _Probe(mem, pg_url)
        mem.lifecycle.extractor = probe
        opened = {"store": 0}

        def on_connect(*_: Any) -> None:
            opened["store"] += 1

        mem.ingest(memory_id, _turn(0), source="openai")  # opens the pools and the checkpointer
        event.listen(mem.store.engine, "connect", on_connect)
        saver = mem.checkpointer
        requests_before = saver.conn.get_stats().get("requests_num", 0)  # type: ignore[union-attr]
        for i in range(1, 13):
            mem.ingest(memory_id, _turn(i), source="openai")
        # Twelve runs on the pooled connection(s) of before; none of the runs' checkpoint writes
        # used the checkpointer's own pool: they went through the run's transaction.
        assert opened["store"] == 0, opened
        assert saver.conn.get_stats().get("requests_num", 0) == requests_before  # type: ignore[union-attr]
        # During each run: exactly one advisory lock, granted, the memory's, held by the run's own
        # connection, which is inside a transaction.
        assert len(probe.seen) == 13
        hi, lo = _int32_pair(advisory_key(memory_id))
        for seen in probe.seen:
            assert seen["locks"] == [(hi & 0xFFFFFFFF, lo & 0xFFFFFFFF, 2, True)], seen
            assert seen["state"][1] is True, seen
        # After the runs the same backends are still open in the pool and hold nothing: the lock
        # was transaction-scoped (a session lock would outlive the commit).
        with mem.store.engine.connect() as conn:
            pid = conn.execute(text("SELECT pg_backend_pid()")).scalar()
        assert pid in {s["pid"] for s in probe.seen}
        for backend in {s["pid"] for s in probe.seen}:
            assert _advisory_locks(pg_url, backend) == []
        # The run's checkpoints were committed with it (pruned to keep_checkpoints).
        assert len(list(saver.list({"configurable": {"thread_id": thread_id_for(memory_id)}}))) == (
            mem.config.keep_checkpoints
        )
        assert len(mem.fragments(memory_id)) == 13
        mem.delete(memory_id)


class _FailingAfter(HeuristicExtractor):
    def extract(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("model down")


def test_a_failed_run_keeps_its_completed_steps_and_a_broken_one_keeps_nothing(pg_url: str) -> None:
    memory_id = f"fail-{uuid.uuid4().hex[:8]}"
    with ConvMemory.open(pg_url) as mem:
        mem.lifecycle.extractor = _FailingAfter()
        with pytest.raises(RuntimeError, match="model down"):
            mem.ingest(memory_id, _turn(1), source="openai")
        # normalize committed the messages before extract failed (as a per-step commit would).
        assert mem.store.count_messages(memory_id) == 2
        assert mem.store.cursors(memory_id).extracted_seq == 0
        mem.lifecycle.extractor = HeuristicExtractor()
        mem.ingest(memory_id, _turn(2), source="openai")  # resumes from the cursor
        cursors = mem.store.cursors(memory_id)
        assert cursors.extracted_seq == cursors.max_seq
        assert len(mem.fragments(memory_id)) == 2

        # A statement the server rejects fails the transaction: nothing of the block stays.
        store = mem.store
        stored = store.count_messages(memory_id)
        with pytest.raises(DBAPIError, match="division by zero"), store.run(memory_id) as run:
            run.add_messages(
                memory_id,
                [
                    Message(
                        id="late", role="user", content="x", channel="im", source="message", timestamp_ms=1
                    )
                ],
            )
            with run.transaction(memory_id) as conn:
                conn.execute(text("SELECT 1 / 0"))
        assert store.get_messages(memory_id, ["late"]) == []
        # A store call interrupted half-way (after its first statements) also undoes the block.
        with pytest.raises(RuntimeError, match="half-way"), store.run(memory_id) as run:
            run.add_messages(
                memory_id,
                [
                    Message(
                        id="late2", role="user", content="y", channel="im", source="message", timestamp_ms=2
                    )
                ],
            )
            with run.transaction(memory_id):
                run.ensure_memory("other-" + memory_id)
                raise RuntimeError("half-way")
        assert store.get_messages(memory_id, ["late2"]) == []
        assert store.count_messages(memory_id) == stored
        mem.delete(memory_id)


_WORKER = textwrap.dedent(
    """
    import json, sys, time
    from convmem_graph.extractors.heuristic import HeuristicExtractor
    from convmem_graph.memory import ConvMemory
    from convmem_graph.settings import ConvMemSettings

    url, memory_id, out = sys.argv[1], sys.argv[2], sys.argv[5]
    offset, start_at = int(sys.argv[3]), float(sys.argv[4])
    spans = []

    class Slow(HeuristicExtractor):
        def extract(self, *args, **kwargs):
            began = time.time()
            result = super().extract(*args, **kwargs)
            time.sleep(0.03)  # widen the critical section so overlap would show
            spans.append([began, time.time()])
            return result

    # An app's settings from CONVMEM_* (PgBouncer: CONVMEM_PG_PREPARE_THRESHOLD=none).
    mem = ConvMemory.open(url, extractor=Slow(), pools=ConvMemSettings().pools())
    mem.lifecycle.run(memory_id)  # opens the checkpointer before the race
    while time.time() < start_at:
        time.sleep(0.005)
    for i in range(offset, offset + 8):
        turn = [
            {"role": "user", "content": f"我喜欢第{i}种水果。"},
            {"role": "assistant", "content": f"好的，记住第{i}种了。"},
        ]
        mem.ingest(memory_id, turn, source="openai")
    mem.close()
    with open(out, "w") as fh:
        json.dump(spans, fh)
    """
)


def run_two_workers(url: str, memory_id: str, tmp_path: Path, env: dict[str, str] | None = None) -> list[Any]:
    """Run the lifecycle on one memory from two processes at once; return each one's extraction spans."""
    script = tmp_path / "worker.py"
    script.write_text(_WORKER, encoding="utf-8")
    start_at = time.time() + 6.0
    outs = [tmp_path / "w0.json", tmp_path / "w1.json"]
    procs = [
        subprocess.Popen(
            [sys.executable, str(script), url, memory_id, str(k * 100), str(start_at), str(out)], env=env
        )
        for k, out in enumerate(outs)
    ]
    for p in procs:
        assert p.wait(timeout=180) == 0
    return [json.loads(out.read_text()) for out in outs]


def memory_lock_holders(url: str, memory_id: str) -> list[tuple[Any, ...]]:
    """Backends holding or awaiting the memory's advisory lock (the two-int key the store uses)."""
    hi, lo = _int32_pair(advisory_key(memory_id))
    with psycopg.connect(libpq_url(url)) as conn:
        return conn.execute(
            "SELECT pid, granted FROM pg_locks WHERE locktype = 'advisory' AND objsubid = 2 "
            "AND classid = %s AND objid = %s",
            (hi & 0xFFFFFFFF, lo & 0xFFFFFFFF),
        ).fetchall()


def check_no_interleaving(url: str, memory_id: str, spans: list[Any]) -> None:
    """Extraction spans of the two workers never overlap; every turn's fact is stored exactly once."""
    for a_start, a_end in spans[0]:
        for b_start, b_end in spans[1]:
            assert a_end <= b_start or b_end <= a_start
    store = MemoryStore.from_url(url)
    try:
        facts = [f.content for f in store.list_fragments(memory_id)]
        assert len(facts) == len(set(facts)) == 16, facts
        assert store.count_messages(memory_id) == 32
        assert store.cursors(memory_id).extracted_seq == store.max_seq(memory_id)
    finally:
        store.close()


def test_two_processes_running_the_lifecycle_on_one_memory_never_interleave(
    pg_url: str, tmp_path: Path
) -> None:
    memory_id = f"procs-{uuid.uuid4().hex[:8]}"
    spans = run_two_workers(pg_url, memory_id, tmp_path)
    check_no_interleaving(pg_url, memory_id, spans)
    assert memory_lock_holders(pg_url, memory_id) == []


def test_pool_sizes_follow_the_settings(pg_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from convmem_graph.settings import ConvMemSettings

    monkeypatch.setenv("CONVMEM_PG_POOL_SIZE", "3")
    monkeypatch.setenv("CONVMEM_PG_MAX_OVERFLOW", "1")
    monkeypatch.setenv("CONVMEM_PG_CHECKPOINT_POOL_SIZE", "2")
    monkeypatch.setenv("CONVMEM_PG_PREPARE_THRESHOLD", "none")
    with ConvMemory.open(pg_url, pools=ConvMemSettings().pools()) as mem:
        mem.ingest(f"env-{uuid.uuid4().hex[:8]}", _turn(0), source="openai")
        pool: Any = mem.store.engine.pool
        assert (pool.size(), pool._max_overflow) == (3, 1)
        saver: Any = mem.checkpointer
        assert saver.conn.max_size == 2
        with mem.store.engine.connect() as conn:
            assert conn.connection.driver_connection.prepare_threshold is None  # type: ignore[union-attr]
        with saver.conn.connection() as raw:
            assert raw.prepare_threshold is None


def _recorded(store: MemoryStore) -> list[str]:
    """The SQL of every statement the store's engine runs from now on, in order."""
    statements: list[str] = []
    event.listen(store.engine, "before_cursor_execute", lambda _c, _k, sql, *_: statements.append(sql))
    return statements


def test_reads_inside_a_run_are_cached_until_the_run_writes_them(pg_url: str) -> None:
    from convmem_graph.models import VariableGuess, VariableSpec

    memory_id = f"cache-{uuid.uuid4().hex[:8]}"
    store = MemoryStore.from_url(pg_url)
    statements = _recorded(store)
    try:
        store.define_variables(memory_id, [VariableSpec(name="city")])
        with store.run(memory_id) as run:
            assert [s.name for s in run.get_specs(memory_id)] == ["city"]
            assert run.get_variables(memory_id) == {} and run.get_summary(memory_id) is None
            before = len(statements)
            run.get_specs(memory_id), run.get_variables(memory_id), run.get_summary(memory_id)
            assert len(statements) == before  # answered by the run's cache
            # The run's own writes drop what they change.
            run.define_variables(memory_id, [VariableSpec(name="city"), VariableSpec(name="pet")])
            assert [s.name for s in run.get_specs(memory_id)] == ["city", "pet"]
            run.commit_inferred_variables(memory_id, {"city": VariableGuess(value="Hangzhou")}, now_ms=1)
            assert run.get_variables(memory_id)["city"].value == "Hangzhou"
            run.commit_summary(
                memory_id, "lives in Hangzhou", tokens=3, covers_until_ms=1, upto_seq=0, now_ms=1
            )
            assert run.get_summary(memory_id).text == "lives in Hangzhou"  # type: ignore[union-attr]
            first = run.cursors(memory_id)
            before = len(statements)
            assert run.extracted_seq(memory_id) == first.extracted_seq and len(statements) == before
            message = Message(
                id="c1", role="user", content="hi", channel="im", source="message", timestamp_ms=5
            )
            run.add_messages(memory_id, [message])
            assert run.cursors(memory_id).max_seq > first.max_seq  # the insert dropped the cached cursors
        # Outside a run every read goes to the database.
        before = len(statements)
        store.get_specs(memory_id)
        store.get_specs(memory_id)
        assert len(statements) == before + 2
    finally:
        store.delete_memory(memory_id)
        store.close()


def test_a_runs_own_writes_leave_the_cursors_and_summary_they_stored_in_its_cache(pg_url: str) -> None:
    """After its insert, extraction, inferred variables and summary, a run reads them for free, and right."""
    from convmem_graph.models import FragmentCandidate, FragmentOp, VariableGuess
    from convmem_graph.store import _queries as Q
    from convmem_graph.store.repository import Cursors

    memory_id = f"kept-{uuid.uuid4().hex[:8]}"
    store = MemoryStore.from_url(pg_url)
    statements = _recorded(store)

    def stored() -> tuple[Cursors, Any]:
        conn = run.connection  # the run's own connection: its uncommitted rows, no cache involved
        row = conn.execute(Q.CURSORS, {"mid": memory_id}).first()
        summary = conn.execute(Q.SUMMARY, {"mid": memory_id}).first()
        return Cursors(int(row[0]), int(row[1]), int(row[2]), bool(row[3])), summary

    def free_and_true() -> Cursors:
        before = len(statements)
        cursors, summary = run.cursors(memory_id), run.get_summary(memory_id)
        assert len(statements) == before, statements[before:]
        truth, row = stored()
        assert cursors == truth
        assert (summary.text, summary.version) == (row.text, row.version) if row else summary is None
        return cursors

    try:
        with store.run(memory_id) as run:
            assert run.get_summary(memory_id) is None
            turns = [
                Message(id=f"k{i}", role="user", content=f"I keep a red kayak {i}", channel="im",
                        source="message", timestamp_ms=10 + i)
                for i in range(3)
            ]  # fmt: skip
            run.add_messages(memory_id, turns)
            first = free_and_true()
            assert (first.extracted_seq, first.facts_dirty) == (0, False)
            op = FragmentOp(
                op="add", candidate=FragmentCandidate(content="Owns a red kayak.", key="pet:kayak")
            )
            run.commit_extraction(memory_id, [op], upto_seq=first.max_seq, now_ms=20)
            assert free_and_true().extracted_seq == first.max_seq and stored()[0].facts_dirty
            run.commit_inferred_variables(memory_id, {"city": VariableGuess(value="Hangzhou")}, now_ms=21)
            assert free_and_true().facts_dirty is False
            for version, text_ in (
                (1, "keeps a red kayak"),
                (1, "keeps a red kayak"),
                (2, "paddles a kayak"),
            ):
                run.commit_summary(
                    memory_id, text_, tokens=4, covers_until_ms=12, upto_seq=first.max_seq, now_ms=22
                )
                assert free_and_true().summarized_seq == first.max_seq
                assert run.get_summary(memory_id).version == version  # type: ignore[union-attr]
        again = MemoryStore.from_url(pg_url)  # committed: another store reads the same
        assert again.cursors(memory_id) == store.cursors(memory_id)
        assert again.get_summary(memory_id).text == "paddles a kayak"  # type: ignore[union-attr]
        again.close()
    finally:
        store.delete_memory(memory_id)
        store.close()


def test_a_run_reads_the_messages_it_stored_past_a_cursor_without_a_round_trip(pg_url: str) -> None:
    memory_id = f"tail-{uuid.uuid4().hex[:8]}"
    store = MemoryStore.from_url(pg_url)
    statements = _recorded(store)

    def turn(i: int) -> Message:
        return Message(
            id=f"t{i}", role="user", content=f"turn {i}", channel="im", source="message", timestamp_ms=i
        )

    def stored_after(after: int, limit: int) -> list[tuple[int, str]]:
        rows = run.connection.execute(text(
            "SELECT seq, id FROM cm_messages WHERE memory_id = :m AND seq > :a ORDER BY seq LIMIT :n"
        ), {"m": memory_id, "a": after, "n": limit})  # fmt: skip
        return [(int(seq), str(mid)) for seq, mid in rows]

    def read(after: int, limit: int, known: dict[str, Message]) -> tuple[list[tuple[int, str]], int]:
        before = len(statements)
        got = run.messages_after(memory_id, after, limit=limit, known=known)
        assert all(m is known[m.id] for _, m in got if m.id in known)
        return [(seq, m.id) for seq, m in got], len(statements) - before

    try:
        store.add_messages(memory_id, [turn(0), turn(1)])  # before the run: not the run's own
        with store.run(memory_id) as run:
            previous = run.cursors(memory_id).max_seq
            fresh = {m.id: m for m in (turn(i) for i in range(2, 7))}
            run.add_messages(memory_id, list(fresh.values()))
            for after, limit in ((previous, 100), (previous, 2), (stored_after(previous, 3)[-1][0], 100)):
                got, trips = read(after, limit, fresh)
                assert (got, trips) == (stored_after(after, limit), 0)
            got, trips = read(0, 100, fresh)  # reaches back before the run's rows: the database answers
            assert got == stored_after(0, 100) and trips == 1 and len(got) == 7
            run.commit_extraction(memory_id, [], upto_seq=previous + 1, now_ms=9)  # leaves messages alone
            assert read(previous, 100, fresh) == (stored_after(previous, 100), 0)
            run.purge_messages(memory_id, before_ms=4, keep_recent=0, only_processed=False)
            got, trips = read(previous, 100, fresh)  # a delete forgets what the insert answered
            assert got == stored_after(previous, 100) and trips == 1
    finally:
        store.delete_memory(memory_id)
        store.close()


def test_pruning_in_one_statement_refuses_delta_channel_threads(pg_url: str) -> None:
    from convmem_graph.checkpoints import postgres_checkpointer, prune_checkpoints
    from tests.unit.checkpoints.test_checkpoints import build_counter_graph, cfg, checkpoint_ids

    saver = postgres_checkpointer(pg_url)
    thread = f"delta-{uuid.uuid4().hex[:8]}"
    try:
        app = build_counter_graph(saver)
        for _ in range(2):
            app.invoke({"fail": False}, cfg(thread))
        with psycopg.connect(libpq_url(pg_url), autocommit=True) as conn:
            conn.execute(
                "UPDATE checkpoints SET metadata = %s::jsonb WHERE thread_id = %s",
                ('{"counters_since_delta_snapshot": {"ids": 1}}', thread),
            )
        with pytest.raises(NotImplementedError, match="DeltaChannel"):
            prune_checkpoints(saver, thread, keep=1)
        assert len(checkpoint_ids(saver, thread)) == 8  # nothing deleted
    finally:
        saver.delete_thread(thread)
        saver.conn.close()  # type: ignore[union-attr]


def test_a_new_threads_first_run_skips_pruning_and_blobs_go_in_one_statement(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from langgraph.checkpoint.postgres.base import BasePostgresSaver

    from convmem_graph.checkpoints import postgres as P

    # The statements rewritten are LangGraph's own, word for word; another version goes unchanged.
    assert P._BLOB_UPSERT == BasePostgresSaver.UPSERT_CHECKPOINT_BLOBS_SQL
    assert P._CHECKPOINT_UPSERT == BasePostgresSaver.UPSERT_CHECKPOINTS_SQL
    sent: list[str] = []
    for name in ("execute", "executemany"):
        original = getattr(psycopg.Cursor, name)

        def recording(self: Any, query: Any, *args: Any, _original: Any = original, **kwargs: Any) -> Any:
            sent.append(" ".join(str(query).split()))
            return _original(self, query, *args, **kwargs)

        monkeypatch.setattr(psycopg.Cursor, name, recording)
    memory_id = f"prune-{uuid.uuid4().hex[:8]}"
    thread = {"configurable": {"thread_id": thread_id_for(memory_id)}}
    with ConvMemory.open(pg_url) as mem:
        keep = mem.config.keep_checkpoints
        states = []
        for i in range(keep + 2):
            sent.clear()
            mem.ingest(memory_id, _turn(i), source="openai")
            pruned = [q for q in sent if "row_number() OVER" in q]
            assert len(pruned) == (0 if i == 0 else 1), i  # the first run began the thread
            blobs = [q for q in sent if "INSERT INTO checkpoint_blobs" in q]
            assert len(blobs) == 1 and "unnest(" in blobs[0]  # not one statement per channel
            # ... and the checkpoint row goes in that same statement (one round trip for both).
            assert blobs[0].startswith("WITH blobs AS (") and "INSERT INTO checkpoints" in blobs[0]
            assert not [q for q in sent if q.startswith("INSERT INTO checkpoints")]
            saved = list(mem.checkpointer.list(thread))  # type: ignore[union-attr]
            assert len(saved) == min(i + 1, keep)
            states.append(saved[0].checkpoint["channel_values"])
        # The blobs written in one statement read back as the channels the run ended with.
        assert states[-1]["memory_id"] == memory_id and states[-1]["new_messages"] == 2
        assert mem.checkpointer.get_tuple(thread).checkpoint["channel_values"] == states[-1]  # type: ignore[union-attr]
        mem.delete(memory_id)


def test_the_run_cursor_is_the_cursor_but_for_the_blob_upsert(pg_url: str) -> None:
    from convmem_graph.checkpoints.postgres import _BLOB_UPSERT, _RunCursor

    with psycopg.connect(libpq_url(pg_url)) as conn:
        conn.execute(
            "CREATE TEMP TABLE checkpoint_blobs (thread_id text, checkpoint_ns text, channel text, "
            "version text, type text, blob bytea, PRIMARY KEY (thread_id, checkpoint_ns, channel, version))"
        )
        with conn.cursor() as raw:
            cur = _RunCursor(raw)
            cur.execute("SELECT generate_series(1, 3)")
            assert [row[0] for row in cur] == [1, 2, 3]  # iterated like the cursor it wraps
            rows = [("t", "", "a", "1", "msgpack", b"\x01"), ("t", "", "b", "1", "empty", None)]
            cur.executemany(_BLOB_UPSERT, rows)
            cur.executemany(_BLOB_UPSERT, rows)  # ON CONFLICT DO NOTHING, as LangGraph's
            cur.executemany("INSERT INTO checkpoint_blobs (thread_id, checkpoint_ns, channel, version) "
                            "VALUES (%s, %s, %s, %s)", [("t", "", "c", "1")])  # fmt: skip
            cur.execute("SELECT channel, type, blob FROM checkpoint_blobs ORDER BY channel")
            assert cur.fetchall() == [("a", "msgpack", b"\x01"), ("b", "empty", None), ("c", None, None)]


def test_the_run_cursor_sends_held_blobs_with_their_checkpoint_or_before_anything_else(pg_url: str) -> None:
    from convmem_graph.checkpoints.postgres import _BLOB_UPSERT, _CHECKPOINT_UPSERT, _RunCursor

    with psycopg.connect(libpq_url(pg_url)) as conn:
        conn.execute(
            "CREATE TEMP TABLE checkpoint_blobs (thread_id text, checkpoint_ns text, channel text, "
            "version text, type text, blob bytea, PRIMARY KEY (thread_id, checkpoint_ns, channel, version))"
        )
        conn.execute(
            "CREATE TEMP TABLE checkpoints (thread_id text, checkpoint_ns text, checkpoint_id text, "
            "parent_checkpoint_id text, checkpoint jsonb, metadata jsonb, "
            "PRIMARY KEY (thread_id, checkpoint_ns, checkpoint_id))"
        )
        with conn.cursor() as raw:
            cur = _RunCursor(raw)
            cur.executemany(_BLOB_UPSERT, [("t", "", "a", "1", "msgpack", b"\x01")])
            cur.execute(_CHECKPOINT_UPSERT, ("t", "", "c1", None, Jsonb({"v": 1}), Jsonb({})))
            # A held upsert goes first when anything but its checkpoint follows.
            cur.executemany(_BLOB_UPSERT, [("t", "", "b", "2", "msgpack", b"\x02")])
            cur.execute("SELECT channel, version FROM checkpoint_blobs ORDER BY channel")
            assert cur.fetchall() == [("a", "1"), ("b", "2")]
            cur.executemany(_BLOB_UPSERT, [("t", "", "c", "3", "msgpack", b"\x03")])
            cur.flush()  # what the end of the saver's cursor block does
            cur.flush()  # nothing held: nothing sent
            cur.execute("SELECT count(*) FROM checkpoint_blobs")
            assert cur.fetchone() == (3,)
            cur.execute("SELECT checkpoint_id, checkpoint FROM checkpoints")
            assert cur.fetchall() == [("c1", {"v": 1})]


def test_reads_leave_the_connections_prepared_statements_in_place(pg_url: str) -> None:
    # psycopg forgets what it prepared on a connection when that connection rolls back; a read
    # ending with ROLLBACK made the server parse and plan every statement again after it.
    with ConvMemory.open(pg_url) as mem:
        mem.ingest("m1", _turn(1), source="openai")
        store = mem.store
        with store.session() as session:
            assert session.load_snapshot("m1") is not None  # prepared at first use (threshold 0)
            session.recent_messages("m1", 5)  # a second read on the same connection
            with session.read() as conn:
                prepared = (
                    conn.exec_driver_sql("SELECT statement FROM pg_prepared_statements").scalars().all()
                )
            snapshot_reads = [q for q in prepared if "FROM cm_snapshots" in q and "pg_prepared" not in q]
            assert snapshot_reads, "the snapshot read's statement was deallocated by the reads after it"
        # A read that fails still ends its transaction (by rolling back): the connection is usable.
        with pytest.raises(DBAPIError), store.read() as conn:
            conn.exec_driver_sql("SELECT * FROM no_such_table")
        assert store.load_snapshot("m1") is not None


def test_a_write_of_the_held_memory_on_the_store_itself_fails_instead_of_waiting(pg_url: str) -> None:
    # The run's transaction holds the memory's advisory lock; a write on the store itself would
    # take it on another connection and wait for the run, which waits for the write: forever.
    memory_id = f"own-{uuid.uuid4().hex[:8]}"
    store = MemoryStore.from_url(pg_url)
    try:
        with store.run(memory_id) as run:
            run.ensure_memory(memory_id)
            with pytest.raises(ConvMemError, match="make the call on the run"):
                store.ensure_memory(memory_id)
            store.ensure_memory("other-" + memory_id)  # another memory: its own transaction, no wait
            run.add_messages(
                memory_id,
                [Message(id="a", role="user", content="hi", channel="im", source="message", timestamp_ms=1)],
            )
        assert store.count_messages(memory_id) == 1
    finally:
        store.delete_memory(memory_id)
        store.delete_memory("other-" + memory_id)
        store.close()
