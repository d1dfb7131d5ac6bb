"""The fixed cost of a live turn: checkpoint durability, thread hand-offs, and Mem0's ``add`` beside it.

Issue 24 item 2. Times ``ConvMemory.ingest`` of one user/assistant pair (what the middleware hands
over after each model call; the user states a new fact, so every turn extracts, reconciles,
re-infers and rebuilds the snapshot) on a SQLite file, for each checkpoint durability in
interleaved rounds, and counts the threads each turn starts. With ``--mem0`` (Mem0 installed: it
is not a dependency of convmem), Mem0's ``Memory.add`` of the same pair is timed in the same
rounds with instant fakes: a fake LLM that answers at once with one fact and no update, a fake
embedder returning a fixed vector, and its default local vector store on disk.

With ``--floor``, LangGraph's own cost is timed in the same rounds too: a bare graph of six nodes in a
line (the lifecycle's step count) whose bodies return a one-key update at once, compiled with
LangGraph's ``SqliteSaver`` on a file and run with ``durability="exit"`` per turn. No store, no
rules: what any six-step LangGraph state machine with a checkpointer pays per run on this host.

With ``--baseline DIR`` (a checkout of an earlier convmem, e.g. ``git worktree add /tmp/base
<commit>``) the same turns run on that code too, in a worker process whose cells interleave with
this process's in every round (the order alternating), so both see the same load: on a shared
host a run of one after the other compares two loads more than two codes.

Usage:
    PYTHONPATH=. python benchmarks/turn_cost.py [--turns 60] [--rounds 5] [--mem0] [--floor] [--baseline DIR]
"""

from __future__ import annotations

import argparse
import gc
import inspect
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from _worker import LineWorker

import convmem_graph
from convmem_graph.memory import ConvMemory

THINGS = ["榴莲", "羽毛球", "爵士乐", "拿铁", "徒步", "围棋", "寿司", "摄影", "瑜伽", "披萨", "滑雪", "钢琴"]
DURABILITIES = ("sync", "async", "exit")


def turn(i: int) -> list[dict[str, str]]:
    """One live turn: the user states a new fact, the assistant answers."""
    thing = THINGS[i % len(THINGS)]
    return [
        {"role": "user", "content": f"我最近特别喜欢{thing}{i}号，每周都去。"},
        {"role": "assistant", "content": f"{thing}听起来很棒！你喜欢它哪一点？"},
    ]


class ThreadCount:
    """Counts ``threading.Thread.start`` calls (LangGraph's executors start threads per run)."""

    def __init__(self) -> None:
        self.started = 0
        self._real = threading.Thread.start
        counter = self

        def start(thread: threading.Thread) -> None:
            counter.started += 1
            counter._real(thread)

        threading.Thread.start = start  # type: ignore[method-assign]


#: CPU ms per call of each cell's rounds (the process's CPU time: its threads included). On a host
#: whose other tenants load both cores, wall time mostly measures waiting for a core; CPU time
#: measures the work.
CPU: dict[str, list[float]] = {}


def timed(fn: Callable[[int], Any], start: int, count: int, cell: str = "") -> list[float]:
    """ms of each ``fn(start + k)`` (wall); the CPU ms per call goes to :data:`CPU` under ``cell``."""
    out = []
    c0 = time.process_time()
    for k in range(count):
        t0 = time.perf_counter()
        fn(start + k)
        out.append((time.perf_counter() - t0) * 1000)
    CPU.setdefault(cell, []).append((time.process_time() - c0) * 1000 / count)
    return out


def mem0_memory(workdir: Path) -> Any:
    """A Mem0 ``Memory`` with instant fakes for its model and embedder (offline)."""
    os.environ.setdefault("MEM0_TELEMETRY", "False")
    from mem0 import Memory  # type: ignore[import-not-found]
    from mem0.configs.base import MemoryConfig  # type: ignore[import-not-found]

    config = MemoryConfig(
        vector_store={
            "provider": "qdrant",
            "config": {"path": str(workdir / "qdrant"), "embedding_model_dims": 8},
        },
        history_db_path=str(workdir / "mem0_history.db"),
        llm={"provider": "openai", "config": {"api_key": "sk-fake", "model": "gpt-4o-mini"}},
        embedder={"provider": "openai", "config": {"api_key": "sk-fake", "embedding_dims": 8}},
    )
    memory = Memory(config)

    class FakeLLM:
        """Answers at once, as Mem0 2.x's one extraction call expects: one new memory per turn."""

        calls = 0

        def generate_response(self, messages: list[dict[str, str]], **kwargs: Any) -> str:
            FakeLLM.calls += 1
            return json.dumps(
                {"memory": [{"id": "0", "text": f"User likes thing {FakeLLM.calls}", "event": "ADD"}]}
            )

    class FakeEmbedder:
        def embed(self, text: str, memory_action: str | None = None) -> list[float]:
            return [0.1] * 8

        def embed_batch(self, texts: list[str], memory_action: str | None = None) -> list[list[float]]:
            return [[0.1] * 8 for _ in texts]

    memory.llm = FakeLLM()
    memory.embedding_model = FakeEmbedder()
    return memory


def langgraph_floor(workdir: Path, steps: int = 6) -> Callable[[int], Any]:
    """A bare ``steps``-node LangGraph line on ``SqliteSaver``: one ``invoke`` per turn (see ``--floor``)."""
    import sqlite3
    from typing import TypedDict

    from langgraph.checkpoint.sqlite import SqliteSaver
    from langgraph.graph import END, START, StateGraph

    class Floor(TypedDict, total=False):
        turn: int
        step: int

    graph = StateGraph(Floor)
    previous = START
    for n in range(steps):
        graph.add_node(f"step{n}", lambda state, n=n: {"step": n})
        graph.add_edge(previous, f"step{n}")
        previous = f"step{n}"
    graph.add_edge(previous, END)
    saver = SqliteSaver(sqlite3.connect(str(workdir / "floor.db"), check_same_thread=False))
    app = graph.compile(checkpointer=saver)
    config = {"configurable": {"thread_id": "u1"}}

    def run(i: int) -> Any:
        return app.invoke({"turn": i}, config, durability="exit")

    for i in range(3):  # untimed: the saver's tables, the first checkpoint
        run(10**6 + i)
    return run


def open_memories(workdir: Path, freeze: bool) -> dict[str, ConvMemory]:
    """One memory per durability on its own SQLite file, warmed up (imports, compile, checkpoints)."""
    mems = {d: ConvMemory.open(str(workdir / f"turn_{d}.db"), durability=d) for d in DURABILITIES}
    for mem in mems.values():  # untimed: imports, graph compile, first checkpoint
        for i in range(3):
            mem.ingest("u1", turn(10**6 + i), source="openai")
    if freeze:
        gc.collect()
        gc.freeze()
    return mems


def default_durability() -> str:
    """The durability ``ConvMemory.open`` uses when none is given (what a live turn gets)."""
    return str(inspect.signature(ConvMemory.open).parameters["durability"].default)


def worker(workdir: Path, freeze: bool) -> int:
    """The ``--baseline`` side: run the cells the parent asks for (one JSON line each way)."""
    mems = open_memories(workdir, freeze)
    threads = ThreadCount()
    print(
        json.dumps({"code": str(Path(convmem_graph.__file__).parent), "default": default_durability()}),
        flush=True,
    )
    for line in sys.stdin:
        ask = json.loads(line)
        mem, before = mems[ask["durability"]], threads.started
        walls = timed(lambda i, m=mem: m.ingest("u1", turn(i), source="openai"), ask["start"], ask["count"])
        print(
            json.dumps({"walls": walls, "cpu": CPU[""][-1], "threads": threads.started - before}), flush=True
        )
    for mem in mems.values():
        mem.close()
    return 0


class Baseline(LineWorker):
    """A worker process running the same cells on an earlier checkout (``--baseline DIR``)."""

    def __init__(self, root: Path, workdir: Path, freeze: bool) -> None:
        cmd = [sys.executable, __file__, "--worker", "--workdir", str(workdir)] + (
            ["--freeze"] if freeze else []
        )
        super().__init__(cmd, {**os.environ, "PYTHONPATH": str(root)})
        hello = self.read()
        self.code, self.default = hello["code"], hello.get("default", "sync")

    def run(self, durability: str, start: int, count: int) -> dict[str, Any]:
        """``count`` turns from ``start`` on the baseline's memory of ``durability``."""
        return self.request(json.dumps({"durability": durability, "start": start, "count": count}))


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--turns", type=int, default=60)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--mem0", action="store_true", help="time Mem0's add beside (needs mem0ai installed)")
    parser.add_argument(
        "--floor", action="store_true", help="time a bare six-node LangGraph line on SqliteSaver beside"
    )
    parser.add_argument("--freeze", action="store_true", help="gc.freeze() after opening, as the server does")
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument(
        "--baseline", type=Path, default=None, help="a checkout of earlier code to time in the same rounds"
    )
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="convmem-turncost-"))
    workdir.mkdir(parents=True, exist_ok=True)
    if args.worker:
        return worker(workdir, args.freeze)
    print(f"machine: {os.cpu_count()} CPUs, Python {sys.version.split()[0]}, load {os.getloadavg()}")
    print(f"code: {Path(convmem_graph.__file__).parent}")
    base = Baseline(args.baseline, workdir / "baseline", args.freeze) if args.baseline else None
    if base is not None:
        print(f"baseline code: {base.code} (default durability {base.default!r})")
    print(f"default durability: {default_durability()!r}")
    mems = open_memories(workdir, freeze=False)
    m0 = mem0_memory(workdir) if args.mem0 else None
    if m0 is not None:
        added = m0.add(turn(10**6), user_id="u1")
        print(f"mem0 {getattr(sys.modules.get('mem0'), '__version__', '?')}: first add stored {added}")
    floor = langgraph_floor(workdir) if args.floor else None
    if args.freeze:
        gc.collect()
        gc.freeze()
    threads = ThreadCount()
    cells: dict[str, list[float]] = {}
    started: dict[str, int] = {}
    for r in range(args.rounds):
        for d, mem in mems.items():
            start = r * args.turns

            def here(d: str = d, mem: ConvMemory = mem, start: int = start) -> None:
                before = threads.started
                fn = lambda i: mem.ingest("u1", turn(i), source="openai")  # noqa: E731
                cells.setdefault(d, []).append(statistics.median(timed(fn, start, args.turns, d)))
                started[d] = started.get(d, 0) + threads.started - before

            def there(d: str = d, start: int = start) -> None:
                assert base is not None
                got = base.run(d, start, args.turns)
                name = f"{d} (baseline)"
                cells.setdefault(name, []).append(statistics.median(got["walls"]))
                CPU.setdefault(name, []).append(got["cpu"])
                started[name] = started.get(name, 0) + got["threads"]

            # Alternate which side goes first, so neither always meets the other's after-effects.
            for side in (here, there) if r % 2 == 0 else (there, here):
                if side is here or base is not None:
                    side()
        if floor is not None:
            cells.setdefault("langgraph floor", []).append(
                statistics.median(timed(floor, r * args.turns, args.turns, "langgraph floor"))
            )
        if m0 is not None:
            cells.setdefault("mem0 add", []).append(
                statistics.median(
                    timed(lambda i: m0.add(turn(i), user_id="u1"), r * args.turns, args.turns, "mem0 add")
                )
            )
    print(
        f"\nload after: {os.getloadavg()}; median over {args.rounds} rounds"
        " of each round's p50 (ms per turn pair)"
    )
    sync = statistics.median(cells["sync"])  # the column stays "of sync" across versions
    for name, rounds in sorted(cells.items()):
        med = statistics.median(rounds)
        per_turn = f"{started[name] / (args.rounds * args.turns):.1f}" if name in started else "-"
        detail = " / ".join(f"{v:.2f}" for v in rounds)
        print(
            f"{name:16} p50 {med:7.2f} ms  x{med / sync:.2f} of sync"
            f"  CPU {statistics.median(CPU[name]):6.2f} ms"
            f"  threads/turn {per_turn}  (rounds {detail})"
        )
    if m0 is not None:
        stored = len(m0.get_all(filters={"user_id": "u1"}, top_k=10**6).get("results", []))
        adds = 1 + args.rounds * args.turns
        print(f"mem0: {stored} memories stored for u1 by {adds} adds (the fakes take its full add path)")
        best = min(statistics.median(cells[d]) for d in DURABILITIES)
        ratio = best / statistics.median(cells["mem0 add"])
        print(
            f"convmem best / mem0 add p50 = {ratio:.2f} (target <= 1.0: {'met' if ratio <= 1 else 'NOT met'})"
        )
        d = default_durability()
        wall = statistics.median(cells[d]) / statistics.median(cells["mem0 add"])
        cpu = statistics.median(CPU[d]) / statistics.median(CPU["mem0 add"])
        print(f"convmem default ({d}) / mem0 add: wall p50 x{wall:.2f}, CPU x{cpu:.2f}")
        if floor is not None:
            share = statistics.median(CPU["langgraph floor"]) / statistics.median(CPU["mem0 add"])
            print(f"langgraph six-step floor / mem0 add: CPU x{share:.2f} (before any store or rule work)")
    if base is not None:
        for d in DURABILITIES:
            new, old = statistics.median(CPU[d]), statistics.median(CPU[f"{d} (baseline)"])
            print(f"CPU per turn pair, {d}: {new:.2f} ms vs baseline {old:.2f} ms (x{new / old:.2f})")
        d, b = default_durability(), f"{base.default} (baseline)"
        new, old = statistics.median(CPU[d]), statistics.median(CPU[b])
        wall_new, wall_old = statistics.median(cells[d]), statistics.median(cells[b])
        print(
            f"default turn ({d} vs the baseline's {base.default}):"
            f" CPU {new:.2f} vs {old:.2f} ms (x{new / old:.2f}),"
            f" wall p50 {wall_new:.2f} vs {wall_old:.2f} ms (x{wall_new / wall_old:.2f})"
        )
        base.close()
    for mem in mems.values():
        mem.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
