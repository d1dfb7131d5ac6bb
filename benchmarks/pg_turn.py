"""The empty-memory live turn on PostgreSQL and SQLite, with client and server CPU, against a baseline.

``live_turn.py``'s issue-11 line (PostgreSQL p50 over SQLite p50 with no history) without its
50k-message memories, and with the CPU a turn costs on both sides of the wire: each cell is a
fresh process (this checkout's ``convmem_graph``, or ``--baseline DIR``'s) that opens a store on a
new schema of ``--postgres``'s database (or a new SQLite file), runs 10 warm-up turns on an empty
memory, then times ``--turns`` turns (``live_turn.turn``: the user states a new fact, the assistant
answers). Client CPU is the process's; server CPU is the user + system time of the database's
backends (their process titles name it, ``/proc``), read before and after the timed turns, so use
a database of your own on a shared server. Rounds alternate which checkout goes first.

Usage:
    python benchmarks/pg_turn.py --postgres postgresql://postgres@127.0.0.1:5432/mydb \
        [--baseline DIR] [--rounds 5] [--turns 40] [--kinds pg,sqlite]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))


def _server_ticks(database: str) -> dict[tuple[int, int], int]:
    from _pg import BackendCpu

    cpu = BackendCpu(database)
    cpu._sample()
    return dict(cpu._ticks)


def child(kind: str, target: str, turns: int, database: str) -> None:
    """One cell: warm-up, then ``turns`` timed turns; prints one JSON line."""
    from live_turn import turn

    from convmem_graph.memory import ConvMemory

    mem = ConvMemory.open(target)
    memory_id = "m-" + uuid.uuid4().hex[:8]
    for i in range(10):
        mem.ingest(memory_id, turn(i), source="openai")
    before = _server_ticks(database) if kind == "pg" else {}
    walls = []
    cpu0 = time.process_time()
    for i in range(10, 10 + turns):
        t0 = time.perf_counter()
        mem.ingest(memory_id, turn(i), source="openai")
        walls.append((time.perf_counter() - t0) * 1000)
    cpu = (time.process_time() - cpu0) * 1000 / turns
    server = 0.0
    if kind == "pg":
        after = _server_ticks(database)
        server = sum(v - before.get(k, 0) for k, v in after.items()) / os.sysconf("SC_CLK_TCK") * 1000 / turns
    walls.sort()
    p95 = walls[int(0.95 * (turns - 1))]
    print(json.dumps({"p50": statistics.median(walls), "p95": p95, "cpu": cpu, "server": server}))


def _cell(checkout: Path, kind: str, args: argparse.Namespace, database: str) -> dict[str, float]:
    from _pg import scratch_schema

    env = dict(os.environ, PYTHONPATH=str(checkout))
    cmd = [sys.executable, __file__, "--child", kind, "--turns", str(args.turns), "--database", database]
    if kind == "pg":
        with scratch_schema(args.postgres, "cm_pgturn") as url:
            done = subprocess.run(
                [*cmd, "--target", url], cwd=checkout, env=env, capture_output=True, text=True
            )
    else:
        with tempfile.TemporaryDirectory() as tmp:
            target = str(Path(tmp) / "turn.db")
            done = subprocess.run(
                [*cmd, "--target", target], cwd=checkout, env=env, capture_output=True, text=True
            )
    if done.returncode:
        raise SystemExit(done.stderr[-3000:])
    result: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--postgres", default=os.environ.get("CONVMEM_BENCH_POSTGRES_URL"))
    parser.add_argument("--baseline", type=Path)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--turns", type=int, default=40)
    parser.add_argument("--kinds", default="pg,sqlite")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--target", help=argparse.SUPPRESS)
    parser.add_argument("--database", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.target, args.turns, args.database)
        return 0
    if not args.postgres:
        parser.error("--postgres URL is required")
    from sqlalchemy.engine import make_url

    database = str(make_url(args.postgres).database)
    here = Path(__file__).resolve().parent.parent
    sides = [("this", here)] + ([("baseline", args.baseline.resolve())] if args.baseline else [])
    kinds = args.kinds.split(",")
    print(f"load before: {os.getloadavg()[0]:.1f}")
    got: dict[tuple[str, str], list[dict[str, float]]] = {}
    for k in range(args.rounds):
        for kind in kinds:
            for name, checkout in sides if k % 2 == 0 else sides[::-1]:
                row = _cell(checkout, kind, args, database)
                got.setdefault((name, kind), []).append(row)
                print(
                    f"round {k + 1} {name} {kind}: " + ", ".join(f"{key} {v:.2f}" for key, v in row.items())
                )
                sys.stdout.flush()
    print(f"load after: {os.getloadavg()[0]:.1f}")

    def med(name: str, kind: str, key: str) -> float:
        return statistics.median(r[key] for r in got[(name, kind)])

    for (name, kind), rows in sorted(got.items()):
        print(f"{name} {kind} medians: " + ", ".join(f"{key} {med(name, kind, key):.2f}" for key in rows[0]))
    if "sqlite" in kinds and "pg" in kinds:
        # One SQLite reference for every side: the SQLite turn is the same code in both checkouts
        # unless the change touched it, and pooling halves its noise.
        lite = statistics.median(r["p50"] for name, _ in sides for r in got[(name, "sqlite")])
        lite_cpu = statistics.median(r["cpu"] for name, _ in sides for r in got[(name, "sqlite")])
        for name, _ in sides:
            pg = med(name, "pg", "p50")
            pg_cpu = statistics.median(r["cpu"] + r["server"] for r in got[(name, "pg")])
            print(
                f"{name}: PostgreSQL p50 / SQLite p50 (no history) = {pg / lite:.2f} (target <= 1.5); "
                f"PostgreSQL client + server CPU / SQLite CPU = {pg_cpu / lite_cpu:.2f}"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
