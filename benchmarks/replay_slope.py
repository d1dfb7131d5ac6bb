"""Replay cost per message versus how much one memory already holds (issue 24 item 1).

Issue 24 measured ~200 replayed messages into a memory of 1M messages and 100k facts at ~246 ms a
message (525 us at 1k; log-log slope 0.82): per-turn reads that grew with the facts. This fills
one memory per size with N synthetic messages and N/10 facts spread over the eleven key families
of ``benchmarks/_facts.py`` (Chinese and English, six categories, some temporary or expiring),
brings it up to date (variables, snapshot), then, in interleaved rounds, replays sessions of new
messages into every memory through ``ConvMemory.ingest`` (one lifecycle run per session, what
``convmem replay`` runs per batch: extraction, reconciliation, variables, summary, snapshot).
Each session's user lines state facts of several families (likes, dislikes, plans, friends, food,
where the user lives) in both languages, so every run extracts, reconciles and re-infers.

Prints, per size, the median over rounds of the per-message cost, and the log-log slope of that
cost against the memory's size between consecutive sizes and over all of them (0: flat; 1: cost
proportional to size). Target (issue 24): slope <= 0.1.

With ``--baseline DIR`` (a checkout of earlier code), the memories are filled once (``--db FILE``,
kept and reused when it exists: a 1M-message fill takes ~18 min), each side replays into its own
copy of that file, and every round runs each side in a fresh process (order alternating), this
script's code with the side's package; the CPU ratio of the two sides is printed per size.

Usage:
    PYTHONPATH=. python benchmarks/replay_slope.py [--sizes 1000,10000,100000] [--rounds 3]
        [--sessions 4] [--session-messages 100] [--postgres postgresql://...]
    PYTHONPATH=. python benchmarks/replay_slope.py --fill-only --db FILE --sizes 1000,10000,100000,1000000
    PYTHONPATH=. python benchmarks/replay_slope.py --baseline DIR --db FILE --sizes ... --rounds 5
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

from _facts import SHAPES, generated_ops
from _pg import scratch_schema
from _synthetic import BASE_MS
from _synthetic import add_messages as add_synthetic_messages

import convmem_graph
from convmem_graph.memory import ConvMemory

ZH = ["我喜欢{t}。", "我不喜欢{t}。", "我打算下周去{p}。", "我的朋友叫{n}。", "我爱吃{f}。", "我住在{p}。"]
EN = [
    "I like {t}.",
    "I don't like {t}.",
    "I plan to visit {p} next week.",
    "My friend is called {n}.",
    "I love eating {f}.",
    "I live in {p}.",
]
THINGS = ["羽毛球", "爵士乐", "徒步", "滑雪", "钢琴", "chess", "pottery", "jazz", "tennis", "surfing"]
PLACES = ["成都", "杭州", "西安", "Lisbon", "Kyoto", "Oslo"]
NAMES = ["小王", "阿丽", "Anna", "Tom", "Mika"]
FOODS = ["火锅", "饺子", "sushi", "ramen", "tacos"]


def session(seed: int, messages: int) -> list[dict[str, str]]:
    """``messages`` alternating user/assistant lines; the user's state facts of several families."""
    out = []
    for k in range(messages):
        i = seed * messages + k
        if k % 2:
            out.append({"role": "assistant", "content": f"好的，我记住了。Noted ({i})."})
            continue
        lines = ZH if (i // 2) % 3 else EN
        template = lines[(i // 2) % len(lines)]
        text = template.format(
            t=f"{THINGS[i % len(THINGS)]}{i}",
            p=PLACES[i % len(PLACES)],
            n=f"{NAMES[i % len(NAMES)]}{i}",
            f=f"{FOODS[i % len(FOODS)]}{i}",
        )
        out.append({"role": "user", "content": text})
    return out


def fill(mem: ConvMemory, memory_id: str, messages: int) -> None:
    """``messages`` prior messages and ``messages // 10`` facts over every key family, processed."""
    store = mem.store
    store.ensure_memory(memory_id)
    add_synthetic_messages(store, memory_id, messages, base_ms=BASE_MS)
    now = BASE_MS + messages * 1000
    for start in range(0, messages // 10, 10_000):
        count = min(10_000, messages // 10 - start)
        ops = generated_ops(start + 1, count, SHAPES["mixed"], now_ms=now - start * 1000, ties=False)
        store.commit_extraction(memory_id, ops, upto_seq=store.max_seq(memory_id), now_ms=now)
    mem.lifecycle.run(memory_id)


def slope(x0: float, y0: float, x1: float, y1: float) -> float:
    """Log-log slope between two points."""
    return (math.log(y1) - math.log(y0)) / (math.log(x1) - math.log(x0))


def _worker(db: Path, sizes: list[int], first_round: int, rounds: int, sessions: int, per: int) -> None:
    """One side's rounds on its own copy of the filled memories: prints one JSON line per size and round."""
    mem = ConvMemory.open(str(db))
    try:
        for n in sizes:  # untimed: first-use imports and caches (and an older file's migrations)
            mem.ingest(f"slope_{n}", session(10**6 + n + first_round, per), source="openai")
        for r in range(first_round, first_round + rounds):
            for n in sizes:
                c0, t0 = time.process_time(), time.perf_counter()
                for s in range(sessions):
                    mem.ingest(f"slope_{n}", session(r * sessions + s, per), source="openai")
                wall = (time.perf_counter() - t0) * 1e6 / (sessions * per)
                cpu = (time.process_time() - c0) * 1e6 / (sessions * per)
                print(json.dumps({"n": n, "round": r, "wall": wall, "cpu": cpu}), flush=True)
    finally:
        mem.close()


def _fit(sizes: list[int], costs: list[float]) -> tuple[float, list[float]]:
    steps = [slope(sizes[k], costs[k], sizes[k + 1], costs[k + 1]) for k in range(len(sizes) - 1)]
    xs = [math.log(n) for n in sizes]
    ys = [math.log(c) for c in costs]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    fit = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum((x - mx) ** 2 for x in xs)
    return fit, steps


def _sides(args: argparse.Namespace, sizes: list[int]) -> int:
    """``--baseline``: every round replays into each side's own copy of one fill, a process per side."""
    here = Path(__file__).resolve().parent.parent
    trees = [("this", here), ("baseline", args.baseline.resolve())]
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="convmem-slope-"))
    workdir.mkdir(parents=True, exist_ok=True)
    fill_db = args.db or workdir / "fill.db"
    if not fill_db.exists():
        t0 = time.perf_counter()
        subprocess.run(
            [sys.executable, __file__, "--fill-only", "--db", str(fill_db), "--sizes", args.sizes],
            check=True,
            env={**os.environ, "PYTHONPATH": str(here)},
        )
        print(f"filled {args.sizes} in {time.perf_counter() - t0:.0f} s")
    dbs = {}
    for name, _ in trees:
        dbs[name] = workdir / f"{name}_{fill_db.stem}.db"
        shutil.copyfile(fill_db, dbs[name])  # the fill is one consistent file: WAL checkpointed on close
    cpu: dict[tuple[str, int], list[float]] = {}
    wall: dict[tuple[str, int], list[float]] = {}
    print(f"load before: {os.getloadavg()}")
    for r in range(args.rounds):
        for name, tree in trees if r % 2 == 0 else trees[::-1]:
            cmd = [sys.executable, __file__, "--worker", "--db", str(dbs[name]), "--sizes", args.sizes]
            cmd += ["--first-round", str(r), "--rounds", "1", "--sessions", str(args.sessions)]
            cmd += ["--session-messages", str(args.session_messages)]
            out = subprocess.run(
                cmd, check=True, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(tree)}
            ).stdout
            for line in out.splitlines():
                if line.startswith("{"):
                    row = json.loads(line)
                    cpu.setdefault((name, row["n"]), []).append(row["cpu"])
                    wall.setdefault((name, row["n"]), []).append(row["wall"])
        print(f"round {r + 1}/{args.rounds} done, load {os.getloadavg()[0]:.2f}", flush=True)
    print(f"\nload after: {os.getloadavg()}; per-message cost, median over {args.rounds} rounds (us)")
    for name, _ in trees:
        for label, table in (("CPU", cpu), ("wall", wall)):
            costs = [statistics.median(table[(name, n)]) for n in sizes]
            for n, us in zip(sizes, costs, strict=True):
                rounds = " / ".join(f"{v:.0f}" for v in table[(name, n)])
                print(f"{name:8} {label:4} {n:>9} messages  {us:9.0f} us/message  (rounds {rounds})")
            if len(sizes) > 1:
                fit, steps = _fit(sizes, costs)
                listed = ", ".join(f"{s:.3f}" for s in steps)
                print(f"{name} {label}: log-log slope {fit:.3f} (steps {listed})")
    for n in sizes:
        this, base = (statistics.median(cpu[(k, n)]) for k in ("this", "baseline"))
        print(f"{n:>9} messages: CPU this / baseline x{this / base:.2f}")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", default="1000,10000,100000", help="messages already in the memory")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--sessions", type=int, default=4, help="replayed sessions per size and round")
    parser.add_argument("--session-messages", type=int, default=100)
    parser.add_argument(
        "--postgres", default=None, help="also on PostgreSQL (a scratch schema, dropped after)"
    )
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument(
        "--baseline",
        type=Path,
        default=None,
        help="a checkout of earlier code: each round replays on both sides, a fresh process each (SQLite)",
    )
    parser.add_argument("--db", type=Path, default=None, help="the filled SQLite file (made when missing)")
    parser.add_argument("--fill-only", action="store_true", help="fill --db and stop")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--first-round", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    if args.worker:
        _worker(args.db, sizes, args.first_round, args.rounds, args.sessions, args.session_messages)
        return 0
    if args.fill_only:
        with ConvMemory.open(str(args.db)) as mem:
            for n in sizes:
                t0 = time.perf_counter()
                fill(mem, f"slope_{n}", n)
                took = time.perf_counter() - t0
                print(f"filled {n} messages / {n // 10} facts in {took:.1f} s", flush=True)
        return 0
    print(f"machine: {os.cpu_count()} CPUs, Python {sys.version.split()[0]}, load {os.getloadavg()}")
    if args.baseline is not None:
        return _sides(args, sizes)
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="convmem-slope-"))
    workdir.mkdir(parents=True, exist_ok=True)
    print(f"code: {Path(convmem_graph.__file__).parent}")
    with ExitStack() as stack:
        backends = {"sqlite": ConvMemory.open(str(workdir / "slope.db"))}
        stack.callback(backends["sqlite"].close)
        if args.postgres:
            pg = ConvMemory.open(stack.enter_context(scratch_schema(args.postgres, "cm_slope")))
            stack.callback(pg.close)
            backends["postgresql"] = pg
        for name, mem in backends.items():
            for n in sizes:
                t0 = time.perf_counter()
                fill(mem, f"slope_{n}", n)
                print(f"{name}: filled {n} messages / {n // 10} facts in {time.perf_counter() - t0:.1f} s")
        for mem in backends.values():  # untimed: first-use imports and caches
            for n in sizes:
                mem.ingest(f"slope_{n}", session(10**6 + n, args.session_messages), source="openai")
        per_message: dict[tuple[str, int], list[float]] = {}
        # CPU us per message too: on a host whose other tenants keep both cores busy, wall time
        # mostly measures the wait for a core (the process's CPU time includes its threads).
        cpu_per_message: dict[tuple[str, int], list[float]] = {}
        for r in range(args.rounds):
            for name, mem in backends.items():
                if name == "postgresql":
                    with mem.store.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
                        conn.exec_driver_sql(
                            "VACUUM ANALYZE"
                        )  # what autovacuum would do (off on the test server)
                for n in sizes:
                    c0, t0 = time.process_time(), time.perf_counter()
                    for s in range(args.sessions):
                        mem.ingest(
                            f"slope_{n}",
                            session(r * args.sessions + s, args.session_messages),
                            source="openai",
                        )
                    us = (time.perf_counter() - t0) * 1e6 / (args.sessions * args.session_messages)
                    per_message.setdefault((name, n), []).append(us)
                    cpu = (time.process_time() - c0) * 1e6 / (args.sessions * args.session_messages)
                    cpu_per_message.setdefault((name, n), []).append(cpu)
            print(f"round {r + 1}/{args.rounds} done, load {os.getloadavg()[0]:.2f}")
        print(f"\nload after: {os.getloadavg()}; per-message cost, median over {args.rounds} rounds (us)")
        ok = True
        for name in backends:
            for label, table in (("wall", per_message), ("CPU", cpu_per_message)):
                costs = [statistics.median(table[(name, n)]) for n in sizes]
                for n, us in zip(sizes, costs, strict=True):
                    rounds = " / ".join(f"{v:.0f}" for v in table[(name, n)])
                    print(
                        f"{name:10} {label:4} {n:>9} messages {n // 10:>8} facts  {us:9.0f} us/message"
                        f"  (rounds {rounds})"
                    )
                steps = [slope(sizes[k], costs[k], sizes[k + 1], costs[k + 1]) for k in range(len(sizes) - 1)]
                xs = [math.log(n) for n in sizes]
                ys = [math.log(c) for c in costs]
                mx, my = statistics.fmean(xs), statistics.fmean(ys)
                fit = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum(
                    (x - mx) ** 2 for x in xs
                )
                met = fit <= 0.1
                ok &= met
                print(
                    f"{name} {label}: log-log slope {fit:.3f} over {sizes[0]}-{sizes[-1]}"
                    f" (steps {', '.join(f'{s:.3f}' for s in steps)});"
                    f" target <= 0.1: {'met' if met else 'NOT met'}"
                )
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
