"""Load test of ``convmem serve`` on loopback: webhook deliveries per second and proxy first-byte overhead.

Each round starts ``convmem serve`` as a process on a fresh SQLite file and a local streaming fake
upstream model, then:

1. posts ``--deliveries`` signed TRTC 903 sentences (``--tasks`` calls, several sentences per round)
   from ``--concurrency`` client threads and reports acknowledged deliveries/s (each one committed
   to the inbox before its 200) and processed deliveries/s (until the worker drained the inbox:
   lifecycle runs included);
2. sends ``--proxy-requests`` streamed chat completions, interleaving one straight to the upstream
   and one through the proxy (memory id in ``X-User-Id``, so the memory block is built each time),
   and reports the time to the first body byte of both and the proxy's added latency per pair
   (p50/p95).

Everything binds to 127.0.0.1 and stops by itself (bounded loops and timeouts).

    python benchmarks/serve.py --deliveries 2000 --concurrency 8 --proxy-requests 300 --rounds 3
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from convmem_graph.signatures import sign_trtc  # noqa: E402
from tests.fakes.chat_upstream import ChatUpstream  # noqa: E402

KEY = "benchKey2026"
UPSTREAM_KEY = "sk-bench"
BOT = "ai_bench_bot"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _start_server(db: Path, upstream_url: str, worker: str) -> tuple[subprocess.Popen[bytes], str]:
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("CONVMEM_")}
    env.update(
        PYTHONPATH=str(ROOT),
        CONVMEM_TRTC_CALLBACK_KEY=KEY,
        CONVMEM_UPSTREAM_URL=upstream_url,
        CONVMEM_UPSTREAM_API_KEY=UPSTREAM_KEY,
        CONVMEM_BOT_IDS=BOT,
        CONVMEM_WORKER_PROCESS="1" if worker == "process" else "0",
    )
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "convmem_graph",
            "serve",
            "--db",
            str(db),
            "--port",
            str(port),
            "--log-level",
            "error",
        ],
        cwd=ROOT,
        env=env,
    )
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{base}/healthz", timeout=2).status_code == 200:
                return proc, base
        except httpx.TransportError:
            time.sleep(0.2)
    proc.kill()
    raise SystemExit("convmem serve did not start within 90 s")


def _deliveries(n: int, tasks: int) -> list[bytes]:
    # Sent now: the server refuses a delivery whose send time is outside its replay window.
    t0 = int(time.time() * 1000)
    out = []
    for i in range(n):
        task = i % tasks
        k = i // tasks
        body = {
            "EventGroupId": 9,
            "EventType": 903,
            "CallbackTs": t0 + k * 1000 + 40,
            "EventInfo": {
                "EventMsTs": t0 + k * 1000,
                "TaskId": f"bench_task_{task}",
                "RoomId": f"room_{task}",
                "RoomIdType": 1,
                "Payload": {
                    "UserId": f"u_bench_{task}",
                    "Text": f"第{k}句：我今天跑了{k % 20 + 1}公里。",
                    "RoundId": f"r-{k // 3}",
                },
            },
        }
        out.append(json.dumps(body, ensure_ascii=False).encode("utf-8"))
    return out


def _post_all(base: str, bodies: list[bytes], concurrency: int) -> float:
    errors: list[int] = []

    def worker(part: list[bytes]) -> None:
        with httpx.Client(timeout=30) as client:
            for body in part:
                r = client.post(
                    f"{base}/webhooks/trtc",
                    content=body,
                    headers={"Content-Type": "application/json", "Sign": sign_trtc(body, KEY)},
                )
                if r.status_code != 200:
                    errors.append(r.status_code)

    threads = [threading.Thread(target=worker, args=(bodies[i::concurrency],)) for i in range(concurrency)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join(600)
    if errors:
        raise SystemExit(f"{len(errors)} deliveries were refused: {sorted(set(errors))}")
    return time.perf_counter() - start


def _wait_drained(base: str, timeout: float = 900) -> None:
    deadline = time.monotonic() + timeout
    while httpx.get(f"{base}/healthz", timeout=10).json()["pending"] > 0:
        if time.monotonic() > deadline:
            raise SystemExit("the inbox did not drain in time")
        time.sleep(0.05)


def _ttfb(client: httpx.Client, url: str, headers: dict[str, str], body: dict[str, object]) -> float:
    start = time.perf_counter()
    with client.stream("POST", url, json=body, headers=headers) as response:
        if response.status_code != 200:
            raise SystemExit(f"{url} answered {response.status_code}")
        first = 0.0
        for _ in response.iter_raw():
            if not first:
                first = time.perf_counter() - start
        if not first:
            raise SystemExit(f"{url} sent no body")
    return first


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def run_round(args: argparse.Namespace, worker: str) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp, ChatUpstream(key=UPSTREAM_KEY, lifetime_s=1800) as upstream:
        proc, base = _start_server(Path(tmp) / "serve.db", upstream.url, worker)
        try:
            bodies = _deliveries(args.deliveries, args.tasks)
            start = time.perf_counter()
            posting = _post_all(base, bodies, args.concurrency)
            _wait_drained(base)
            processing = time.perf_counter() - start
            direct, proxied, overhead = [], [], []
            request = {
                "model": "m",
                "stream": True,
                "messages": [{"role": "user", "content": "推荐个运动吧"}],
            }
            with httpx.Client(timeout=30) as client:
                for i in range(args.proxy_requests):
                    user = {} if args.no_memory else {"X-User-Id": f"u_bench_{i % args.tasks}"}
                    d = _ttfb(client, upstream.url, {"Authorization": f"Bearer {UPSTREAM_KEY}"}, request)
                    p = _ttfb(client, f"{base}/v1/chat/completions", user, request)
                    direct.append(d)
                    proxied.append(p)
                    overhead.append(p - d)
            _wait_drained(base)
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
    return {
        "acked_per_s": args.deliveries / posting,
        "processed_per_s": args.deliveries / processing,
        "direct_p50_ms": 1000 * statistics.median(direct),
        "proxy_p50_ms": 1000 * statistics.median(proxied),
        "overhead_p50_ms": 1000 * statistics.median(overhead),
        "overhead_p95_ms": 1000 * _percentile(overhead, 0.95),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--deliveries", type=int, default=2000)
    parser.add_argument("--tasks", type=int, default=20, help="calls (memories) the deliveries belong to")
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--proxy-requests", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--worker",
        nargs="+",
        choices=["process", "thread"],
        default=["thread"],
        help="where the lifecycle runs: a server thread (the default) or a child process",
    )
    parser.add_argument(
        "--no-memory", action="store_true", help="proxy requests without a memory id (pure forwarding cost)"
    )
    args = parser.parse_args()
    # Interleaved rounds: the machine's speed drifts, so each mode is measured beside the other.
    results: dict[str, list[dict[str, float]]] = {mode: [] for mode in args.worker}
    for i in range(args.rounds):
        for mode in args.worker:
            r = run_round(args, mode)
            results[mode].append(r)
            print(
                f"round {i + 1} worker={mode}: " + ", ".join(f"{k} {v:.1f}" for k, v in r.items()), flush=True
            )
    for mode, rounds in results.items():
        medians = ", ".join(f"{k} {statistics.median(r[k] for r in rounds):.1f}" for k in rounds[0])
        print(f"median worker={mode}: {medians}")


if __name__ == "__main__":
    main()
