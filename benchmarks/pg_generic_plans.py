"""PostgreSQL reads per statement under generic plans, on a table skewed to one big memory (issue 24).

psycopg prepares the store's statements, and PostgreSQL plans a prepared statement generically
(for any parameter value) after five custom plans. When the table's statistics say one memory holds
most messages, a generic plan for ``memory_id = $1 ... ORDER BY seq`` may walk the primary key
backwards and filter by memory: for a memory whose rows are not among the newest (a new one, or one
whose last message is old) that reads every newer row of the table. This harness makes that case
certain and measures it:

- a schema holding one memory of ``--big`` messages (filled by one ``INSERT ... SELECT``, its
  cursors moved past them) and small memories written earlier (their last messages older than every
  big-memory row), ``ANALYZE``d;
- the store's connections run with ``plan_cache_mode = force_generic_plan`` (no waiting for the
  sixth execution) and ``auto_explain`` (``log_analyze``, ``log_buffers``, at ``NOTICE`` level, so
  each statement's executed plan comes back to the client that ran it);
- a live turn (``ConvMemory.ingest`` of a user and an assistant message), the next call start
  (``ConvMemory.payload`` with a query: the snapshot and the episodic search) and a replay batch
  (``lifecycle.run`` of ``--batch`` messages without a WAL flush, as a replay worker runs it) for
  (a) a new memory, (b) a small memory written before the big one, (c) the big memory.

For each statement it prints the tuples its scans read (rows returned plus rows filtered out, times
loops) and the shared buffers it touched, the largest of each case, and lists every statement
reading more than ``--bound`` tuples for (a) or (b). ``--time N`` also times N live turns of (a)
and of (b) per round under the forced generic plan, with ``--baseline DIR`` the same turns with the
``convmem_graph`` of checkout DIR in a worker process, interleaved by round.

``--embeddings`` opens the memory with a deterministic fake embeddings model (every message of every
memory gets a vector; each live turn and replay batch is followed by ``embed_turns``, the
background worker's pass) and ``--purge`` with ``purge_summarized_messages=True`` (issue 24, H6).

Usage:
    python benchmarks/pg_generic_plans.py --postgres postgresql://postgres@127.0.0.1:5432/test
        [--big 100000] [--batch 200] [--smalls 370] [--embeddings] [--purge]
        [--time 30 --rounds 5 --baseline /work/wt4-base]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from langchain_core.embeddings import Embeddings

from benchmarks._pg import scratch_schema

#: Makes every plan of a prepared statement generic.
GENERIC = ("SET plan_cache_mode = force_generic_plan",)
#: Returns each executed statement's plan (with row counts and buffers) to the client as a notice.
EXPLAIN = (
    "LOAD 'auto_explain'",
    "SET auto_explain.log_min_duration = 0",
    "SET auto_explain.log_analyze = on",
    "SET auto_explain.log_buffers = on",
    "SET auto_explain.log_timing = off",
    "SET auto_explain.log_format = json",
    "SET auto_explain.log_level = notice",
    "SET auto_explain.log_nested_statements = on",
)
BASE_MS = 1_767_000_000_000
#: A call start's query: terms for the episodic index, and a date (its day's turns are searched too).
QUERY = "2025年12月29日我们聊过西湖和徒步吗？"


def set_on_connect(statements: tuple[str, ...], notice: Any = None) -> Callable[[], None]:
    """Run ``statements`` on every psycopg connection this process opens from now on (pools too).

    Session settings, committed before the connection is handed out. ``notice``: a handler added
    to each connection's notices. Returns the function that puts psycopg's ``connect`` back.
    """
    import psycopg

    original = psycopg.Connection.connect.__func__  # type: ignore[attr-defined]

    def connect(cls: Any, *args: Any, **kwargs: Any) -> Any:
        conn = original(cls, *args, **kwargs)
        for statement in statements:
            conn.execute(statement)
        if not conn.autocommit:
            conn.commit()
        if notice is not None:
            conn.add_notice_handler(notice)
        return conn

    saved = psycopg.Connection.__dict__["connect"], psycopg.connect

    def undo() -> None:
        psycopg.Connection.connect, psycopg.connect = saved  # type: ignore[method-assign]

    psycopg.Connection.connect = classmethod(connect)  # type: ignore[method-assign,assignment]
    psycopg.connect = psycopg.Connection.connect  # the module's alias (SQLAlchemy's dialect calls it)
    return undo


@dataclass
class StatementReads:
    """What one executed statement read, from its ``auto_explain`` plan."""

    text: str
    #: Tuples its scans produced or filtered out (times loops).
    tuples: int
    #: Shared buffers it hit or read (each plan node's own, summed).
    buffers: int
    #: The plan as ``auto_explain`` sent it.
    plan: dict[str, Any] = field(repr=False, default_factory=dict)


def _node_reads(node: dict[str, Any]) -> tuple[int, int]:
    """Tuples scanned and own buffers of a plan node and everything under it."""
    children = node.get("Plans", [])
    tuples = 0
    if "Relation Name" in node or "Index Name" in node:
        per_loop = (
            node.get("Actual Rows", 0)
            + node.get("Rows Removed by Filter", 0)
            + node.get("Rows Removed by Index Recheck", 0)
        )
        tuples = int(per_loop * max(1, node.get("Actual Loops", 1)))

    def shared(n: dict[str, Any]) -> int:
        return int(n.get("Shared Hit Blocks", 0) + n.get("Shared Read Blocks", 0))

    # A node's buffers include its children's; an unreferenced data-modifying CTE's do not
    # reach the top node: each node's own share, summed, counts both.
    own = max(0, shared(node) - sum(shared(c) for c in children))
    for child in children:
        t, b = _node_reads(child)
        tuples += t
        own += b
    return tuples, own


@dataclass
class PlanCapture:
    """Every plan ``auto_explain`` sends this process's psycopg connections while ``on``."""

    on: bool = False
    seen: list[StatementReads] = field(default_factory=list)

    def install(self, *, generic: bool = True) -> Callable[[], None]:
        """Receive every plan on each psycopg connection opened from now on (forced generic plans
        unless ``generic`` is false: then the server's own choice, custom plans first).

        Returns the function undoing it (for connections opened later).
        """
        return set_on_connect((GENERIC if generic else ()) + EXPLAIN, self._notice)

    @contextmanager
    def installed(self) -> Iterator[None]:
        """:meth:`install` for the connections opened inside the block."""
        undo = self.install()
        try:
            yield
        finally:
            undo()

    def _notice(self, diag: Any) -> None:
        message = diag.message_primary or ""
        if not self.on or "plan:" not in message:
            return
        plan = json.loads(message.split("plan:", 1)[1])
        tuples, buffers = _node_reads(plan["Plan"])
        self.seen.append(StatementReads(" ".join(plan.get("Query Text", "").split()), tuples, buffers, plan))

    @contextmanager
    def recording(self) -> Iterator[list[StatementReads]]:
        """Collect the plans of the statements run inside the block."""
        self.seen = []
        self.on = True
        try:
            yield self.seen
        finally:
            self.on = False


def live_turn(i: int) -> list[dict[str, Any]]:
    """One live turn: the user states something, the assistant answers (a second apart)."""
    ts = BASE_MS + 10_000_000 + i * 2000
    return [
        {"role": "user", "content": f"我最近特别喜欢徒步{i}号，每周都去。", "timestamp": ts},
        {"role": "assistant", "content": f"徒步听起来很棒！第{i}次你想去哪里？", "timestamp": ts + 1000},
    ]


def replay_batch(i: int, size: int) -> list[dict[str, Any]]:
    """A replay batch of ``size`` alternating messages, some stating a fact."""
    ts = BASE_MS + 20_000_000 + i * size * 1000
    out = []
    for k in range(size):
        text = f"我住在成都{k}区，喜欢咖啡。" if k % 10 == 0 else f"第{k}条：我们聊了西湖和跑步 {i}"
        out.append(
            {"role": "user" if k % 2 == 0 else "assistant", "content": text, "timestamp": ts + k * 1000}
        )
    return out


class FakeEmbeddings(Embeddings):
    """A deterministic stand-in for an embeddings model: each text's sha256 as ``DIM`` numbers.

    What the store reads and writes per turn does not depend on the vectors' values, only on
    there being a model: no model file is needed.
    """

    DIM = 16
    model = "fake-sha256-16"

    def _one(self, text: str) -> list[float]:
        digest = hashlib.sha256(text.encode()).digest()
        return [b / 255.0 - 0.5 for b in digest[: self.DIM]]

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        """One vector per text."""
        return [self._one(t) for t in texts]

    def embed_query(self, text: str) -> list[float]:
        """The query's vector."""
        return self._one(text)


@dataclass(frozen=True)
class Setup:
    """How the measured memory is opened: an embeddings model (turns embedded after each live
    turn, as the background worker does, and the call start's search by meaning) and the
    retention purge at the end of every run."""

    embeddings: bool = False
    purge: bool = False

    def open(self, url: str) -> Any:
        """The ``ConvMemory`` of this setup (turns embedded only when asked: in the record)."""
        from convmem_graph.config import MemoryConfig
        from convmem_graph.memory import ConvMemory

        return ConvMemory.open(
            url,
            config=MemoryConfig(purge_summarized_messages=self.purge),
            embeddings=FakeEmbeddings() if self.embeddings else None,
            embed_in_background=False,
        )

    def turn(self, mem: Any, memory_id: str, i: int) -> None:
        """A live turn, and with embeddings its turns' vectors (the background worker's pass)."""
        mem.ingest(memory_id, live_turn(i))
        if self.embeddings:
            mem.embed_turns(memory_id)


def fill(url: str, big: int, smalls: int, *, one_memory_stats: bool = True, setup: Setup = Setup()) -> None:
    """Write ``smalls`` small memories, then one memory of ``big`` messages, then ``ANALYZE``.

    ``one_memory_stats``: the statistics say ``memory_id`` has one distinct value; otherwise
    they are ``ANALYZE``'s own (from every row). With ``setup.embeddings`` every message of every
    memory has a vector (the big memory's written by one ``INSERT ... SELECT`` too).
    """
    with setup.open(url) as mem:
        for k in range(smalls):
            setup.turn(mem, f"small{k}", k)
        mem.store.ensure_memory("big")
        with mem.store.engine.begin() as conn:
            # Rows as the store writes them (no episodic entries: the cases measured never search
            # this memory's turns, and its index rows would not change what (a) and (b) read).
            conn.exec_driver_sql(
                "INSERT INTO cm_messages (memory_id, id, role, content, channel, source, timestamp_ms, "
                "partial, interrupted, content_hash) "
                "SELECT 'big', 'b' || g, CASE WHEN g %% 2 = 0 THEN 'user' ELSE 'assistant' END, "
                "'第' || g || '条消息：我们聊了西湖，还有别的事情', 'im', 'message', "
                f"{BASE_MS} + g * 1000, false, false, g FROM generate_series(1, {big}) g"
            )
            conn.exec_driver_sql(
                "UPDATE cm_memories SET extracted_seq = m.top, summarized_seq = m.top "
                "FROM (SELECT max(seq) AS top FROM cm_messages WHERE memory_id = 'big') m "
                "WHERE memory_id = 'big'"
            )
            if setup.embeddings:
                from convmem_graph.embeddings import model_name
                from convmem_graph.store._vectors import vector_key

                key = vector_key(model_name(FakeEmbeddings()))
                conn.exec_driver_sql(
                    "INSERT INTO cm_turn_vectors (memory_id, seq, model, vec) "
                    f"SELECT memory_id, seq, %s, decode(repeat('003c', {FakeEmbeddings.DIM}), 'hex') "
                    "FROM cm_messages WHERE memory_id = 'big'",
                    (key,),
                )
        with mem.store.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            # Statistics from every row (the sample covers the table): the same plans each run.
            conn.exec_driver_sql("SET default_statistics_target = 1000")
            # As analyzed while the table held the one memory (autovacuum's ANALYZE after its
            # import): one distinct memory_id, so any memory's rows look like most of the table.
            if one_memory_stats:
                for table in ("cm_messages",) + (("cm_turn_vectors",) if setup.embeddings else ()):
                    conn.exec_driver_sql(f"ALTER TABLE {table} ALTER COLUMN memory_id SET (n_distinct = 1)")
            # The store's tables only: the server may hold other users' schemas.
            tables = conn.exec_driver_sql(
                "SELECT tablename FROM pg_tables WHERE schemaname = current_schema()"
            ).scalars()
            conn.exec_driver_sql(f"VACUUM ANALYZE {', '.join(tables)}")


def measure(
    url: str, batch: int, capture: PlanCapture, setup: Setup = Setup()
) -> dict[str, list[StatementReads]]:
    """Each case's statements and what they read, under forced generic plans."""
    from convmem_graph.state import RawInput

    cases: dict[str, list[StatementReads]] = {}
    with setup.open(url) as mem:
        # Warm-up outside the record: connections, the checkpointer's tables, first-use reads.
        setup.turn(mem, "warm", 0)
        mem.lifecycle.run("warm", [RawInput(replay_batch(0, batch))], flush_commit=False)
        mem.payload("warm", "openai", query=QUERY)

        def replay(mid: str) -> None:
            mem.lifecycle.run(mid, [RawInput(replay_batch(1, batch))], flush_commit=False)
            if setup.embeddings:  # as `convmem ingest` does after a batch
                mem.embed_turns(mid)

        kinds: dict[str, Callable[[str], None]] = {
            "live turn": lambda mid: setup.turn(mem, mid, 1),
            "call start": lambda mid: mem.payload(mid, "openai", query=QUERY),
            "replay batch": replay,
        }
        memories = {
            "live turn": ("fresh", "small1"),
            "call start": ("fresh", "small1"),
            "replay batch": ("fresh_r", "small2"),
        }
        # The big memory's cases last: with the purge its first run deletes its history (its
        # cursors are at its end), which would leave the other cases a table of dead rows.
        for big in (False, True):
            for kind, run in kinds.items():
                small = tuple(zip(("a new", "b small"), memories[kind], strict=True))
                named = (("c big", "big"),) if big else small
                for name, mid in named:
                    with capture.recording() as seen:
                        run(mid)
                    cases[f"{kind}, {name}"] = list(seen)
    return cases


def _outline(node: dict[str, Any], depth: int = 0) -> str:
    """A plan as indented lines: node type, relation or index, rows and buffers."""
    what = " ".join(
        str(node[k]) for k in ("Node Type", "Scan Direction", "Index Name", "Relation Name") if k in node
    )
    removed = node.get("Rows Removed by Filter", 0)
    line = f"{'  ' * depth}{what}  rows={node.get('Actual Rows')} loops={node.get('Actual Loops')}"
    line += f" removed={removed} hit={node.get('Shared Hit Blocks')}"
    return "\n".join([line] + [_outline(c, depth + 1) for c in node.get("Plans", [])])


def report(cases: dict[str, list[StatementReads]], bound: int, show: str = "") -> list[str]:
    """Print each case's totals and heaviest statements; the statements over ``bound`` in (a)/(b).

    ``show``: the plans of the (a)/(b) statements whose text holds it are printed too.
    """
    over: dict[str, int] = {}
    for case, seen in cases.items():
        tuples = sum(s.tuples for s in seen)
        buffers = sum(s.buffers for s in seen)
        worst = max(seen, key=lambda s: s.tuples)
        print(f"{case:26} {len(seen):3} statements  {tuples:8} tuples  {buffers:7} buffers  ", end="")
        print(f"max {worst.tuples} tuples / {worst.buffers} buffers: {worst.text[:90]}")
        if not case.endswith("big"):
            for s in seen:
                if s.tuples > bound:
                    over[s.text] = max(over.get(s.text, 0), s.tuples)
    if show:
        for case, seen in cases.items():
            for s in seen:
                if show in s.text:
                    print(f"--- {case}: {s.tuples} tuples, {s.buffers} buffers")
                    print(_outline(s.plan["Plan"]))
    print(f"\nstatements reading > {bound} tuples for a new or a small memory: {len(over)}")
    for text, tuples in over.items():
        print(f"  {tuples:8} tuples  {text[:1500]}")
    return list(over)


def time_turns(
    url: str, turns: int, start: int, smalls: range, setup: Setup = Setup()
) -> dict[str, list[float]]:
    """ms per live turn (with its vectors under ``setup.embeddings``), and per next call start, of
    new and of small memories (forced generic plans)."""
    out: dict[str, list[float]] = {}
    set_on_connect(GENERIC)
    with setup.open(url) as mem:
        for k in range(5):  # the first statements of each connection prepare, and plan
            setup.turn(mem, f"warm{start}_{k}", k)
            mem.payload(f"warm{start}_{k}", "openai", query=QUERY)
        for k in range(turns):
            for case, mid in (("a new", f"new{start}_{k}"), ("b small", f"small{smalls[k]}")):
                t0 = time.perf_counter()
                setup.turn(mem, mid, start + k)
                t1 = time.perf_counter()
                mem.payload(mid, "openai", query=QUERY)
                t2 = time.perf_counter()
                out.setdefault(f"turn {case}", []).append((t1 - t0) * 1000)
                out.setdefault(f"call {case}", []).append((t2 - t1) * 1000)
    return out


def _timing(args: argparse.Namespace, url: str) -> None:
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    trees = {"this": here} | ({"base": os.path.abspath(args.baseline)} if args.baseline else {})
    got: dict[str, dict[str, list[tuple[float, float]]]] = {t: {} for t in trees}
    slot = 0
    for r in range(args.rounds):
        order = list(trees) if r % 2 == 0 else list(trees)[::-1]
        for tree in order:
            cmd = [sys.executable, os.path.abspath(__file__), "--postgres", args.postgres, "--worker", url]
            cmd += ["--time", str(args.time), "--start", str(slot)]
            cmd += ["--embeddings"] * args.embeddings + ["--purge"] * args.purge
            env = os.environ | {"PYTHONPATH": f"{trees[tree]}:{here}"}
            line = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True).stdout.strip()
            slot += args.time
            for case, samples in json.loads(line.splitlines()[-1]).items():
                ordered = sorted(samples)
                got[tree].setdefault(case, []).append(
                    (statistics.median(ordered), ordered[int(0.95 * (len(ordered) - 1))])
                )
    print(
        f"\nlive turn and next call start ms, forced generic plans, {args.rounds} rounds x {args.time} turns"
    )
    for tree, cases in got.items():
        for case, rounds in cases.items():
            p50 = statistics.median(r[0] for r in rounds)
            p95 = statistics.median(r[1] for r in rounds)
            each = [round(r[0], 1) for r in rounds]
            print(f"  {tree:5} {case:12} p50 {p50:7.2f}  p95 {p95:7.2f}   rounds p50: {each}")


def main() -> int:
    """Fill the skewed schema, report each statement's reads, optionally time live turns."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--postgres", default=os.environ.get("CONVMEM_BENCH_POSTGRES_URL"), required=False)
    parser.add_argument("--big", type=int, default=100_000, help="messages of the big memory")
    parser.add_argument("--batch", type=int, default=200, help="messages of a replay batch")
    parser.add_argument("--bound", type=int, default=1_000, help="reads listed above this")
    parser.add_argument("--time", type=int, default=0, help="live turns of (a) and of (b) per round")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument(
        "--custom", action="store_true", help="plans as the server picks them, not forced generic"
    )
    parser.add_argument("--own-stats", action="store_true", help="ANALYZE's own n_distinct, not 1")
    parser.add_argument("--smalls", type=int, default=0, help="small memories (default: what --time needs)")
    parser.add_argument("--embeddings", action="store_true", help="a (fake) embeddings model: turn vectors")
    parser.add_argument("--purge", action="store_true", help="purge_summarized_messages=True")
    parser.add_argument("--show", default="", help="print the plans of statements holding this text")
    parser.add_argument("--baseline", help="a checkout whose convmem_graph is timed beside this one")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--start", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    setup = Setup(embeddings=args.embeddings, purge=args.purge)
    if args.worker:  # one timing round in this process, on the filled schema at --worker
        smalls = range(10 + args.start, 10 + args.start + args.time)
        print(json.dumps(time_turns(args.worker, args.time, args.start, smalls, setup)))
        return 0
    if not args.postgres:
        parser.error("--postgres URL (or CONVMEM_BENCH_POSTGRES_URL) is required")
    with scratch_schema(args.postgres, "cm_generic") as url:
        smalls = max(args.smalls, 10 + args.time * args.rounds * 2)
        t0 = time.perf_counter()
        fill(url, args.big, smalls, one_memory_stats=not args.own_stats, setup=setup)
        print(
            f"filled: {smalls} small memories, one of {args.big} messages ({time.perf_counter() - t0:.1f} s)"
        )
        if args.time:  # first: with --purge the big memory's measured run deletes its history
            _timing(args, url)
        capture = PlanCapture()
        capture.install(generic=not args.custom)
        report(measure(url, args.batch, capture, setup), args.bound, args.show)
    return 0


if __name__ == "__main__":
    sys.exit(main())
