"""Live-turn cost versus memory size, beside the naive ``add_messages`` + ``SqliteSaver`` pattern.

A live agent hands each finished turn (one user and one assistant message) to
``ConvMemory.ingest``, as the middleware does after each model call. This measures that call for a
memory with no history and for one with 50k prior messages and 5k active facts (and, as a control,
50k messages with 100 facts), on SQLite and, with ``--postgres URL``, on PostgreSQL. Each user
message states a new fact, so every turn extracts, reconciles, re-infers variables and rebuilds
the call-start snapshot. Sizes are measured in interleaved rounds (the machine is shared and
noisy); the figures are medians over rounds of each round's p50 and p95.

Beside it, the naive LangGraph pattern: a graph whose state accumulates ``messages`` with the
``add_messages`` reducer under ``SqliteSaver``, one invoke per turn, at 0 and at 50k messages.

Issue 24: the facts of the ``50k msgs / 5k facts`` memory all had one shape, which hid a cliff in
other key families. ``--families`` adds a memory of 50k messages and 5k facts of each named family
alone (the generator of ``benchmarks/_facts.py``: Chinese and English wording, some temporary or
expiring facts), and the verdict takes the worst of them.

Targets (issue 11): p95 at 50k messages / 5k facts <= 2x p95 at no history, on SQLite and
PostgreSQL; PostgreSQL p50 <= 1.5x SQLite p50. Issue 24: <= 1.5x for 5k facts of any family.

With ``--baseline DIR`` (a checkout of earlier code, e.g. ``git worktree add /tmp/base HEAD``) a
worker process running that code fills its own memories of the same sizes (its own SQLite file and
PostgreSQL schema) and times the same turns: each cell of each round runs on both sides back to
back, the side going first alternating by round, so both meet the same load. CPU time per turn
(the process's, its threads included) is printed beside wall time.

Usage:
    python benchmarks/live_turn.py [--turns 40] [--rounds 3] [--postgres postgresql://...]
        [--families like,dislike,plan,family,food,profile,pref,habit] [--baseline DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from _facts import SHAPES, generated_ops
from _pg import scratch_schema
from _synthetic import TOPICS
from _synthetic import add_messages as add_synthetic_messages
from _worker import LineWorker

import convmem_graph
from convmem_graph.memory import ConvMemory
from convmem_graph.models import FragmentCandidate, FragmentOp

BASE_MS = 1_767_000_000_000
THINGS = ["榴莲", "羽毛球", "爵士乐", "拿铁", "徒步", "围棋", "寿司", "摄影", "瑜伽", "披萨", "滑雪", "钢琴"]
SIZES: tuple[tuple[str, int, int], ...] = (
    ("0 history", 0, 0),
    ("50k msgs / 100 facts", 50_000, 100),
    ("50k msgs / 5k facts", 50_000, 5_000),
)


def fill(mem: ConvMemory, memory_id: str, messages: int, facts: int, family: str | None = None) -> None:
    """Store ``messages`` prior messages and ``facts`` active facts, all processed.

    ``family``: the facts are of that key family alone (``benchmarks/_facts.py``).
    """
    store = mem.store
    store.ensure_memory(memory_id)
    add_synthetic_messages(store, memory_id, messages, base_ms=BASE_MS)
    if family is not None:
        ops = generated_ops(7, facts, SHAPES[f"only-{family}"], now_ms=BASE_MS + messages * 1000, ties=False)
        store.commit_extraction(memory_id, ops, upto_seq=store.max_seq(memory_id), now_ms=BASE_MS)
        mem.lifecycle.run(memory_id)
        return
    prefixes = ["pref", "food", "habit", "goal", "state"]
    ops = [
        FragmentOp(
            op="add",
            candidate=FragmentCandidate(
                content=f"用户喜欢{TOPICS[j % len(TOPICS)]}（第{j}条事实）",
                category="preference",
                key=f"{prefixes[j % len(prefixes)]}:{TOPICS[j % len(TOPICS)]}_{j}",
                observed_at=BASE_MS + j,
            ),
        )
        for j in range(facts)
    ]
    store.commit_extraction(memory_id, ops, upto_seq=store.max_seq(memory_id), now_ms=BASE_MS)
    mem.lifecycle.run(memory_id)  # catch up: variables, summary cursor, snapshot


def turn(i: int) -> list[dict[str, str]]:
    """One live turn: the user states a new fact, the assistant answers."""
    thing = THINGS[i % len(THINGS)]
    return [
        {"role": "user", "content": f"我最近特别喜欢{thing}{i}号，每周都去。"},
        {"role": "assistant", "content": f"{thing}听起来很棒！你喜欢它哪一点？"},
    ]


def percentiles(samples: list[float]) -> tuple[float, float]:
    """p50 and p95 of samples in ms."""
    ordered = sorted(samples)
    return statistics.median(ordered), ordered[int(0.95 * (len(ordered) - 1))]


#: CPU ms per call of the last :func:`time_calls` (the process's CPU time, its threads included).
LAST_CPU: list[float] = [0.0]


def time_calls(fn: Callable[[int], Any], start: int, count: int) -> list[float]:
    """Call ``fn(start + k)`` ``count`` times and return each call's time in ms."""
    out = []
    cpu0 = time.process_time()
    for k in range(count):
        t0 = time.perf_counter()
        fn(start + k)
        out.append((time.perf_counter() - t0) * 1000)
    LAST_CPU[0] = (time.process_time() - cpu0) * 1000 / max(count, 1)
    return out


def naive_graph(path: Path) -> Any:
    """The default LangGraph pattern: ``add_messages`` state under ``SqliteSaver``."""
    from langgraph.checkpoint.sqlite import SqliteSaver
    from langgraph.graph import START, MessagesState, StateGraph

    def respond(state: MessagesState) -> dict[str, Any]:
        return {}

    builder = StateGraph(MessagesState)
    builder.add_node("respond", respond)
    builder.add_edge(START, "respond")
    saver = SqliteSaver(sqlite3.connect(str(path), check_same_thread=False))
    return builder.compile(checkpointer=saver)


def vacuum(mem: ConvMemory) -> None:
    """``VACUUM ANALYZE`` the PostgreSQL database, untimed, before a round.

    What autovacuum does on a server that runs it (the default): statistics after the bulk load,
    and the dead rows each turn leaves (a pruned checkpoint, the replaced snapshot, the memory
    row's updates) cleared. The test server here runs with autovacuum off; without this, every
    turn walks all the dead rows of the turns before it.
    """
    with mem.store.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.exec_driver_sql("VACUUM ANALYZE")


def _memory_id(messages: int, facts: int, family: str | None) -> str:
    return f"live_{messages}_{facts}" + (f"_{family}" if family else "")


def _verdict(met: bool) -> str:
    return "met" if met else "NOT met"


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--turns", type=int, default=40, help="timed turns per size and round")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds")
    parser.add_argument("--postgres", default=os.environ.get("CONVMEM_BENCH_POSTGRES_URL"))
    parser.add_argument("--no-naive", action="store_true", help="skip the naive LangGraph pattern")
    parser.add_argument(
        "--families",
        default="",
        help="also 50k messages / 5k facts of each of these key families alone (comma-separated)",
    )
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument(
        "--baseline", type=Path, default=None, help="a checkout of earlier code to time in the same rounds"
    )
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="convmem-liveturn-"))
    workdir.mkdir(parents=True, exist_ok=True)
    if args.worker:
        with ExitStack() as scratch:
            return _worker(args, workdir, scratch)
    print(
        f"machine: {os.cpu_count()} CPUs, Python {sys.version.split()[0]}; "
        f"{args.turns} turns x {args.rounds} rounds per cell; load {os.getloadavg()}"
    )
    print(f"code: {Path(convmem_graph.__file__).parent}")

    with ExitStack() as scratch:
        return _run(args, workdir, scratch)


Size = tuple[str, int, int, str | None]


def _open(
    args: argparse.Namespace, workdir: Path, scratch: ExitStack
) -> tuple[dict[str, ConvMemory], list[Size]]:
    """The backends and sizes of the run, every size filled on every backend."""
    backends: dict[str, ConvMemory] = {"sqlite": ConvMemory.open(str(workdir / "live.db"))}
    if args.postgres:
        # Tables in a schema of their own, dropped at the end: nothing of the run stays behind.
        pg = ConvMemory.open(scratch.enter_context(scratch_schema(args.postgres, "cm_live")))
        scratch.callback(pg.close)  # before the schema is dropped, even when a round fails
        backends["postgresql"] = pg
    families = [f for f in args.families.split(",") if f]
    sizes: list[Size] = [(label, messages, facts, None) for label, messages, facts in SIZES]
    sizes += [(f"50k msgs / 5k {f}:", 50_000, 5_000, f) for f in families]
    for name, mem in backends.items():
        for label, messages, facts, family in sizes:
            t0 = time.perf_counter()
            fill(mem, _memory_id(messages, facts, family), messages, facts, family)
            print(f"{name}: filled {label} in {time.perf_counter() - t0:.1f} s", file=sys.stderr, flush=True)
    return backends, sizes


def _worker(args: argparse.Namespace, workdir: Path, scratch: ExitStack) -> int:
    """The ``--baseline`` side: fill, then time the cells the parent asks for (one JSON line each way)."""
    backends, _ = _open(args, workdir, scratch)
    print(json.dumps({"code": str(Path(convmem_graph.__file__).parent)}), flush=True)
    for line in sys.stdin:
        ask = json.loads(line)
        mem = backends[ask["backend"]]
        samples = time_calls(
            lambda i, m=mem, mid=ask["memory_id"]: m.ingest(mid, turn(i), source="openai"),
            ask["start"],
            ask["count"],
        )
        print(json.dumps({"samples": samples, "cpu": LAST_CPU[0]}), flush=True)
    for mem in backends.values():
        mem.close()
    return 0


class Baseline(LineWorker):
    """A worker process timing the same cells on an earlier checkout (``--baseline DIR``)."""

    def __init__(self, root: Path, args: argparse.Namespace, workdir: Path) -> None:
        cmd = [sys.executable, __file__, "--worker", "--workdir", str(workdir), "--families", args.families]
        cmd += ["--postgres", args.postgres] if args.postgres else []
        # Started first: it fills its memories while this process fills its own. Closing waits
        # longer: the worker also drops its schema.
        super().__init__(cmd, {**os.environ, "PYTHONPATH": str(root)}, close_timeout=120)

    def ready(self) -> str:
        """Wait for the worker's fill; the code it runs."""
        return str(self.read()["code"])

    def run(self, backend: str, memory_id: str, start: int, count: int) -> tuple[list[float], float]:
        """``count`` turns from ``start`` on the baseline's memory; (samples ms, CPU ms per turn)."""
        ask = {"backend": backend, "memory_id": memory_id, "start": start, "count": count}
        got = self.request(json.dumps(ask))
        return list(got["samples"]), float(got["cpu"])


def _run(args: argparse.Namespace, workdir: Path, scratch: ExitStack) -> int:
    base = Baseline(args.baseline, args, workdir / "baseline") if args.baseline else None
    backends, sizes = _open(args, workdir, scratch)
    families = [f for f in args.families.split(",") if f]
    if base is not None:
        print(f"baseline code: {base.ready()}")

    naive = None
    if not args.no_naive:
        naive = naive_graph(workdir / "naive.db")
        history = [
            {
                "role": "user" if i % 2 == 0 else "assistant",
                "content": f"第{i}条消息：{TOPICS[i % len(TOPICS)]}",
            }
            for i in range(50_000)
        ]
        t0 = time.perf_counter()
        naive.invoke({"messages": history}, {"configurable": {"thread_id": "naive_50000"}})
        print(f"naive: filled 50k messages in {time.perf_counter() - t0:.1f} s")

    cells: dict[tuple[str, str], list[tuple[float, float]]] = {}
    cpu: dict[tuple[str, str], list[float]] = {}
    for r in range(args.rounds):
        if "postgresql" in backends:
            vacuum(backends["postgresql"])  # the whole database: the baseline's schema too
        for name, mem in backends.items():
            for label, messages, facts, family in sizes:
                memory_id = _memory_id(messages, facts, family)

                start = r * args.turns

                def here(
                    name: str = name,
                    label: str = label,
                    mem: ConvMemory = mem,
                    mid: str = memory_id,
                    start: int = start,
                ) -> None:
                    samples = time_calls(
                        lambda i: mem.ingest(mid, turn(i), source="openai"), start, args.turns
                    )
                    cells.setdefault((name, label), []).append(percentiles(samples))
                    cpu.setdefault((name, label), []).append(LAST_CPU[0])

                def there(
                    name: str = name, label: str = label, mid: str = memory_id, start: int = start
                ) -> None:
                    assert base is not None
                    samples, per_turn = base.run(name, mid, start, args.turns)
                    cells.setdefault((f"{name} (baseline)", label), []).append(percentiles(samples))
                    cpu.setdefault((f"{name} (baseline)", label), []).append(per_turn)

                # Alternate which side goes first, so neither always meets the other's after-effects.
                for side in (here, there) if r % 2 == 0 else (there, here):
                    if side is here or base is not None:
                        side()
        if naive is not None:
            for label, thread in (("0 history", "naive_0"), ("50k msgs", "naive_50000")):
                # Seconds per turn at 50k: a few turns tell the story.
                count = args.turns if thread == "naive_0" else min(args.turns, 5)
                samples = time_calls(
                    lambda i, t=thread: naive.invoke(
                        {"messages": turn(i)}, {"configurable": {"thread_id": t}}
                    ),
                    r * args.turns,
                    count,
                )
                cells.setdefault(("naive add_messages+SqliteSaver", label), []).append(percentiles(samples))
        print(f"round {r + 1}/{args.rounds} done")

    def med(key: tuple[str, str]) -> tuple[float, float]:
        rounds = cells[key]
        return statistics.median(p[0] for p in rounds), statistics.median(p[1] for p in rounds)

    print(f"\nload after: {os.getloadavg()}")
    print(f"\n{'backend':<32} {'memory':<22} {'p50 ms':>8} {'p95 ms':>8} {'CPU ms':>7}   rounds (p50/p95)")
    for (name, label), rounds in cells.items():
        p50, p95 = med((name, label))
        detail = "  ".join(f"{a:.1f}/{b:.1f}" for a, b in rounds)
        per_turn = f"{statistics.median(cpu[(name, label)]):7.2f}" if (name, label) in cpu else f"{'-':>7}"
        print(f"{name:<32} {label:<22} {p50:>8.2f} {p95:>8.2f} {per_turn}   {detail}")
    ok = True
    print()
    names = list(backends) + ([f"{n} (baseline)" for n in backends] if base is not None else [])
    for name in names:
        big, small = med((name, "50k msgs / 5k facts"))[1], med((name, "0 history"))[1]
        met = big <= 2 * small
        ok &= met or name not in backends  # the verdict is this code's; the baseline's is shown
        print(f"{name}: p95(50k/5k) / p95(0) = {big / small:.2f}  (target <= 2.0: {_verdict(met)})")
        if families:
            worst = max(families, key=lambda f: med((name, f"50k msgs / 5k {f}:"))[1])
            ratio = med((name, f"50k msgs / 5k {worst}:"))[1] / small
            met = ratio <= 1.5
            ok &= met or name not in backends
            print(
                f"{name}: worst family {worst}: p95(50k/5k {worst}:) / p95(0) = {ratio:.2f}"
                f"  (issue 24 target <= 1.5: {_verdict(met)})"
            )
    if "postgresql" in backends:
        ratio = med(("postgresql", "0 history"))[0] / med(("sqlite", "0 history"))[0]
        met = ratio <= 1.5
        ok &= met
        print(f"postgresql p50 / sqlite p50 (0 history) = {ratio:.2f}  (target <= 1.5: {_verdict(met)})")
    for mem in backends.values():
        mem.close()
    if base is not None:
        base.close()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
