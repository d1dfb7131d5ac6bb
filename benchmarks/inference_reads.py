"""Per-turn inference cost against what used to grow it: expired durable facts, a custom list's family.

Issue 24 item 1 (every per-turn read bounded by what the turn touches). Two memories per size
(1k / 10k / 100k facts by default), each timed with ``infer_from_store`` (what ``update_variables``
runs when a turn touched the family):

- ``language``: N durable facts that expired (an API's facts with an expiry) and 40 live ones;
  the old code subtracted the expired ones with a count over all of them on every turn;
- ``like`` list: a custom list variable (``VariableSpec(name="like", type="list")``) over N
  ``like:`` facts of distinct items; the old code read and made a model of every one per turn;
- ``hobbies`` over N ``pref:`` / ``habit:`` facts of distinct items (bounded on both sides: a
  check that the walk through the key-family index, two families merged, costs what the old
  partial index's did).

With ``--baseline DIR`` (a checkout of the start revision) each side fills its own file once, in
its own process; then every round runs one fresh process per side (order alternating), each
timing ``--calls`` calls per cell after one warm-up call (which may move the expiry mark). Printed
per cell: the median over rounds of each round's median wall and CPU (``time.process_time``) ms,
and the load average before and after. Only public calls, so any checkout with ``infer_from_store``
runs it.

Usage:
    PYTHONPATH=. python benchmarks/inference_reads.py [--sizes 1000,10000,100000] [--rounds 5]
        [--calls 20] [--baseline DIR] [--workdir DIR]
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
from pathlib import Path

NOW = 1_767_000_000_000
DAY = 86_400_000
_BATCH = 5_000


def fill(db: Path, sizes: list[int]) -> None:
    """Create the two memories of each size in ``db`` (this process's checkout writes them)."""
    from convmem_graph.models import FragmentCandidate, FragmentOp
    from convmem_graph.store import MemoryStore

    store = MemoryStore.from_url(str(db))
    try:
        for n in sizes:
            expired = [
                FragmentCandidate(
                    content=f"User booked seat {i}.",
                    key=f"plan:seat_{i}",
                    expires_at=NOW - DAY // 2,
                    observed_at=NOW - DAY - i,
                )
                for i in range(n)
            ]
            live = [
                FragmentCandidate(content=f"用户喜欢围棋{i}。", key=f"pref:weiqi_{i}", observed_at=NOW - i)
                for i in range(40)
            ]
            likes = [
                FragmentCandidate(
                    content=f"User likes thing {i}.", key=f"like:thing_{i}", observed_at=NOW - i
                )
                for i in range(n)
            ]
            hobbies = [
                FragmentCandidate(
                    content=f"User enjoys hobby {i}.",
                    key=f"{('pref', 'habit')[i % 2]}:hobby_{i}",
                    observed_at=NOW - i,
                )
                for i in range(n)
            ]
            memories = ((f"lang_{n}", expired + live), (f"like_{n}", likes), (f"hobby_{n}", hobbies))
            for memory_id, facts in memories:
                for k in range(0, len(facts), _BATCH):
                    ops = [FragmentOp(op="add", candidate=c) for c in facts[k : k + _BATCH]]
                    store.commit_extraction(memory_id, ops, upto_seq=0, now_ms=NOW - DAY)
    finally:
        store.close()


def measure(db: Path, sizes: list[int], calls: int) -> dict[str, list[float]]:
    """Median wall and CPU ms of ``calls`` inference calls per cell (after one warm-up call each)."""
    from convmem_graph.extractors.variables import DEFAULT_VARIABLE_SPECS
    from convmem_graph.models import VariableSpec
    from convmem_graph.nodes._inference import infer_from_store
    from convmem_graph.store import MemoryStore

    language = [s for s in DEFAULT_VARIABLE_SPECS if s.name == "language"]
    like = [VariableSpec(name="like", type="list")]
    hobbies = [s for s in DEFAULT_VARIABLE_SPECS if s.name == "hobbies"]
    out: dict[str, list[float]] = {}
    store = MemoryStore.from_url(str(db))
    try:
        for n in sizes:
            cells = (
                ("language", f"lang_{n}", language),
                ("like", f"like_{n}", like),
                ("hobbies", f"hobby_{n}", hobbies),
            )
            for name, memory_id, specs in cells:
                infer_from_store(store, memory_id, specs, now_ms=NOW)  # warm-up (may move the mark)
                wall, cpu = [], []
                for k in range(calls):
                    w, c = time.perf_counter(), time.process_time()
                    infer_from_store(store, memory_id, specs, now_ms=NOW + 1 + k)
                    wall.append((time.perf_counter() - w) * 1000)
                    cpu.append((time.process_time() - c) * 1000)
                out[f"{name} {n}"] = [statistics.median(wall), statistics.median(cpu)]
    finally:
        store.close()
    return out


def _child(code: Path, *args: str) -> str:
    env = {**os.environ, "PYTHONPATH": str(code)}
    done = subprocess.run(
        [sys.executable, __file__, *args], env=env, check=True, capture_output=True, text=True
    )
    return done.stdout


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", default="1000,10000,100000")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--baseline", type=Path, default=None, help="a checkout of earlier code")
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument("--child", choices=["fill", "measure"], default=None, help=argparse.SUPPRESS)
    parser.add_argument("--db", type=Path, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    if args.child == "fill":
        fill(args.db, sizes)
        return 0
    if args.child == "measure":
        print(json.dumps(measure(args.db, sizes, args.calls)))
        return 0
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="convmem-inference-reads-"))
    workdir.mkdir(parents=True, exist_ok=True)
    here = Path(__file__).resolve().parent.parent
    sides = {"this": here} | ({"baseline": args.baseline.resolve()} if args.baseline else {})
    print(f"machine: {os.cpu_count()} CPUs, load {os.getloadavg()}; sides: {sides}")
    for side, code in sides.items():
        db = workdir / f"{side}.db"
        if not db.exists():
            t0 = time.perf_counter()
            _child(code, "--child", "fill", "--db", str(db), "--sizes", args.sizes)
            print(f"filled {side} in {time.perf_counter() - t0:.0f} s ({db.stat().st_size / 1e6:.1f} MB)")
    results: dict[tuple[str, str], list[list[float]]] = {}
    for r in range(args.rounds):
        order = list(sides) if r % 2 == 0 else list(reversed(sides))
        for side in order:
            db = workdir / f"{side}.db"
            out = json.loads(
                _child(
                    sides[side],
                    "--child",
                    "measure",
                    "--db",
                    str(db),
                    "--sizes",
                    args.sizes,
                    "--calls",
                    str(args.calls),
                )  # fmt: skip
            )
            for cell, figures in out.items():
                results.setdefault((side, cell), []).append(figures)
    print(f"load after: {os.getloadavg()}; medians over {args.rounds} rounds of each round's median (ms)")
    cells = [f"{name} {n}" for n in sizes for name in ("language", "like", "hobbies")]
    print(f"{'cell':16}" + "".join(f" {side + ' wall':>15} {side + ' cpu':>14}" for side in sides))
    for cell in cells:
        row = f"{cell:16}"
        for side in sides:
            runs = results[(side, cell)]
            wall, cpu = (statistics.median(x[i] for x in runs) for i in (0, 1))
            row += f" {wall:>15.3f} {cpu:>14.3f}"
        print(row)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
