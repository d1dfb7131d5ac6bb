"""Replay throughput with model calls at once across memories (issue 11, item 4), fully offline.

Replays LoCoMo through ``Replayer(pacing=ModelPacing(concurrency=K))`` (what ``convmem replay
--model ... --model-concurrency K`` runs in one process) against a fake chat model that answers
after a fixed latency (300 ms by default, ``time.sleep``, so waiting calls hold no CPU). The fake is
``model_economy.CountingFakeChatModel``: it answers the extractor with schema-valid facts and the
summarizer with a short summary, like an OpenAI-compatible model would.

Data: each LoCoMo conversation is cut into memories of ``--sessions-per-memory`` consecutive
sessions (one memory per user of an archive with many users), written as JSON Lines of
OpenAI-style requests with ``user`` naming the memory; ``--memories`` keeps the first N of them.

Rounds are interleaved (K = 1, 8, 32, then again), each on a fresh SQLite database; the medians are
printed with the load average, and the speed-up over K = 1 of the same run.

Usage:
    python benchmarks/model_concurrency.py [../shared/data/locomo/locomo10.json]
        [--latency-ms 300] [--k 1 8 32] [--rounds 3] [--sessions-per-memory 4] [--memories N]
        [--batch 200]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from langchain_core.messages import BaseMessage
from langchain_core.outputs import ChatResult
from model_economy import DEFAULT_LOCOMO, CountingFakeChatModel, load_locomo

from convmem_graph.config import MemoryConfig
from convmem_graph.extractors.pacing import ModelPacing
from convmem_graph.memory import ConvMemory
from convmem_graph.replay import Replayer


class SlowFakeChatModel(CountingFakeChatModel):
    """The counting fake, answering after ``latency_s``; counts the calls in flight at once."""

    latency_s: float = 0.3
    flight: dict[str, Any] = {}

    def model_post_init(self, __context: Any) -> None:
        self.flight = {"lock": threading.Lock(), "now": 0, "peak": 0}

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: Any = None,
        **kwargs: Any,
    ) -> ChatResult:
        f = self.flight
        with f["lock"]:
            f["now"] += 1
            f["peak"] = max(f["peak"], f["now"])
        try:
            time.sleep(self.latency_s)
            return super()._generate(messages, stop, run_manager, **kwargs)
        finally:
            with f["lock"]:
                f["now"] -= 1


def write_archive(
    locomo: Path, folder: Path, sessions_per_memory: int, memories: int | None
) -> tuple[Path, int, int]:
    """Write the replay archive; returns (path, memories, messages)."""
    path = folder / "locomo_memories.jsonl"
    count = messages = 0
    with path.open("w", encoding="utf-8") as fh:
        for conversation, sessions in load_locomo(locomo):
            for start in range(0, len(sessions), sessions_per_memory):
                if memories is not None and count >= memories:
                    break
                memory_id = f"{conversation}_part{start // sessions_per_memory:02d}"
                for session in sessions[start : start + sessions_per_memory]:
                    fh.write(json.dumps({"user": memory_id, "messages": session}, ensure_ascii=False) + "\n")
                    messages += len(session)
                count += 1
    return path, count, messages


def replay_once(archive: Path, db: Path, k: int, latency_s: float, batch: int) -> dict[str, float]:
    """One replay at concurrency ``k`` on a fresh database; returns its figures."""
    chat = SlowFakeChatModel(latency_s=latency_s)
    config = MemoryConfig(extract_after_user_messages=1, structured_output_method="function_calling")
    with ConvMemory.open(str(db), model=chat, config=config) as mem:
        mem.lifecycle.durability = "exit"  # as convmem replay
        replayer = Replayer(
            mem.lifecycle, group_by="user", batch_messages=batch, pacing=ModelPacing(concurrency=k)
        )
        report = replayer.run([archive])
        stats = replayer.gate.stats if replayer.gate is not None else None
    calls = chat.tally.calls["extractor"] + chat.tally.calls["summarizer"]
    return {
        "seconds": report.seconds,
        "messages": report.messages_read,
        "msg_s": report.messages_per_second,
        "calls": calls,
        "peak": float(chat.flight["peak"]),
        "gate_peak": float(stats.peak_in_flight if stats else 0),
    }


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark and print the table."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("locomo", nargs="?", type=Path, default=DEFAULT_LOCOMO)
    parser.add_argument("--latency-ms", type=float, default=300.0)
    parser.add_argument("--k", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--sessions-per-memory", type=int, default=4)
    parser.add_argument("--memories", type=int, default=None)
    parser.add_argument(
        "--batch", type=int, default=200, help="messages per lifecycle run (convmem replay --model: 200)"
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    if not args.locomo.exists():
        print(f"model_concurrency: {args.locomo}: no such file", file=sys.stderr)
        return 2
    latency_s = args.latency_ms / 1000.0
    with tempfile.TemporaryDirectory(prefix="convmem-model-concurrency-") as tmp:
        folder = Path(tmp)
        archive, memories, messages = write_archive(
            args.locomo, folder, args.sessions_per_memory, args.memories
        )
        print(
            f"LoCoMo {args.locomo.name}: {messages:,} messages in {memories} memories "
            f"({args.sessions_per_memory} sessions each), batch {args.batch}, fake model latency "
            f"{args.latency_ms:g} ms; Python {platform.python_version()}, {os.cpu_count()} CPUs"
        )
        print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        results: dict[int, list[dict[str, float]]] = {k: [] for k in args.k}
        for r in range(args.rounds):
            for k in args.k:
                figures = replay_once(archive, folder / f"r{r}_k{k}.db", k, latency_s, args.batch)
                results[k].append(figures)
                print(
                    f"  round {r + 1} K={k:>3}: {figures['msg_s']:8,.1f} msg/s  {figures['seconds']:6.2f} s  "
                    f"{figures['calls']:.0f} calls, peak {figures['peak']:.0f} in flight  "
                    f"(load {os.getloadavg()[0]:.2f})",
                    flush=True,
                )
        load = os.getloadavg()
    base = statistics.median(f["msg_s"] for f in results[args.k[0]])
    print()
    print(
        f"{'K':>4} {'msg/s (median)':>15} {'x K=' + str(args.k[0]):>8} {'seconds':>8} {'calls':>6} "
        f"{'peak in flight':>15} {'model-bound s':>14}"
    )
    for k in args.k:
        rows = results[k]
        rate = statistics.median(f["msg_s"] for f in rows)
        seconds = statistics.median(f["seconds"] for f in rows)
        calls = statistics.median(f["calls"] for f in rows)
        peak = max(f["peak"] for f in rows)
        # What the calls alone cost at K at once (no CPU, perfect packing): the floor for the time.
        bound = calls * latency_s / k
        print(
            f"{k:>4} {rate:>15,.1f} {rate / base:>8.2f} {seconds:>8.2f} {calls:>6.0f} {peak:>15.0f}", end=""
        )
        print(f" {bound:>14.2f}")
    print(f"load average after: {' '.join(f'{x:.2f}' for x in load)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
