"""Where a live turn's CPU goes: each node's own CPU, what is left to LangGraph, statements, checkpoint bytes.

Issue 24 item 2. On ``turn_cost.py``'s memory (``--warm`` fact turns), times ``--turns`` more turns
of one kind (``fact``: the user states a new fact; ``plain``: none) in one process and prints:

- the process CPU per turn, and each node's own CPU (the thread CPU between the node's entry and
  return, read from the run's ``node_ms`` with ``convmem_graph.accounting``'s clock switched to
  ``time.thread_time`` for the timed turns); the rest is the runner and LangGraph's loop (task
  preparation, callbacks, channel writes, the checkpoint write and its prune);
- the collector's CPU per turn (``gc.callbacks``);
- SQLite statements per turn on each connection (``set_trace_callback``; lines starting ``--``
  are trigger and FTS5 sub-statements, counted apart), in ``--count`` further turns, untimed;
- the newest checkpoint's size (checkpoint blob and metadata) and each channel's share.

Run it on two trees in turn to compare their parts (same host, load stated); ``turn_ab.py``
gives the paired same-run ratio of the whole turn.

Usage:
    PYTHONPATH=. python benchmarks/turn_parts.py [--warm 150] [--turns 300] [--kind fact] [--count 20]
"""

from __future__ import annotations

import argparse
import gc
import os
import re
import sqlite3
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import convmem_graph
import convmem_graph.accounting as accounting
from convmem_graph.memory import ConvMemory

sys.path.insert(0, str(Path(__file__).resolve().parent))
from turn_cost import turn  # noqa: E402


def plain(i: int) -> list[dict[str, str]]:
    """A turn that states no fact (``turn_ab.py``'s)."""
    return [{"role": "user", "content": f"嗯，好的，第{i}次。"}, {"role": "assistant", "content": "明白了。"}]


class _ThreadClock:
    """``accounting``'s ``time`` with ``perf_counter`` reading the thread's CPU clock."""

    perf_counter = staticmethod(time.thread_time)

    def __getattr__(self, name: str) -> Any:
        return getattr(time, name)


class _GcClock:
    """The collector's CPU time and collections while installed."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.collections = 0
        self._start = 0.0

    def __call__(self, phase: str, _info: dict[str, Any]) -> None:
        if phase == "start":
            self._start = time.process_time()
        else:
            self.seconds += time.process_time() - self._start
            self.collections += 1


def timed(mem: ConvMemory, send: Any, start: int, turns: int) -> dict[str, Any]:
    """``turns`` turns with node CPU recorded; CPU ms per turn in all and by node, and the collector's."""
    clock, kept = _GcClock(), accounting.time
    accounting.time = _ThreadClock()  # type: ignore[assignment]
    gc.callbacks.append(clock)
    nodes: Counter[str] = Counter()
    cpu = 0.0
    try:
        for i in range(start, start + turns):
            c0 = time.process_time()
            result = mem.ingest("u1", send(i), source="openai")
            cpu += time.process_time() - c0
            nodes.update(result.node_ms)
    finally:
        accounting.time = kept  # type: ignore[assignment]
        gc.callbacks.remove(clock)
    return {
        "cpu": cpu * 1000 / turns,
        "nodes": {k: v / turns for k, v in nodes.items()},
        "gc": clock.seconds * 1000 / turns,
        "collections": clock.collections / turns,
    }


def counted(mem: ConvMemory, send: Any, start: int, turns: int) -> dict[str, Counter[str]]:
    """Statements per turn on each open SQLite connection, by kind (first word), in ``turns`` turns."""
    conns = [o for o in gc.get_objects() if isinstance(o, sqlite3.Connection)]
    counts: dict[str, Counter[str]] = {}
    for k, conn in enumerate(conns):
        seen = counts.setdefault(f"connection {k}", Counter())

        def trace(sql: str, seen: Counter[str] = seen) -> None:
            sub = sql.startswith("--")
            word = re.sub(r"^--\s*", "", sql).split(None, 1)[0].upper() if sql.strip("- ") else "?"
            seen[("sub " if sub else "") + word] += 1

        conn.set_trace_callback(trace)
    try:
        for i in range(start, start + turns):
            mem.ingest("u1", send(i), source="openai")
    finally:
        for conn in conns:
            conn.set_trace_callback(None)
    return {name: Counter({k: v / turns for k, v in c.items()}) for name, c in counts.items() if c}


def checkpoint_size(path: Path) -> dict[str, Any]:
    """The newest checkpoint of the memory's thread: its blob, its metadata, its channels' sizes."""
    from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

    with sqlite3.connect(path) as conn:
        kind, blob, meta = conn.execute(
            "SELECT type, checkpoint, metadata FROM checkpoints ORDER BY checkpoint_id DESC LIMIT 1"
        ).fetchone()
        kept = conn.execute("SELECT count(*) FROM checkpoints").fetchone()[0]
        writes = conn.execute("SELECT count(*) FROM writes").fetchone()[0]
    checkpoint = JsonPlusSerializer().loads_typed((kind, blob))
    values = checkpoint["channel_values"]
    sizes = {k: len(repr(v)) for k, v in values.items()}
    versions = len(repr(checkpoint["channel_versions"])) + len(repr(checkpoint["versions_seen"]))
    return {
        "blob": len(blob),
        "metadata": len(meta),
        "kept": kept,
        "writes": writes,
        "channels": len(values),
        "values_repr": sum(sizes.values()),
        "versions_repr": versions,
        "largest": sorted(sizes.items(), key=lambda kv: -kv[1])[:5],
    }


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--warm", type=int, default=150, help="fact turns before timing (the memory's size)")
    parser.add_argument("--turns", type=int, default=300)
    parser.add_argument("--kind", choices=("fact", "plain"), default="fact")
    parser.add_argument("--count", type=int, default=20, help="turns whose statements are counted (untimed)")
    args = parser.parse_args()
    send = plain if args.kind == "plain" else turn
    path = Path(tempfile.mkdtemp(prefix="turn-parts-")) / "t.db"
    print(f"code: {Path(convmem_graph.__file__).parent}; kind {args.kind}; load before {os.getloadavg()}")
    mem = ConvMemory.open(str(path))
    for i in range(args.warm):
        mem.ingest("u1", turn(i), source="openai")
    for i in range(20):  # the first turns of the kind, untimed
        mem.ingest("u1", send(10**5 + i), source="openai")
    got = timed(mem, send, args.warm, args.turns)
    statements = counted(mem, send, args.warm + args.turns, args.count)
    mem.close()
    size = checkpoint_size(path)
    print(f"load after {os.getloadavg()}")
    cpu, nodes = got["cpu"], got["nodes"]
    inside = sum(nodes.values())
    print(f"CPU per turn {cpu:.2f} ms ({args.turns} turns after {args.warm})")
    for name, ms in nodes.items():
        print(f"  {name:18s} {ms:6.3f} ms  {100 * ms / cpu:5.1f} %")
    print(f"  {'nodes':18s} {inside:6.3f} ms  {100 * inside / cpu:5.1f} %")
    print(f"  {'outside the nodes':18s} {cpu - inside:6.3f} ms  {100 * (cpu - inside) / cpu:5.1f} %")
    print(f"collector: {got['gc']:.3f} ms per turn, {got['collections']:.2f} collections per turn")
    for name, c in statements.items():
        top = sum(v for k, v in c.items() if not k.startswith("sub "))
        sub = sum(v for k, v in c.items() if k.startswith("sub "))
        kinds = ", ".join(f"{k} {v:.2f}" for k, v in c.most_common())
        print(f"statements per turn, {name}: {top:.2f} (+ {sub:.2f} sub-statements): {kinds}")
    print(
        f"newest checkpoint: blob {size['blob']} B, metadata {size['metadata']} B; {size['kept']} kept,"
        f" {size['writes']} pending writes; {size['channels']} channels, values ~{size['values_repr']} chars,"
        f" versions ~{size['versions_repr']} chars; largest values {size['largest']}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
