"""Call-start payload latency versus history length.

For memories with 1k, 10k and 100k messages (and 100, 1k, 10k fragments), measures the time of
``ConvMemory.payload()`` for TRTC (whole StartAIConversation body), Agora join and OpenAI
messages, with a relevance query. Prints p50 and p95 per size and vendor.

Targets (issue 4): p95 <= 5 ms at every size; p95 at 100k / p95 at 1k <= 1.5.

Usage:
    python benchmarks/call_start.py [--calls 300] [--workdir DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from functools import partial
from pathlib import Path

from convmem_graph import MemoryConfig
from convmem_graph.memory import ConvMemory
from convmem_graph.models import FragmentCandidate, FragmentOp, Message

SIZES = ((1_000, 100), (10_000, 1_000), (100_000, 10_000))
TOPICS = ["芒果", "跑步", "西湖", "猫", "成都", "咖啡", "coffee", "hiking", "guitar", "sushi"]


def _fill(mem: ConvMemory, memory_id: str, messages: int, fragments: int) -> None:
    store = mem.store
    base = 1_767_000_000_000
    batch: list[Message] = []
    for i in range(messages):
        role = "user" if i % 2 == 0 else "assistant"
        text = f"第{i}条消息：我们聊了{TOPICS[i % len(TOPICS)]}，还有别的事情 {i}"
        batch.append(
            Message(
                id=f"m{i}",
                role=role,
                content=text,
                channel="im",
                source="message",
                timestamp_ms=base + i * 1000,
            )
        )
        if len(batch) == 5000:
            store.add_messages(memory_id, batch)
            batch = []
    if batch:
        store.add_messages(memory_id, batch)
    ops = [
        FragmentOp(
            op="add",
            candidate=FragmentCandidate(
                content=f"用户喜欢{TOPICS[j % len(TOPICS)]}（第{j}条事实）",
                category="preference",
                key=f"like:{j}",
            ),
        )
        for j in range(fragments)
    ]
    store.commit_extraction(memory_id, ops, upto_seq=store.max_seq(memory_id), now_ms=base)
    store.set_manual_variable(memory_id, "name", "林晓")
    mem.lifecycle.run(memory_id)  # inject refreshes the cached snapshot


def _measure(fn: object, calls: int) -> tuple[float, float]:
    samples = []
    for _ in range(calls):
        t0 = time.perf_counter()
        fn()  # type: ignore[operator]
        samples.append((time.perf_counter() - t0) * 1000)
    samples.sort()
    return statistics.median(samples), samples[int(0.95 * (len(samples) - 1))]


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--workdir", type=Path, default=None)
    args = parser.parse_args()
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="convmem-callstart-"))
    workdir.mkdir(parents=True, exist_ok=True)
    mem = ConvMemory.open(str(workdir / "callstart.db"), config=MemoryConfig())
    print(f"machine: {os.cpu_count()} CPUs, Python {sys.version.split()[0]}; {args.calls} calls per cell")
    results: dict[tuple[int, str], tuple[float, float]] = {}
    examples = Path(__file__).resolve().parents[1] / "examples" / "options"

    def options(name: str) -> dict[str, object]:
        loaded = json.loads((examples / name).read_text(encoding="utf-8"))
        return {k: v for k, v in loaded.items() if not k.startswith("_")}

    vendors = {
        "trtc": {**options("trtc.json"), "persona": "你是「小雨」。", "query": "芒果"},
        "agora": {**options("agora.json"), "persona": "你是「小雨」。", "query": "芒果"},
        "openai": {"persona": "You are Xiaoyu.", "query": "coffee"},
    }
    for messages, fragments in SIZES:
        memory_id = f"bench_{messages}"
        t0 = time.perf_counter()
        _fill(mem, memory_id, messages, fragments)
        print(
            f"filled {memory_id}: {messages:,} messages, {fragments:,} fragments "
            f"in {time.perf_counter() - t0:.1f} s"
        )
        for vendor, options in vendors.items():
            mem.payload(memory_id, vendor, **options)  # warm-up
            call = partial(mem.payload, memory_id, vendor, **options)
            results[(messages, vendor)] = _measure(call, args.calls)
    print(f"\n{'messages':>9} {'fragments':>9} {'vendor':>7} {'p50 ms':>8} {'p95 ms':>8}")
    for messages, fragments in SIZES:
        for vendor in vendors:
            p50, p95 = results[(messages, vendor)]
            print(f"{messages:>9,} {fragments:>9,} {vendor:>7} {p50:>8.2f} {p95:>8.2f}")
    for vendor in vendors:
        ratio = results[(100_000, vendor)][1] / results[(1_000, vendor)][1]
        print(f"{vendor}: p95(100k) / p95(1k) = {ratio:.2f}")
    mem.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
