"""Viewer page times on a large memory: does a 100k-message memory render in under a second?

Builds one memory of N messages (two channels, rounds and turns, some interrupted with an unspoken
tail) plus facts pointing at messages spread over the history, in a fresh SQLite file, then times
each viewer page over HTTP on loopback (uvicorn, the same app ``convmem serve`` runs), interleaving
the pages round by round and printing medians.

    python benchmarks/viewer_pages.py --messages 100000 --rounds 7
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from convmem_graph.memory import ConvMemory  # noqa: E402
from convmem_graph.models import Message  # noqa: E402
from tests.integration.live_server import serve  # noqa: E402

MEMORY = "u_big"
T0 = 1_767_225_600_000  # 2026-01-01


def build(db: Path, n: int) -> list[str]:
    texts = [
        "我今天跑了五公里。",
        "晚上想吃点清淡的。",
        "我对芒果过敏。",
        "周末去杭州看朋友。",
        "最近工作有点忙。",
    ]
    with ConvMemory.open(str(db)) as mem:
        mem.store.ensure_memory(MEMORY)
        batch: list[Message] = []
        for i in range(n):
            voice = i % 3 == 0
            role = "user" if i % 2 == 0 else "assistant"
            content = texts[i % len(texts)] if role == "user" else f"好的，我记住了（{i}）。"
            interrupted = role == "assistant" and i % 17 == 1
            batch.append(
                Message(
                    id=f"m{i:07d}",
                    role=role,
                    content=content,
                    channel="voice" if voice else "im",
                    source="asr" if voice and role == "user" else ("llm" if voice else "message"),
                    timestamp_ms=T0 + i * 7_000,
                    round_id=f"r{i // 2}" if voice else None,
                    turn_id=i // 2 if not voice else None,
                    interrupted=interrupted,
                    original=content + "后面还有没说完的话。" if interrupted else None,
                )
            )
            if len(batch) == 5_000:
                mem.store.add_messages(MEMORY, batch)
                batch = []
        if batch:
            mem.store.add_messages(MEMORY, batch)
        ids = []
        for k in range(40):
            frag = mem.store.add_fragment(MEMORY, f"用户的第{k}个事实。", category="other")
            ids.append(frag.id)
        return ids


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    from convmem_graph.server.app import create_app
    from convmem_graph.server.settings import ServeSettings

    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "big.db"
        t = time.perf_counter()
        fact_ids = build(db, args.messages)
        print(f"built {args.messages:,} messages in {time.perf_counter() - t:.1f} s")
        app = create_app(ServeSettings(db=str(db), token=None))
        with serve(app) as base, httpx.Client(base_url=base, timeout=60) as client:
            first = client.get(f"/memories/{MEMORY}").text
            older = first.split('rel="prev" href="', 1)[1].split('"', 1)[0].replace("&amp;", "&")
            pages = {
                "memories list": "/",
                "memory page (newest messages)": f"/memories/{MEMORY}",
                "memory page (older page)": older,
                "memory page (fact selected)": f"/memories/{MEMORY}?fact={fact_ids[3]}",
                "inject preview (trtc, query)": f"/memories/{MEMORY}/inject?query=芒果",
                "lifecycle": f"/memories/{MEMORY}/lifecycle",
            }
            times: dict[str, list[float]] = {name: [] for name in pages}
            for _ in range(args.rounds):
                for name, path in pages.items():  # interleaved: drift hits every page alike
                    t = time.perf_counter()
                    r = client.get(path)
                    times[name].append((time.perf_counter() - t) * 1000)
                    assert r.status_code == 200, (path, r.status_code)
            print(f"{args.messages:,} messages, {args.rounds} rounds, median (min-max) ms:")
            for name, values in times.items():
                print(f"  {name:32s} {statistics.median(values):8.1f}  ({min(values):.1f}-{max(values):.1f})")
            worst = max(statistics.median(v) for v in times.values())
            print(f"slowest page median: {worst:.1f} ms ({'under' if worst < 1000 else 'OVER'} 1 s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
