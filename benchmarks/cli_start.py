"""Whole-process call start through the CLI: ``convmem inject`` wall time and its imports.

Runs, in interleaved rounds, a bare ``python -c pass``, ``convmem --help`` and ``convmem inject``
(TRTC LLMConfig with a relevance query; ``--db`` as a path and as a ``sqlite:///`` URL) on a
memory of 10k messages and 1k facts, each as a new process, and prints the medians; then the
slowest imports of one ``convmem inject`` run (``python -X importtime``) and whether LangGraph,
LangChain or LangSmith were imported.

Target (issue 11): ``convmem inject`` median <= 0.35 s.

Usage:
    python benchmarks/cli_start.py [--runs 15] [--workdir DIR]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from convmem_graph.memory import ConvMemory
from convmem_graph.models import FragmentCandidate, FragmentOp, Message

BASE_MS = 1_767_000_000_000
HEAVY = ("langgraph", "langchain_core", "langchain", "langsmith")


def fill(db: str, memory_id: str, messages: int, facts: int) -> None:
    """A memory of ``messages`` messages and ``facts`` facts, its snapshot cached."""
    with ConvMemory.open(db) as mem:
        batch = [
            Message(
                id=f"m{i}",
                role="user" if i % 2 == 0 else "assistant",
                content=f"第{i}条消息：我们聊了芒果和跑步 {i}",
                channel="im",
                source="message",
                timestamp_ms=BASE_MS + i * 1000,
            )
            for i in range(messages)
        ]
        mem.store.add_messages(memory_id, batch)
        ops = [
            FragmentOp(
                op="add", candidate=FragmentCandidate(content=f"用户喜欢芒果{j}号。", key=f"pref:芒果{j}号")
            )
            for j in range(facts)
        ]
        mem.store.commit_extraction(memory_id, ops, upto_seq=mem.store.max_seq(memory_id), now_ms=BASE_MS)
        mem.lifecycle.run(memory_id)


def wall(cmd: list[str], env: dict[str, str] | None = None) -> float:
    """Seconds for one process to run ``cmd`` to completion (it must succeed)."""
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, capture_output=True, env=env, cwd=tempfile.gettempdir())
    return time.perf_counter() - t0


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument(
        "--no-bytecode-cache",
        action="store_true",
        help="keep PYTHONDONTWRITEBYTECODE from the environment (every run compiles the package's sources)",
    )
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument(
        "--baseline",
        type=Path,
        default=None,
        help="a checkout of another version: its inject is timed in the same rounds",
    )
    args = parser.parse_args()
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="convmem-clistart-"))
    workdir.mkdir(parents=True, exist_ok=True)
    db = str(workdir / "cli.db")
    fill(db, "u1", 10_000, 1_000)
    py = sys.executable
    inject = [
        py,
        "-m",
        "convmem_graph",
        "inject",
        "u1",
        "--vendor",
        "trtc-llmconfig",
        "--query",
        "芒果",
        "--db",
        db,
    ]
    commands = {"python -c pass": [py, "-c", "pass"], "convmem --help": [py, "-m", "convmem_graph", "--help"]}
    commands["convmem inject"] = inject
    # The same call start naming the file as a URL (what --help shows): the read-only path too.
    commands["inject sqlite:///"] = [*inject[:-1], f"sqlite:///{db}"]
    commands["convmem show"] = [py, "-m", "convmem_graph", "show", "u1", "--db", db]
    commands["convmem memories"] = [py, "-m", "convmem_graph", "memories", "--db", db]
    # Run from the work directory: the package comes from PYTHONPATH, not the current directory.
    repo = str(Path(__file__).resolve().parents[1])
    base_env = dict(os.environ)
    if not args.no_bytecode_cache:
        # An installed package runs from cached bytecode (pip compiles it; an editable install
        # writes __pycache__ on first import). With PYTHONDONTWRITEBYTECODE set, as on some CI
        # machines, every run would compile ~200 source files first.
        base_env.pop("PYTHONDONTWRITEBYTECODE", None)
    env = {name: {**base_env, "PYTHONPATH": repo} for name in commands}
    if args.baseline is not None:
        commands["inject (baseline)"] = inject
        env["inject (baseline)"] = {**base_env, "PYTHONPATH": str(args.baseline.resolve())}
    with open("/proc/loadavg") if os.path.exists("/proc/loadavg") else open(os.devnull) as f:
        load = f.read().split()[:3]
    cache = "off" if args.no_bytecode_cache else "on"
    print(
        f"machine: {len(os.sched_getaffinity(0))} CPUs, Python {sys.version.split()[0]};"
        f" {args.runs} interleaved runs; bytecode cache {cache}; load average {' '.join(load) or '?'}"
    )
    times: dict[str, list[float]] = {name: [] for name in commands}
    for name, cmd in commands.items():
        wall(cmd, env[name])  # warm the page cache and bytecode; fails early if a version cannot read the db
    for _ in range(args.runs):
        for name, cmd in commands.items():
            times[name].append(wall(cmd, env[name]))
    for name, samples in times.items():
        print(
            f"{name:<18} median {statistics.median(samples):.3f} s"
            f"  (min {min(samples):.3f}, max {max(samples):.3f})"
        )
    out = subprocess.run(
        [py, "-X", "importtime", *inject[1:]],
        check=True,
        capture_output=True,
        text=True,
        env=env["convmem inject"],
        cwd=tempfile.gettempdir(),
    )
    rows = []
    for line in out.stderr.splitlines():
        if line.startswith("import time:") and "|" in line:
            _, cumulative, name = (part.strip() for part in line.removeprefix("import time:").split("|"))
            if cumulative.isdigit():
                rows.append((int(cumulative), name))
    top_level = {name.strip().split(".")[0] for _, name in rows}
    print("\nslowest imports of convmem inject (cumulative ms):")
    for us, name in sorted(rows, reverse=True)[:12]:
        print(f"  {us / 1000:8.1f}  {name}")
    print(f"heavy packages imported: {[h for h in HEAVY if h in top_level] or 'none'}")
    # The read-only call start (a current SQLite file, a cached snapshot) runs without SQLAlchemy.
    print(f"SQLAlchemy imported: {'yes' if 'sqlalchemy' in top_level else 'no'}")
    median = statistics.median(times["convmem inject"])
    print(
        f"\nconvmem inject median {median:.3f} s (target <= 0.35 s: {'met' if median <= 0.35 else 'NOT met'})"
    )
    return 0 if median <= 0.35 else 1


if __name__ == "__main__":
    sys.exit(main())
