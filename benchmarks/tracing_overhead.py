"""What the OpenTelemetry spans cost: per lifecycle run and per ``convmem serve`` request.

Issue 26. Three conditions, timed in the same process in interleaved rounds (the order rotates
each round, so a burst of load from the machine's other tenants falls on every condition alike):

- ``off``: nothing wrapped, as without ``opentelemetry-api`` (the graph and the app are built
  with :func:`convmem_graph.tracing.enabled` answering ``False``);
- ``noop``: wrapped, but no tracer provider configured (``opentelemetry-api`` installed and not
  set up: OpenTelemetry's API hands out non-recording spans);
- ``on``: wrapped, spans recorded by the SDK and handed to an in-memory exporter through a
  ``SimpleSpanProcessor`` (export inline, the dearest set-up; a ``BatchSpanProcessor`` moves the
  export to a thread).

A lifecycle run is ``ConvMemory.ingest`` of one user/assistant turn stating a new fact, on a
SQLite file (each condition its own), so every node runs (6 node spans). A request is ``GET
/livez`` (one request span and nothing else: the bare cost) and ``POST /api/v2/apps/memory/add``
of the Bailian-compatible API (a request span around a lifecycle run), sent through Starlette's
TestClient in process. Printed: medians of wall ms and CPU ms per call, and each condition's
difference to ``off``, with the load average before and after.

Usage:
    PYTHONPATH=. python benchmarks/tracing_overhead.py [--runs 40] [--requests 200] [--rounds 5]
"""

from __future__ import annotations

import argparse
import functools
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any
from unittest import mock

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import convmem_graph.server.app as server_app
import convmem_graph.tracing as tracing
from convmem_graph.memory import ConvMemory

CONDITIONS = ("off", "noop", "on")
THINGS = ["榴莲", "羽毛球", "爵士乐", "拿铁", "徒步", "围棋", "寿司", "摄影", "瑜伽", "披萨", "滑雪", "钢琴"]


def turn(i: int) -> list[dict[str, str]]:
    """One turn stating a new fact (extract, variables, summarize and inject all run)."""
    thing = THINGS[i % len(THINGS)]
    return [
        {"role": "user", "content": f"我最近特别喜欢{thing}{i}号，每周都去。"},
        {"role": "assistant", "content": f"{thing}听起来很棒！你喜欢它哪一点？"},
    ]


@contextmanager
def unwrapped() -> Iterator[None]:
    """Build graphs and apps as if OpenTelemetry were not installed."""
    with (
        mock.patch.object(tracing, "enabled", lambda: False),
        mock.patch.object(server_app, "tracing_enabled", lambda: False),
    ):
        yield


@contextmanager
def condition(name: str, provider: TracerProvider) -> Iterator[None]:
    """Spans of the wrapped graph/app go to ``provider`` (``on``) or to the unconfigured API."""
    tracing.use_tracer_provider(provider if name == "on" else None)
    try:
        yield
    finally:
        tracing.use_tracer_provider(None)


def ingest(mem: ConvMemory, i: int) -> None:
    """One lifecycle run: turn ``i`` of the benchmark's user."""
    mem.ingest("u_bench", turn(i), source="openai")


def livez(client: Any, _i: int) -> None:
    """One bare request."""
    client.get("/livez")


def call(node: Callable[[dict[str, Any]], Any], state: dict[str, Any], _i: int) -> None:
    """One call of a (wrapped or plain) node."""
    node(state)


def timed(fn: Callable[[int], Any], start: int, count: int) -> tuple[list[float], float]:
    """Wall ms of each ``fn(start + k)``, and the process's CPU ms per call over the batch."""
    out = []
    c0 = time.process_time()
    for k in range(count):
        t0 = time.perf_counter()
        fn(start + k)
        out.append((time.perf_counter() - t0) * 1000)
    return out, (time.process_time() - c0) * 1000 / count


def summary(label: str, wall: dict[str, list[float]], cpu: dict[str, list[float]]) -> None:
    """Print medians per condition and the difference to ``off``."""
    base_wall = statistics.median(wall["off"])
    base_cpu = statistics.median(cpu["off"])
    print(f"\n{label}")
    print(f"  {'condition':<10}{'wall ms (median)':>18}{'vs off':>10}{'CPU ms/call':>14}{'vs off':>10}")
    for name in CONDITIONS:
        w, c = statistics.median(wall[name]), statistics.median(cpu[name])
        print(f"  {name:<10}{w:>18.3f}{w - base_wall:>+10.3f}{c:>14.3f}{c - base_cpu:>+10.3f}")


def main() -> None:
    """Run the interleaved rounds and print the table."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=40, help="lifecycle runs per condition per round")
    ap.add_argument("--requests", type=int, default=200, help="GET /livez per condition per round")
    ap.add_argument("--adds", type=int, default=20, help="Bailian adds per condition per round")
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    from fastapi.testclient import TestClient

    from convmem_graph.server.app import create_app
    from convmem_graph.server.settings import ServeSettings

    print(f"machine: {os.cpu_count()} CPUs, Python {sys.version.split()[0]}, load before {os.getloadavg()}")
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    with tempfile.TemporaryDirectory() as tmp:
        mems: dict[str, ConvMemory] = {}
        clients: dict[str, TestClient] = {}
        for name in CONDITIONS:
            with unwrapped() if name == "off" else nullcontext():
                mems[name] = ConvMemory.open(str(Path(tmp) / f"{name}.db"))
                _ = mems[name].lifecycle.graph  # compiled now: wrapped or not, per the condition
                settings = ServeSettings(
                    _env_file=None,
                    db=str(Path(tmp) / f"serve-{name}.db"),
                    token=None,
                    allowed_hosts=["testserver"],  # what TestClient sends as Host
                )
                clients[name] = TestClient(create_app(settings)).__enter__()
        run_wall: dict[str, list[float]] = {n: [] for n in CONDITIONS}
        run_cpu: dict[str, list[float]] = {n: [] for n in CONDITIONS}
        req_wall: dict[str, list[float]] = {n: [] for n in CONDITIONS}
        req_cpu: dict[str, list[float]] = {n: [] for n in CONDITIONS}
        add_wall: dict[str, list[float]] = {n: [] for n in CONDITIONS}
        add_cpu: dict[str, list[float]] = {n: [] for n in CONDITIONS}
        spans: dict[str, int] = dict.fromkeys(("run", "livez", "add"), 0)

        def exported(kind: str, name: str) -> None:
            if name == "on":
                spans[kind] += len(exporter.get_finished_spans())
            exporter.clear()

        def add(client: TestClient, i: int) -> None:
            body = {"user_id": "u_bench", "messages": turn(i)}
            response = client.post("/api/v2/apps/memory/add", json=body)
            assert response.status_code == 200, response.text

        # Warm-up: first runs compile rules, open pools, fill caches.
        for name in CONDITIONS:
            with condition(name, provider):
                for i in range(3):
                    mems[name].ingest("u_warm", turn(i), source="openai")
                    clients[name].get("/livez")
                    add(clients[name], i)
        exporter.clear()
        for r in range(args.rounds):
            order = CONDITIONS[r % 3 :] + CONDITIONS[: r % 3]
            for name in order:
                with condition(name, provider):
                    base = r * args.runs
                    w, c = timed(functools.partial(ingest, mems[name]), base, args.runs)
                    run_wall[name] += w
                    run_cpu[name].append(c)
                    exported("run", name)
                    w, c = timed(functools.partial(livez, clients[name]), 0, args.requests)
                    req_wall[name] += w
                    req_cpu[name].append(c)
                    exported("livez", name)
                    w, c = timed(functools.partial(add, clients[name]), r * args.adds, args.adds)
                    add_wall[name] += w
                    add_cpu[name].append(c)
                    exported("add", name)
        for client in clients.values():
            client.__exit__(None, None, None)
        for mem in mems.values():
            mem.close()

    # The wrapper alone around a node that does nothing: the per-node span cost without the
    # run's own noise (a lifecycle run of ~20-40 ms varies by more than its 6 spans cost).
    def bare(state: dict[str, Any]) -> dict[str, Any]:
        return {}

    with unwrapped():
        plain = tracing.traced_node("inject", bare)
    wrapped = tracing.traced_node("inject", bare)
    node_wall: dict[str, list[float]] = {n: [] for n in CONDITIONS}
    node_cpu: dict[str, list[float]] = {n: [] for n in CONDITIONS}
    state = {"memory_id": "u_bench"}
    for r in range(args.rounds):
        for name in CONDITIONS[r % 3 :] + CONDITIONS[: r % 3]:
            fn = plain if name == "off" else wrapped
            with condition(name, provider):
                w, c = timed(functools.partial(call, fn, state), 0, 2000)
            node_wall[name] += w
            node_cpu[name].append(c)
            exporter.clear()
    per = {"run": args.runs, "livez": args.requests, "add": args.adds}
    print(
        f"rounds {args.rounds} x (runs {args.runs}, GET /livez {args.requests}, Bailian adds {args.adds}) "
        "per condition; spans per call with spans on: "
        + ", ".join(f"{k} {spans[k] / (args.rounds * n):.1f}" for k, n in per.items())
    )
    summary("lifecycle run (ConvMemory.ingest of one turn, 6 nodes)", run_wall, run_cpu)
    summary("request GET /livez (request span only)", req_wall, req_cpu)
    summary("request POST /api/v2/apps/memory/add (request span + lifecycle run)", add_wall, add_cpu)
    summary("one node call, the node doing nothing (the span alone)", node_wall, node_cpu)
    print(f"\nload after {os.getloadavg()}")
    provider.shutdown()


if __name__ == "__main__":
    main()
