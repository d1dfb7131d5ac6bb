"""Same-run ratios of this tree against an earlier revision: replay, call start and live turn.

Issue 22 (the store redesign) had to leave the benchmarks unchanged within noise. This script
times the same three workloads through the public API only (``ConvMemory.open``, ``ingest``,
``payload``), so any revision since the first release can be measured against this one:

- **replay**: LoCoMo conversations (``--conversations``, from ``../shared/data``), one ``ingest``
  per session with the clock at the session's date, after one warm-up ingest (imports, compiled
  rules); messages per CPU second.
- **call start**: ``payload(mid, "trtc-llmconfig")`` (no query, as a call opens) on the replayed memories,
  ``--calls`` per memory after one warm-up call; CPU ms per call (p50) and wall p95. Since issue 23
  a call start with no query searches the turns by the recent context (versions before it did no
  search), so the same payload with a query (the conversation's LoCoMo questions, the same work in
  every version) is timed too.
- **live turn**: ``ingest`` of one user/assistant pair that states a new fact (the middleware's
  hand-over after a model call) into a fresh memory, ``--turns`` of them; CPU ms per pair (p50).

Each round runs every tree in its own fresh process (``PYTHONPATH`` set to that tree) on a new
SQLite file, trees alternating which goes first; the figures are medians over rounds and the
ratios are this tree over the base. The load average is printed per round: on a shared host,
read the ratios, not the absolute times.

Usage::

    python benchmarks/redesign_ratios.py [--base 2fe3a68] [--head REV] [--rounds 5] [--conversations 2]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
from io import BytesIO
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
DATA = REPO.parent / "shared" / "data" / "locomo" / "locomo10.json"

#: Runs in a fresh interpreter per (tree, round); prints one JSON line. Public API only.
WORKLOAD = r"""
import json, re, statistics, sys, tempfile, time
from datetime import datetime, timezone
from pathlib import Path
from convmem_graph.memory import ConvMemory

data_path, conversations, calls, turns = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
samples = json.loads(Path(data_path).read_text(encoding="utf-8"))[:conversations]

def session_ms(stamp):
    # LoCoMo dates: "1:56 pm on 8 May, 2023"
    when = datetime.strptime(stamp, "%I:%M %p on %d %B, %Y").replace(tzinfo=timezone.utc)
    return int(when.timestamp() * 1000)

def sessions(sample):
    conv = sample["conversation"]
    user = conv["speaker_a"]
    keys = sorted((k for k in conv if re.fullmatch(r"session_\d+", k)), key=lambda k: int(k.split("_")[1]))
    for key in keys:
        start = session_ms(conv[key + "_date_time"])
        msgs = [
            {"role": "user" if t["speaker"] == user else "assistant", "content": t["text"]}
            for t in conv[key]
        ]
        yield start, msgs

cpu = time.process_time
out = {}
with tempfile.TemporaryDirectory() as tmp:
    now = [int(time.time() * 1000)]
    mem = ConvMemory.open(str(Path(tmp) / "bench.db"), clock=lambda: now[0])
    # Warm up first: the first run imports and compiles the extractor's rules (a one-time cost
    # per process that grows with the rule set), which is not a per-message cost.
    mem.ingest("warmup", [{"role": "user", "content": "I like tea. 我喜欢喝茶。"}])
    count, c0 = 0, cpu()
    for n, sample in enumerate(samples):
        for start, msgs in sessions(sample):
            now[0] = start
            mem.ingest(f"conv{n}", msgs)
            count += len(msgs)
    out["replay_msgs_per_cpu_s"] = count / (cpu() - c0)
    out["replay_messages"] = count
    now[0] = int(time.time() * 1000)
    cpu_ms, wall_ms = [], []
    for n in range(len(samples)):
        mem.payload(f"conv{n}", "trtc-llmconfig")
        for _ in range(calls):
            c, w = cpu(), time.perf_counter()
            mem.payload(f"conv{n}", "trtc-llmconfig")
            cpu_ms.append((cpu() - c) * 1000)
            wall_ms.append((time.perf_counter() - w) * 1000)
    out["call_start_cpu_p50_ms"] = statistics.median(cpu_ms)
    out["call_start_wall_p95_ms"] = statistics.quantiles(wall_ms, n=20)[-1]
    # With the user's first words as the query: the same work (an episodic search) in every version.
    cpu_ms = []
    for n, sample in enumerate(samples):
        questions = [q["question"] for q in sample["qa"]][:calls]
        for question in questions:
            c = cpu()
            mem.payload(f"conv{n}", "trtc-llmconfig", query=question)
            cpu_ms.append((cpu() - c) * 1000)
    out["query_cpu_p50_ms"] = statistics.median(cpu_ms)
    things = ["榴莲", "羽毛球", "jazz", "拿铁", "hiking", "围棋", "sushi", "摄影", "yoga", "披萨"]
    live = []
    for i in range(turns + 3):
        thing = things[i % len(things)]
        pair = (
            [{"role": "user", "content": f"我最近特别喜欢{thing}{i}号，每周都去。"},
             {"role": "assistant", "content": f"{thing}听起来很棒！"}]
            if i % 2 else
            [{"role": "user", "content": f"I have really got into {thing} {i} lately, every weekend."},
             {"role": "assistant", "content": f"{thing} sounds great!"}]
        )
        c = cpu()
        mem.ingest("live", pair)
        if i >= 3:  # the first turns open the memory and warm the caches
            live.append((cpu() - c) * 1000)
    out["live_turn_cpu_p50_ms"] = statistics.median(live)
    mem.close()
import convmem_graph
out["package"] = convmem_graph.__file__
print(json.dumps(out))
"""

METRICS = (
    ("replay_msgs_per_cpu_s", "replay, messages per CPU second", True),
    ("call_start_cpu_p50_ms", "call start, CPU ms per payload (p50)", False),
    ("call_start_wall_p95_ms", "call start, wall ms (p95)", False),
    ("query_cpu_p50_ms", "call start with a query, CPU ms (p50)", False),
    ("live_turn_cpu_p50_ms", "live turn, CPU ms per pair (p50)", False),
)


def export_tree(rev: str, into: Path) -> Path:
    """Write ``convmem_graph/`` as of ``rev`` under ``into`` (``git archive``); return ``into``."""
    blob = subprocess.run(
        ["git", "-C", str(REPO), "archive", rev, "convmem_graph"], check=True, capture_output=True
    ).stdout
    with tarfile.open(fileobj=BytesIO(blob)) as tar:
        tar.extractall(into, filter="data")
    return into


def run_workload(tree: Path, args: argparse.Namespace) -> dict[str, Any]:
    """One fresh process of the workload against ``tree``'s package."""
    env = os.environ | {"PYTHONPATH": str(tree), "PYTHONHASHSEED": "0"}
    argv = [str(DATA), str(args.conversations), str(args.calls), str(args.turns)]
    # Run from the tree itself: ``python -c`` puts the working directory first on sys.path.
    done = subprocess.run(
        [sys.executable, "-c", WORKLOAD, *argv],
        env=env,
        cwd=tree,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise SystemExit(f"workload failed under {tree}:\n{done.stderr[-2000:]}")
    out = dict(json.loads(done.stdout.strip().splitlines()[-1]))
    if not Path(out.pop("package")).is_relative_to(tree):
        raise SystemExit(f"the workload imported convmem_graph from outside {tree}")
    return out


def main() -> int:
    """Run the interleaved rounds and print medians and ratios."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument(
        "--base", default="2fe3a68", help="the revision to compare with (default: the last release)"
    )
    p.add_argument("--head", help="the revision measured against it (default: this working tree)")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--conversations", type=int, default=2, help="LoCoMo conversations replayed per round")
    p.add_argument("--calls", type=int, default=100, help="call-start payloads per memory")
    p.add_argument("--turns", type=int, default=40, help="live turns per round")
    args = p.parse_args()
    if not DATA.exists():
        raise SystemExit(f"LoCoMo not found at {DATA}")
    with tempfile.TemporaryDirectory() as tmp:
        head = REPO if args.head is None else export_tree(args.head, Path(tmp) / "head")
        trees = {"base": export_tree(args.base, Path(tmp) / "base"), "head": head}
        results: dict[str, list[dict[str, Any]]] = {"base": [], "head": []}
        for r in range(args.rounds):
            order = ("base", "head") if r % 2 == 0 else ("head", "base")
            for name in order:
                results[name].append(run_workload(trees[name], args))
            print(f"round {r + 1}: load {os.getloadavg()[0]:.2f}", file=sys.stderr)
    head_name = args.head or "this tree"
    load = os.getloadavg()[0]
    print(f"base {args.base} vs {head_name}, {args.rounds} interleaved rounds, load now {load:.2f}")
    print(f"{'metric':44} {'base':>10} {'head':>10} {'head/base':>10}")
    for key, label, higher_better in METRICS:
        base = statistics.median(r[key] for r in results["base"])
        head = statistics.median(r[key] for r in results["head"])
        note = " (higher is better)" if higher_better else ""
        print(f"{label + note:44} {base:10.2f} {head:10.2f} {head / base:10.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
