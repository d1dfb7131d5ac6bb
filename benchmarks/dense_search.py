"""Dense search latency versus history length: the turn vectors' brute-force scoring (issue 23).

For memories of 1k, 10k and 100k stored turns, each with a random unit vector of 384 dimensions
(the size of multilingual-e5-small), measures ``MemoryStore.dense_episodes`` (the change check,
the scoring and the read of the ``limit`` nearest turns) with the cache warm and the query's own
embedding excluded (queries are random vectors too). Prints p50 and p95 per size, the bytes the
memory's cached matrix holds, and the top-k recall against exact float32 cosine of the original
vectors.

Random vectors are the hard case for a quantized matrix: their nearest neighbours are barely
nearer than the rest (top cosines ~0.2), so quantization noise reorders them more than it would
real embeddings'.

The databases are built once in ``--workdir`` and reused: run the script from two checkouts
(``PYTHONPATH`` of each) on the same workdir, alternating, for a same-run baseline.

Usage:
    python benchmarks/dense_search.py [--calls 200] [--workdir DIR] [--db postgresql://...]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from _synthetic import add_messages

from convmem_graph.store import MemoryStore, _vectors

SIZES = (1_000, 10_000, 100_000)
DIM = 384
MODEL = "bench-random-384"
K = 48  # the episodic tier's candidate count


def _vectors_for(size: int) -> np.ndarray:
    rng = np.random.default_rng(size)
    matrix = rng.standard_normal((size, DIM)).astype(np.float32)
    matrix /= np.linalg.norm(matrix, axis=1, keepdims=True)
    return matrix


def _fill(store: MemoryStore, memory_id: str, size: int) -> None:
    with store.read() as conn:
        have = conn.exec_driver_sql(
            f"SELECT count(*) FROM cm_turn_vectors WHERE memory_id = '{memory_id}'"
        ).scalar()
    if have == size:
        return
    add_messages(store, memory_id, size)
    with store.read() as conn:
        seqs = [
            int(s)
            for (s,) in conn.exec_driver_sql(
                f"SELECT seq FROM cm_messages WHERE memory_id = '{memory_id}' ORDER BY seq"
            )
        ]
    matrix = _vectors_for(size)
    for start in range(0, size, 5_000):
        rows = [(seqs[i], matrix[i].tolist()) for i in range(start, min(size, start + 5_000))]
        store.save_turn_vectors(memory_id, MODEL, rows)


def _cache_bytes() -> int:
    """Bytes of every numpy array held in the module's cache (whatever the cache's layout)."""
    seen = 0

    def walk(value: Any) -> None:
        nonlocal seen
        if isinstance(value, np.ndarray):
            seen += value.nbytes
        elif isinstance(value, tuple | list):
            for item in value:
                walk(item)
        elif hasattr(value, "__dict__") or hasattr(value, "__slots__"):
            for name in getattr(value, "__slots__", ()) or vars(value):
                walk(getattr(value, name, None))

    for entry in _vectors._cache.values():
        walk(entry)
    return seen


def _recall(store: MemoryStore, memory_id: str, size: int, queries: np.ndarray, k: int) -> float:
    matrix = _vectors_for(size)
    with store.read() as conn:
        seqs = np.asarray(
            [
                int(s)
                for (s,) in conn.exec_driver_sql(
                    f"SELECT seq FROM cm_messages WHERE memory_id = '{memory_id}' ORDER BY seq"
                )
            ]
        )
    found = 0
    for q in queries:
        exact = set(seqs[np.argsort(-(matrix @ q))[:k]].tolist())
        with store.read() as conn:
            near = _vectors.dense_search(conn, memory_id, MODEL, q.tolist(), k)
        found += len(exact & set(near))
    return found / (k * len(queries))


def main() -> int:
    """Run the benchmark and print one JSON line per size."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument("--db", default=None, help="PostgreSQL URL (default: a SQLite file in workdir)")
    parser.add_argument("--sizes", default=",".join(str(s) for s in SIZES))
    parser.add_argument("--label", default="")
    args = parser.parse_args()
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="cm_dense_"))
    workdir.mkdir(parents=True, exist_ok=True)
    url = args.db or str(workdir / "dense.db")
    store = MemoryStore.from_url(url)
    rng = np.random.default_rng(7)
    try:
        for size in (int(s) for s in args.sizes.split(",")):
            memory_id = f"dense_{size}"
            _fill(store, memory_id, size)
            queries = rng.standard_normal((args.calls, DIM)).astype(np.float32)
            queries /= np.linalg.norm(queries, axis=1, keepdims=True)
            store.dense_episodes(memory_id, MODEL, queries[0].tolist(), limit=K)  # warm the cache
            times = []
            for q in queries:
                vector = q.tolist()  # the query's embedding arrives as a list, outside the timing
                started = time.perf_counter()
                store.dense_episodes(memory_id, MODEL, vector, limit=K)
                times.append((time.perf_counter() - started) * 1000)
            times.sort()
            row = {
                "label": args.label,
                "turns": size,
                "p50_ms": round(statistics.median(times), 2),
                "p95_ms": round(times[int(0.95 * (len(times) - 1))], 2),
                "cache_mb": round(_cache_bytes() / 1e6, 1),
                "recall_at_10": round(_recall(store, memory_id, size, queries[:20], 10), 3),
                "recall_at_48": round(_recall(store, memory_id, size, queries[:20], K), 3),
            }
            print(json.dumps(row), flush=True)
    finally:
        store.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
