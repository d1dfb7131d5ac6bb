"""Paired CPU of the default live turn on two checkouts, fact turns or turns that state no fact.

Issue 24 item 2. ``turn_cost.py`` times a turn in which the user states a new fact (every node
does its full work: extraction, inference, a summary). Most turns of a conversation state none:
then no summary is made and ``inject`` builds the snapshot on its own. This script times either
kind on a memory of ``--warm`` fact turns (turn_cost's), in two worker processes (``--base`` and
``--new`` checkouts), one SQLite file each, in interleaved rounds with the order alternating, and
prints each side's median process CPU per turn and the median of the rounds' paired ratios.

Usage:
    python benchmarks/turn_ab.py --base /work/wt2-base --new . [--kind plain] [--rounds 16] [--turns 20]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path
from typing import Any

from _worker import LineWorker

_WORKER = r"""
import json, sys, tempfile, time
from pathlib import Path
sys.path.insert(0, sys.argv[3])
from turn_cost import turn
from convmem_graph.memory import ConvMemory

def plain(i):
    return [{"role": "user", "content": f"嗯，好的，第{i}次。"}, {"role": "assistant", "content": "明白了。"}]

mem = ConvMemory.open(str(Path(tempfile.mkdtemp(prefix="turn-ab-")) / "t.db"))
warm, kind = int(sys.argv[1]), sys.argv[2]
for i in range(warm):
    mem.ingest("u1", turn(i), source="openai")
send = plain if kind == "plain" else turn
for i in range(20):  # untimed: the first turns of the kind
    mem.ingest("u1", send(10**5 + i), source="openai")
print(json.dumps({"ready": True}), flush=True)
i = warm
for line in sys.stdin:
    n = int(line)
    c0, t0 = time.process_time(), time.perf_counter()
    for _ in range(n):
        mem.ingest("u1", send(i), source="openai")
        i += 1
    cpu, wall = (time.process_time() - c0) * 1000 / n, (time.perf_counter() - t0) * 1000 / n
    print(json.dumps({"cpu": cpu, "wall": wall}), flush=True)
mem.close()
"""


class Side(LineWorker):
    """A worker process running turns on one checkout's code."""

    def __init__(self, root: Path, warm: int, kind: str) -> None:
        here = str(Path(__file__).resolve().parent)
        cmd = [sys.executable, "-c", _WORKER, str(warm), kind, here]
        super().__init__(cmd, {**os.environ, "PYTHONPATH": str(root)}, cwd=root)
        self.read()

    def run(self, turns: int) -> dict[str, Any]:
        """``turns`` turns; their CPU and wall ms per turn."""
        return self.request(str(turns))


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--base", type=Path, required=True)
    parser.add_argument("--new", type=Path, required=True)
    parser.add_argument("--kind", choices=("fact", "plain"), default="fact")
    parser.add_argument("--rounds", type=int, default=16)
    parser.add_argument("--turns", type=int, default=20)
    parser.add_argument("--warm", type=int, default=150, help="fact turns before timing (the memory's size)")
    args = parser.parse_args()
    print(f"kind {args.kind}; load before {os.getloadavg()}")
    base, new = Side(args.base, args.warm, args.kind), Side(args.new, args.warm, args.kind)
    got: dict[str, list[dict[str, Any]]] = {"base": [], "new": []}
    for r in range(args.rounds):
        order = (("base", base), ("new", new)) if r % 2 == 0 else (("new", new), ("base", base))
        for name, side in order:
            got[name].append(side.run(args.turns))
    for side in (base, new):
        side.close()
    print(f"load after {os.getloadavg()}")
    ratios = [n["cpu"] / b["cpu"] for b, n in zip(got["base"], got["new"], strict=True)]
    cpu = {k: statistics.median(x["cpu"] for x in v) for k, v in got.items()}
    wall = {k: statistics.median(x["wall"] for x in v) for k, v in got.items()}
    print(
        f"CPU ms/turn base {cpu['base']:.2f} new {cpu['new']:.2f};"
        f" paired median x{statistics.median(ratios):.3f}"
        f" (below 1 in {sum(r < 1 for r in ratios)}/{len(ratios)} rounds);"
        f" wall ms/turn base {wall['base']:.2f} new {wall['new']:.2f}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
