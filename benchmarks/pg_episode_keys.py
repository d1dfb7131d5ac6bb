"""PostgreSQL's episodic index: what its key design costs the message insert and the search.

Issue 24's PostgreSQL replay cell asked whether another key design for ``cm_episodes`` would make
the message insert clearly cheaper on the server. This replays the store's own insert statement
(:func:`convmem_graph.store.postgres._pg_followed_sql`: messages, episodic rows, snapshot drop and
stamp in one CTE) with real LoCoMo turns, 30 memories of 210 messages a round, into schemas that
differ only in the episodic index:

- ``today``: ``terms tsvector`` of ``'<7 hex bucket>_<stem>'`` lexemes, GIN ``tsvector_ops``;
- ``int8``: ``keys bigint[]`` of an 8-byte blake2b of (bucket, stem), GIN ``array_ops``;
- ``int4``: the same with a 4-byte hash (``integer[]``);
- ``prefix5``: today's tsvector with the bucket in 5 base-64 characters instead of 7 hex;
- ``no_gin``: today's side table without its GIN index (what the GIN part costs);
- ``none``: no episodic rows at all (what the whole index costs).

Rounds are interleaved (order reversed every other round); each variant's server CPU is its
backend's ``/proc/<pid>/schedstat`` before and after the round's inserts plus the final
``gin_clean_pending_list``. The client's time to make the terms or keys is thread CPU. Paired
ratios against ``today`` are printed per round and as medians.

With ``--search N``: ``today`` and ``int8`` each get ``N`` messages in one memory, then the
per-term lookup of :meth:`PostgresEpisodeIndex.search` (newest 128 seqs) runs for 400 distinct
terms of LoCoMo's questions, three timed passes interleaved: latency p50 / p95, server CPU per
lookup, and whether both return the same seqs for every term.

The server must run on this host (its backends' ``/proc`` is read).

Usage:
    python benchmarks/pg_episode_keys.py ../shared/data/locomo/locomo10.json --postgres postgresql://...
        [--rounds 10] [--variants today,int8,...] [--search 100000]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import statistics
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import psycopg
from _pg import scratch_schema

from convmem_graph.store import MemoryStore
from convmem_graph.store._episode_search import bucket
from convmem_graph.store._messages import content_hash
from convmem_graph.store.engine import dumps
from convmem_graph.store.postgres import (
    _pg_followed_sql,
    _tsquery_literal,
    pg_index_prefix,
    pg_index_terms,
    pg_terms_sql,
)
from convmem_graph.store.urls import libpq_url
from convmem_graph.text.terms import search_terms, stem, stemmed_terms

VARIANTS = ("today", "int8", "int4", "prefix5", "no_gin", "none")
MEMORIES = 30
BATCH = 210
_B64 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz+/"
_MEMORY_ROW = (
    "INSERT INTO cm_memories (memory_id, description, created_at, updated_at, extracted_seq, "
    "summarized_seq, facts_dirty, facts_zh, facts_other) VALUES (%s, '', 0, 0, 0, 0, 0, 0, 0)"
)
_GIN = "ix_cm_episodes_terms"


def locomo_turns(path: Path) -> list[tuple[str, str]]:
    """Every LoCoMo turn as ``(speaker, text)``, in file order."""
    turns: list[tuple[str, str]] = []
    for conv in json.loads(path.read_text(encoding="utf-8")):
        for key, value in conv["conversation"].items():
            if key.startswith("session_") and isinstance(value, list):
                turns.extend((t["speaker"], t["text"]) for t in value)
    return turns


def hashed_key(memory_bucket: int, lexeme: str, size: int) -> int:
    """A signed ``size``-byte key of (bucket, stem): what an integer-keyed index would store."""
    digest = hashlib.blake2b(
        lexeme.encode("utf-8"), digest_size=size, key=memory_bucket.to_bytes(4, "big"), person=b"cm-ep-key"
    ).digest()
    return int.from_bytes(digest, "big", signed=True)


def terms_maker(variant: str, memory_id: str) -> Callable[[str], str]:
    """The per-message value the variant's statement reads (a lexeme string or an array literal)."""
    if variant in ("today", "no_gin"):
        return pg_index_terms(memory_id)
    memory_bucket = bucket(memory_id)
    if variant in ("int8", "int4"):
        size = 8 if variant == "int8" else 4
        return lambda content: (
            "{" + ",".join(str(hashed_key(memory_bucket, s, size)) for s in stemmed_terms(content)) + "}"
        )
    if variant == "prefix5":
        prefix = "".join(_B64[(memory_bucket >> shift) & 63] for shift in (24, 18, 12, 6, 0)) + "_"
        return lambda content: " ".join(prefix + s for s in stemmed_terms(content))
    return lambda content: ""


def insert_sql(variant: str) -> str:
    """The store's insert statement, its episodic part changed to the variant's."""
    if variant == "none":
        return _pg_followed_sql(False)
    sql = _pg_followed_sql(True)
    if variant in ("int8", "int4"):
        cast = "bigint[]" if variant == "int8" else "integer[]"
        sql = sql.replace("(seq, memory_id, terms)", "(seq, memory_id, keys)")
        sql = sql.replace(pg_terms_sql("t.value"), f"t.value::{cast}")
    return sql


def prepare(conn: psycopg.Connection[Any], variant: str) -> None:
    """Replace the store's ``cm_episodes`` with the variant's (the rest of the schema is the store's)."""
    conn.execute("DROP TABLE cm_episodes")
    if variant in ("int8", "int4"):
        kind = "BIGINT[]" if variant == "int8" else "INTEGER[]"
        conn.execute(
            "CREATE TABLE cm_episodes (seq BIGINT PRIMARY KEY, memory_id TEXT NOT NULL, "
            f"keys {kind} NOT NULL)"
        )
        conn.execute(f"CREATE INDEX {_GIN} ON cm_episodes USING GIN (keys)")
        return
    conn.execute(
        "CREATE TABLE cm_episodes (seq BIGINT PRIMARY KEY, memory_id TEXT NOT NULL, terms TSVECTOR NOT NULL)"
    )
    if variant not in ("no_gin", "none"):
        conn.execute(f"CREATE INDEX {_GIN} ON cm_episodes USING GIN (terms)")


def backend_cpu(conn: psycopg.Connection[Any]) -> float:
    """CPU seconds of the connection's server backend so far."""
    with open(f"/proc/{conn.info.backend_pid}/schedstat", encoding="ascii") as fh:
        return int(fh.read().split()[0]) / 1e9


def insert_batch(
    conn: psycopg.Connection[Any], variant: str, memory_id: str, turns: list[tuple[str, str]], first: int
) -> float:
    """Insert one memory's batch with the variant's statement; the client CPU of its terms or keys."""
    conn.execute(_MEMORY_ROW, (memory_id,))
    rows = [
        (memory_id, f"{memory_id}_{i}", "user" if i % 2 == 0 else "assistant", text, "chat", "locomo",
         1_700_000_000_000 + first + i, None, None, speaker, False, False, None, None,
         content_hash("user", text))
        for i, (speaker, text) in enumerate(turns)
    ]  # fmt: skip
    started = time.thread_time()
    terms = terms_maker(variant, memory_id)
    episodes = dumps({row[1]: terms(row[3]) for row in rows})
    client = time.thread_time() - started
    with conn.transaction():
        conn.execute(
            insert_sql(variant), {"rows": dumps(rows), "mid": memory_id, "now": 1, "ep": episodes}
        ).fetchone()
    return client


def clean(conn: psycopg.Connection[Any], variant: str) -> None:
    """Move the GIN pending list into the tree, as a replay's end does."""
    if variant not in ("no_gin", "none"):
        conn.execute(f"SELECT gin_clean_pending_list('{_GIN}'::regclass)")


def insert_round(
    conn: psycopg.Connection[Any], variant: str, turns: list[tuple[str, str]], rnd: int
) -> tuple[float, float]:
    """One round: server CPU seconds (inserts and final clean) and client CPU seconds of the terms."""
    before = backend_cpu(conn)
    client = 0.0
    for m in range(MEMORIES):
        start = (m * 197) % (len(turns) - BATCH)
        client += insert_batch(conn, variant, f"r{rnd}_m{m}", turns[start : start + BATCH], m * BATCH)
    clean(conn, variant)
    return backend_cpu(conn) - before, client


@contextmanager
def variant_conns(url: str, variants: list[str]) -> Iterator[dict[str, psycopg.Connection[Any]]]:
    """A fresh store schema per variant, its episodic table replaced; one connection to each."""
    with ExitStack() as stack:
        conns: dict[str, psycopg.Connection[Any]] = {}
        for variant in variants:
            schema_url = stack.enter_context(scratch_schema(url, "cm_epkeys"))
            MemoryStore.from_url(schema_url).close()
            conn = stack.enter_context(psycopg.connect(libpq_url(schema_url), autocommit=True))
            prepare(conn, variant)
            conns[variant] = conn
        yield conns


def insert_bench(url: str, turns: list[tuple[str, str]], variants: list[str], rounds: int) -> None:
    """Interleaved rounds of every variant; paired server-CPU ratios against ``today``."""
    results: dict[str, list[tuple[float, float]]] = {v: [] for v in variants}
    with variant_conns(url, variants) as conns:
        for rnd in range(rounds):
            for variant in variants if rnd % 2 == 0 else variants[::-1]:
                results[variant].append(insert_round(conns[variant], variant, turns, rnd))
            print(f"round {rnd}: " + ", ".join(f"{v} {results[v][-1][0]:.3f}s" for v in variants), flush=True)
    messages = MEMORIES * BATCH
    print(
        f"\nserver CPU per {BATCH}-message batch (inserts + final clean), {rounds} rounds, "
        f"{messages} messages a round"
    )
    for variant in variants:
        server = [s for s, _ in results[variant]]
        client = statistics.median(c for _, c in results[variant]) / messages * 1e6
        per_batch = statistics.median(server) / MEMORIES * 1e3
        line = f"{variant:8} {per_batch:6.2f} ms; client terms {client:5.1f} us/msg"
        if "today" in results:
            ratios = [s / t for s, (t, _) in zip(server, results["today"], strict=True)]
            each = " ".join(f"{r:.2f}" for r in ratios)
            line += f"; paired / today median x{statistics.median(ratios):.3f} ({each})"
        print(line)


def search_bench(url: str, turns: list[tuple[str, str]], size: int, questions: list[str]) -> None:
    """``today`` against ``int8`` at ``size`` messages in one memory: latency, server CPU, identity."""
    memory_id = "one_big_memory"
    memory_bucket = bucket(memory_id)
    prefix = pg_index_prefix(memory_id)
    terms: list[str] = []
    for question in questions:
        terms.extend(t for t in search_terms(question) if t not in terms)
    terms = terms[:400]
    lexemes = stem(terms)
    params: dict[str, list[Any]] = {
        "today": [_tsquery_literal(prefix + lx) for lx in lexemes],
        "int8": [hashed_key(memory_bucket, lx, 8) for lx in lexemes],
    }
    where = {"today": "terms @@ %s::tsquery", "int8": "keys @> ARRAY[%s::bigint]"}
    variants = list(params)
    with variant_conns(url, variants) as conns:
        for variant, conn in conns.items():
            for first in range(0, size, 500):
                chunk = [turns[i % len(turns)] for i in range(first, min(size, first + 500))]
                conn.execute(_MEMORY_ROW + " ON CONFLICT DO NOTHING", (memory_id,))
                rows = [
                    (memory_id, f"m{first + i}", "user", text, "chat", "locomo",
                     1_700_000_000_000 + first + i, None, None, speaker, False, False, None, None, first + i)
                    for i, (speaker, text) in enumerate(chunk)
                ]  # fmt: skip
                maker = terms_maker(variant, memory_id)
                episodes = dumps({row[1]: maker(row[3]) for row in rows})
                conn.execute(
                    insert_sql(variant), {"rows": dumps(rows), "mid": memory_id, "now": 1, "ep": episodes}
                )
            clean(conn, variant)
            conn.execute("VACUUM ANALYZE cm_episodes")
        lowest: dict[str, int] = {}
        for variant, conn in conns.items():
            first_seq = conn.execute("SELECT min(seq) FROM cm_messages").fetchone()
            lowest[variant] = int(first_seq[0]) if first_seq else 0
        latency: dict[str, list[float]] = {v: [] for v in variants}
        server = dict.fromkeys(variants, 0.0)
        found: dict[tuple[str, int], list[int]] = {}
        for rnd in range(4):  # the first pass warms the cache and is not timed
            for variant in variants if rnd % 2 == 0 else variants[::-1]:
                conn = conns[variant]
                sql = (
                    f"SELECT seq FROM (SELECT seq FROM cm_episodes WHERE {where[variant]} OFFSET 0) t "
                    "ORDER BY seq DESC LIMIT 128"
                )
                before = backend_cpu(conn)
                for k, param in enumerate(params[variant]):
                    started = time.perf_counter()
                    seqs = [int(r[0]) - lowest[variant] for r in conn.execute(sql, (param,))]
                    if rnd:
                        latency[variant].append(time.perf_counter() - started)
                    found.setdefault((variant, k), seqs)
                if rnd:
                    server[variant] += backend_cpu(conn) - before
        same = all(found[("today", k)] == found[("int8", k)] for k in range(len(terms)))
        print(
            f"\nsearch at {size} messages in one memory, {len(terms)} terms x 3 passes; "
            f"same seqs for every term: {same}"
        )
        for variant in variants:
            xs = sorted(latency[variant])
            p95 = xs[int(0.95 * len(xs))]
            per = server[variant] / len(xs) * 1e6
            size_sql = (
                "SELECT pg_size_pretty(pg_relation_size(%s::regclass)), "
                "pg_size_pretty(pg_relation_size('cm_episodes'))"
            )
            sizes = conns[variant].execute(size_sql, (_GIN,)).fetchone() or ("?", "?")
            print(
                f"{variant:6} p50 {statistics.median(xs) * 1e3:.3f} ms, p95 {p95 * 1e3:.3f} ms, "
                f"server CPU {per:.0f} us a lookup; GIN {sizes[0]}, table {sizes[1]}"
            )


def main() -> None:
    """Parse the arguments and run the insert benchmark, then the search one when asked."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("locomo", type=Path)
    parser.add_argument(
        "--postgres", required=True, help="a database of your own (scratch schemas are made in it)"
    )
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument(
        "--search", type=int, default=0, help="messages in one memory for the search comparison"
    )
    args = parser.parse_args()
    turns = locomo_turns(args.locomo)
    variants = [v for v in args.variants.split(",") if v]
    unknown = set(variants) - set(VARIANTS)
    if unknown:
        parser.error(f"unknown variants: {sorted(unknown)}")
    if args.rounds > 0:
        insert_bench(args.postgres, turns, variants, args.rounds)
    if args.search > 0:
        questions = [
            q["question"] for conv in json.loads(args.locomo.read_text(encoding="utf-8")) for q in conv["qa"]
        ]
        random.Random(1).shuffle(questions)
        search_bench(args.postgres, turns, args.search, questions)


if __name__ == "__main__":
    main()
