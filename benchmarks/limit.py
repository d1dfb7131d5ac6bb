"""convmem against the machine's limit: plain ``sqlite3`` + a contentless FTS5 index, same data, one run.

Issue 24 items 3-4. Two comparisons, per archive size (default 1k and 100k messages; 1M with
``--sizes 1000,100000,1000000`` if time allows), on one SQLite file each:

- **Replay, one process.** convmem: ``replay_in_processes(..., processes=1, group_by="user")``,
  what ``convmem replay archive/ --concurrency 1`` runs (store, checkpoints, episodic index,
  heuristic extraction, summaries, snapshots). Limit: the same JSON Lines parsed with ``json``, each
  session's messages written with one ``executemany`` into a table of the same kind of columns
  (memory, seq, role, content, timestamp, a content hash) plus a contentless FTS5 index of their
  text, one transaction per session. Throughput ratio convmem / limit (target >= 0.5) and bytes on
  disk per message (target <= 1.5x the limit's).
- **Call start.** convmem: ``ConvMemory.payload(memory, "openai", query=...)`` on the replayed
  memory (its cached snapshot plus the episodic search of the query). Limit: one FTS5 ``MATCH`` of
  the query's words, best 32 by rank, then reading those rows. p50 / p95 and ratio (target p50 <=
  3x; issue 24 measured 3.6-8.4x).

Everything is one memory of all the archive's messages, in sessions of 100 (mixed Chinese and
English lines stating facts of several families). Rounds interleave the two sides; the load
average is printed before and after.

With ``--baseline DIR`` (a checkout of earlier code, e.g. ``git worktree add /tmp/base HEAD``)
every round also replays the archive with that code, and each convmem replay (this code's and the
baseline's) runs in a fresh ``python`` process of its own (order alternating between rounds), so
both pay the same imports and neither inherits the other's warm caches; the printed CPU time is
that process's and its replay worker's from the call of ``replay_convmem`` on. ``--breakdown``
prints where each side's bytes are (SQLite's ``dbstat``: tables and indexes, bytes per message).
``--no-call-start`` skips the call-start part.

Usage:
    PYTHONPATH=. python benchmarks/limit.py [--sizes 1000,100000] [--calls 300] [--rounds 3]
        [--baseline DIR] [--breakdown] [--no-call-start]
    # another checkout's call start on the same files, and its payloads for a byte comparison:
    PYTHONPATH=<checkout>:benchmarks python benchmarks/limit.py --reuse --workdir DIR [--dump FILE]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import resource
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from replay import load_sessions
from replay_slope import session

import convmem_graph
from convmem_graph.config import MemoryConfig
from convmem_graph.memory import ConvMemory
from convmem_graph.payloads.memory_block import MemoryBlockOptions, build_memory_block
from convmem_graph.replay import replay_in_processes
from convmem_graph.snapshot import render_call_start, with_episodes

SESSION = 100
BASE_MS = 1_767_000_000_000
QUERIES = ["羽毛球", "chess pottery", "成都 朋友", "Lisbon", "火锅 饺子", "jazz"]
#: ``--dump``: the timed queries and four more (none: the call opening's own query; a question;
#: a conversation so far; a word most facts hold), for four vendors and a second budget.
DUMP_QUERIES = [
    *QUERIES,
    "",
    "what did my friend 小王 and I eat in 成都?",
    "I like 羽毛球 and chess\nwhat about pottery and ramen this weekend?",
    "我喜欢什么",
]
DUMP_VENDORS: list[tuple[str, int, dict[str, object]]] = [
    ("openai", 300, {}),
    ("openai", 120, {}),
    ("trtc-llmconfig", 300, {}),
    ("agora-llm", 300, {"llm": {"url": "https://llm.example/v1/chat/completions"}}),
    ("agora-custom", 300, {}),
]
#: The clock of ``--dump`` payloads (expiry is judged against it): fixed, so two runs compare.
DUMP_NOW_MS = BASE_MS + 10**10


def write_archive(path: Path, messages: int) -> None:
    """One memory (``u1``) of ``messages`` messages in JSON Lines sessions of :data:`SESSION`."""
    with path.open("w", encoding="utf-8") as out:
        for s in range(-(-messages // SESSION)):
            lines = session(s, min(SESSION, messages - s * SESSION))
            stamped = [{**m, "timestamp": BASE_MS + (s * SESSION + k) * 1000} for k, m in enumerate(lines)]
            out.write(json.dumps({"user": "u1", "messages": stamped}, ensure_ascii=False) + "\n")


def write_locomo_archive(path: Path, messages: int, locomo: Path) -> None:
    """One memory (``u1``) of ``messages`` real conversation turns: LoCoMo's sessions in order.

    The ten conversations' sessions one after the other (speaker_a the user), then again, each
    pass a year later (a repeated line is a new utterance, as people repeat themselves), cut at
    ``messages``. Facts here are sparse (a turn states one now and then), where the default
    archive states one in every user line: the two bound what a store pays for its facts.
    """
    sessions = [s for conversation in load_sessions(locomo) for s in conversation]
    written, k = 0, 0
    with path.open("w", encoding="utf-8") as out:
        while written < messages:
            shift = (k // len(sessions)) * 365 * 86_400_000
            lines = sessions[k % len(sessions)][: messages - written]
            stamped = [{**m, "timestamp": m["timestamp"] + shift} for m in lines]
            out.write(json.dumps({"user": "u1", "messages": stamped}, ensure_ascii=False) + "\n")
            written += len(lines)
            k += 1


def locomo_queries(locomo: Path, count: int = 6) -> list[str]:
    """The first question of categories 1-4 of each of the first ``count`` conversations."""
    data = json.loads(locomo.read_text(encoding="utf-8"))
    picked = []
    for sample in data[:count]:
        picked.append(next(q["question"] for q in sample["qa"] if q.get("category") in (1, 2, 3, 4)))
    return picked


def _clear(db: Path) -> None:
    for p in db.parent.glob(db.name + "*"):
        shutil.rmtree(p) if p.is_dir() else p.unlink()


def _disk(db: Path) -> int:
    with sqlite3.connect(db) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return sum(p.stat().st_size for p in db.parent.glob(db.name + "*") if p.is_file())


def _cpu() -> float:
    """CPU seconds of this process and its finished children (the replay worker)."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


#: CPU seconds per replay round and side. On a host whose other tenants keep both cores busy a
#: process gets a fraction of a core, so wall time mostly measures waiting; CPU time the work.
CPU: dict[str, list[float]] = {"convmem": [], "limit": []}


def replay_convmem(archive: Path, db: Path) -> float:
    """Seconds for convmem's one-process replay of ``archive`` into an empty ``db``."""
    _clear(db)
    c0, t0 = _cpu(), time.perf_counter()
    replay_in_processes(str(db), [archive], processes=1, config=MemoryConfig(), group_by="user")
    CPU["convmem"].append(_cpu() - c0)
    return time.perf_counter() - t0


#: The limit's FTS5 tokenizer (``--limit-tokenizer``): ``trigram`` finds Chinese words (no spaces),
#: ``unicode61`` is the cheaper index of text written with spaces (LoCoMo's English).
LIMIT_TOKENIZER = ["trigram"]

LIMIT_SCHEMA = """
PRAGMA journal_mode = WAL;
PRAGMA synchronous = NORMAL;
CREATE TABLE msgs (id INTEGER PRIMARY KEY, memory_id TEXT NOT NULL, seq INTEGER NOT NULL,
    role TEXT NOT NULL, content TEXT NOT NULL, ts INTEGER NOT NULL, hash BLOB NOT NULL);
CREATE UNIQUE INDEX msgs_seq ON msgs (memory_id, seq);
CREATE VIRTUAL TABLE fts USING fts5(content, content='', tokenize='{tokenizer}');
"""


def replay_limit(archive: Path, db: Path) -> float:
    """Seconds for plain sqlite3: parse, executemany per session, FTS5 rows, one transaction per session."""
    _clear(db)
    c0, t0 = _cpu(), time.perf_counter()
    conn = sqlite3.connect(db, isolation_level=None)
    conn.executescript(LIMIT_SCHEMA.format(tokenizer=LIMIT_TOKENIZER[0]))
    seq = 0
    with archive.open(encoding="utf-8") as lines:
        for line in lines:
            doc = json.loads(line)
            rows = []
            for m in doc["messages"]:
                seq += 1
                digest = hashlib.blake2b(m["content"].encode(), digest_size=8).digest()
                rows.append((seq, doc["user"], seq, m["role"], m["content"], m["timestamp"], digest))
            conn.execute("BEGIN")
            conn.executemany("INSERT INTO msgs VALUES (?, ?, ?, ?, ?, ?, ?)", rows)
            conn.executemany("INSERT INTO fts (rowid, content) VALUES (?, ?)", [(r[0], r[4]) for r in rows])
            conn.execute("COMMIT")
    conn.close()
    CPU["limit"].append(_cpu() - c0)
    return time.perf_counter() - t0


#: Run in a fresh process of one checkout (``sys.argv``: archive, database): its convmem replay,
#: printed as JSON (wall seconds, CPU seconds). Works with this file and earlier ``limit.py``s.
ONE_REPLAY = """
import json, sys
from pathlib import Path
import limit
wall = limit.replay_convmem(Path(sys.argv[1]), Path(sys.argv[2]))
print(json.dumps([wall, limit.CPU["convmem"][-1]]))
"""


def replay_in_fresh_process(code: Path, archive: Path, db: Path) -> tuple[float, float]:
    """Wall and CPU seconds of one convmem replay by the checkout at ``code``, in a new process."""
    env = {**os.environ, "PYTHONPATH": str(code)}
    out = subprocess.run(
        [sys.executable, "-c", ONE_REPLAY, str(archive), str(db)],
        cwd=code / "benchmarks",
        env=env,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    wall, cpu = json.loads(out.strip().splitlines()[-1])
    return float(wall), float(cpu)


def breakdown(db: Path, messages: int, top: int = 14) -> str:
    """Bytes per message of the database's largest tables and indexes (``dbstat``), largest first."""
    with sqlite3.connect(db) as conn:
        try:
            rows = conn.execute(
                "SELECT name, sum(pgsize) FROM dbstat GROUP BY name ORDER BY 2 DESC"
            ).fetchall()
        except sqlite3.OperationalError:  # SQLite built without SQLITE_ENABLE_DBSTAT_VTAB
            return "    (no dbstat in this SQLite)"
    parts = [f"{name} {size / messages:.1f}" for name, size in rows[:top]]
    rest = sum(size for _, size in rows[top:])
    return "    " + "; ".join(parts) + f"; the rest {rest / messages:.1f} B/msg"


def call_start_limit(conn: sqlite3.Connection, query: str) -> list[tuple[str, str, int]]:
    """One FTS5 MATCH of the query's words (best 32 by rank), then reading those rows."""
    # Words only: a question's "?" or quote would be FTS5 syntax.
    match = " OR ".join(f'"{w}"' for w in re.findall(r"\w+", query))
    ids = [
        r[0] for r in conn.execute("SELECT rowid FROM fts WHERE fts MATCH ? ORDER BY rank LIMIT 32", (match,))
    ]
    marks = ",".join("?" * len(ids))
    return conn.execute(f"SELECT role, content, ts FROM msgs WHERE id IN ({marks})", ids).fetchall()


def pct(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    return statistics.median(ordered), ordered[int(0.95 * (len(ordered) - 1))]


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", default="1000,100000")
    parser.add_argument(
        "--calls", type=int, default=300, help="call starts per side, size and round (0: none, with --reuse)"
    )
    parser.add_argument("--rounds", type=int, default=3, help="replay rounds (call starts: interleaved)")
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument(
        "--dump",
        type=Path,
        default=None,
        help="also write every size's payloads (DUMP_QUERIES x DUMP_VENDORS, fixed clock) and memory"
        " block reports to this JSON Lines file: two checkouts' files must be byte-identical",
    )
    parser.add_argument(
        "--reuse",
        action="store_true",
        help="call starts only, on the workdir's databases of an earlier run (no replay): lets"
        " another checkout (PYTHONPATH) time its call start on the very same files",
    )
    parser.add_argument(
        "--baseline", type=Path, default=None, help="a checkout of earlier code to replay too"
    )
    parser.add_argument("--breakdown", action="store_true", help="bytes per table and index (dbstat)")
    parser.add_argument("--no-call-start", action="store_true", help="replay only")
    parser.add_argument(
        "--limit-tokenizer",
        choices=["trigram", "unicode61"],
        default="trigram",
        help="the limit's FTS5 tokenizer (default trigram: it finds Chinese words; unicode61 is"
        " the cheaper one for text with spaces)",
    )
    parser.add_argument(
        "--locomo",
        type=Path,
        default=None,
        metavar="locomo10.json",
        help="archive of LoCoMo's real turns (sparse facts) instead of one fact per user line;"
        " call starts then ask LoCoMo questions",
    )
    args = parser.parse_args()
    here = Path(__file__).resolve().parent.parent
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="convmem-limit-"))
    workdir.mkdir(parents=True, exist_ok=True)
    LIMIT_TOKENIZER[0] = args.limit_tokenizer
    queries = QUERIES if args.locomo is None else locomo_queries(args.locomo)
    print(f"machine: {os.cpu_count()} CPUs, Python {sys.version.split()[0]}, SQLite {sqlite3.sqlite_version}")
    print(f"code: {Path(convmem_graph.__file__).parent}; load before {os.getloadavg()}")
    for n in (int(s) for s in args.sizes.split(",")):
        archive = workdir / f"archive_{n}.jsonl"
        ours, limit = workdir / f"ours_{n}.db", workdir / f"limit_{n}.db"
        if args.reuse:
            if not (ours.exists() and limit.exists()):
                parser.error(f"--reuse: {ours} or {limit} is missing (run once without --reuse)")
            print(f"\n{n:,} messages (databases of an earlier run)")
            if args.dump is not None:
                dump_payloads(ours, n, args.dump)
            if args.calls > 0:
                call_starts(ours, limit, args.calls, queries)
            continue
        if args.locomo is not None:
            write_locomo_archive(archive, n, args.locomo)
        else:
            write_archive(archive, n)
        times: dict[str, list[float]] = {"convmem": [], "limit": []}
        for side in CPU.values():
            side.clear()
        dbs = {"convmem": ours}
        if args.baseline is not None:
            times["baseline"], CPU["baseline"] = [], []
            dbs["baseline"] = workdir / f"baseline_{n}.db"
        for r in range(args.rounds):
            times["limit"].append(replay_limit(archive, limit))
            if args.baseline is None:
                times["convmem"].append(replay_convmem(archive, ours))
                continue
            trees = [("convmem", here), ("baseline", args.baseline)]
            for side, code in trees if r % 2 == 0 else trees[::-1]:
                wall, cpu_s = replay_in_fresh_process(code, archive, dbs[side])
                times[side].append(wall)
                CPU[side].append(cpu_s)
        rate = {k: n / statistics.median(v) for k, v in times.items()}
        disk = {k: _disk(db) / n for k, db in [*dbs.items(), ("limit", limit)]}
        cpu = {k: statistics.median(v) for k, v in CPU.items()}
        for side in dbs:
            print(
                f"\n{n:,} messages, replay one process, {side}: {rate[side]:,.0f} msg/s, limit"
                f" {rate['limit']:,.0f} msg/s, ratio {rate[side] / rate['limit']:.2f} (target >= 0.5);"
                f" disk {disk[side]:.0f} vs {disk['limit']:.0f} bytes/message,"
                f" x{disk[side] / disk['limit']:.2f} (target <= 1.5)"
            )
            print(
                f"  CPU: {side} {n / cpu[side]:,.0f} msg per CPU-s ({cpu[side] / n * 1e6:.0f} us/msg),"
                f" limit {n / cpu['limit']:,.0f} ({cpu['limit'] / n * 1e6:.0f} us/msg),"
                f" ratio {cpu['limit'] / cpu[side]:.3f}"
            )
            if args.breakdown:
                print(breakdown(dbs[side], n))
        if "baseline" in dbs:
            print(
                f"  this code / baseline: CPU x{cpu['convmem'] / cpu['baseline']:.2f},"
                f" wall x{statistics.median(times['convmem']) / statistics.median(times['baseline']):.2f}"
            )
        if args.breakdown:
            print("  limit:\n" + breakdown(limit, n))
        print(
            "  rounds s: " + "; ".join(f"{k} " + " / ".join(f"{x:.2f}" for x in v) for k, v in times.items())
        )
        print(
            "  rounds CPU s: "
            + "; ".join(f"{k} " + " / ".join(f"{x:.2f}" for x in v) for k, v in CPU.items())
        )
        print(f"  load {os.getloadavg()}")
        if args.dump is not None:
            dump_payloads(ours, n, args.dump)
        if not args.no_call_start:
            call_starts(ours, limit, args.calls, queries)
    print(f"\nload after {os.getloadavg()}")
    return 0


def dump_payloads(ours: Path, size: int, out: Path) -> None:
    """Append ``ours``' payloads for every dump query and vendor, and its memory block reports, to ``out``.

    The payloads go through the store (the snapshot's read, the episodic search) as a call start
    does; the clock is fixed. The reports list every dropped fact too (``list_all_dropped``).
    """
    mem = ConvMemory.open(str(ours))
    try:
        with out.open("a", encoding="utf-8") as file:
            for query in DUMP_QUERIES:
                for vendor, budget, extra in DUMP_VENDORS:
                    # Twice: the second call runs on what the first one kept with the snapshot.
                    for attempt in range(2):
                        snap = mem.snapshot("u1")
                        options = {"query": query, "budget_tokens": budget, **extra}
                        payload = render_call_start(
                            mem.store, snap, vendor, options, config=mem.config, now_ms=DUMP_NOW_MS
                        )
                        row = {
                            "size": size,
                            "query": query,
                            "vendor": vendor,
                            "budget": budget,
                            "try": attempt,
                        }
                        file.write(
                            json.dumps({**row, "payload": payload}, ensure_ascii=False, sort_keys=True) + "\n"
                        )
                found = with_episodes(mem.store, mem.snapshot("u1"), mem.config, query, budget_tokens=300)
                block_options = MemoryBlockOptions(query=query or None, budget_tokens=300, now_ms=DUMP_NOW_MS)
                block = build_memory_block(found, block_options)
                file.write(
                    json.dumps(
                        {"size": size, "query": query, "block": block.model_dump()}, ensure_ascii=False
                    )
                    + "\n"
                )
    finally:
        mem.close()


def call_starts(ours: Path, limit: Path, calls: int, queries: list[str] = QUERIES) -> None:
    """Time ``calls`` call starts on each side, interleaved, and print p50 / p95 and CPU per call."""
    mem = ConvMemory.open(str(ours))
    conn = sqlite3.connect(limit)
    cs: dict[str, list[float]] = {"convmem": [], "limit": []}
    cpu_cs: dict[str, list[float]] = {"convmem": [], "limit": []}
    for q in queries:  # warm both
        mem.payload("u1", "openai", query=q)
        call_start_limit(conn, q)
    for k in range(calls):
        q = queries[k % len(queries)]
        c0, t0 = time.process_time(), time.perf_counter()
        call_start_limit(conn, q)
        c1, t1 = time.process_time(), time.perf_counter()
        mem.payload("u1", "openai", query=q)
        c2, t2 = time.process_time(), time.perf_counter()
        cpu_cs["limit"].append((c1 - c0) * 1000)
        cpu_cs["convmem"].append((c2 - c1) * 1000)
        cs["limit"].append((t1 - t0) * 1000)
        cs["convmem"].append((t2 - t1) * 1000)
    (o50, o95), (l50, l95) = pct(cs["convmem"]), pct(cs["limit"])
    (co50, co95), (cl50, cl95) = pct(cpu_cs["convmem"]), pct(cpu_cs["limit"])
    mean = {k: sum(v) / len(v) for k, v in cpu_cs.items()}
    print(
        f"  call start: convmem p50/p95 {o50:.2f}/{o95:.2f} ms, FTS5 MATCH + top rows"
        f" {l50:.3f}/{l95:.3f} ms, p50 ratio x{o50 / l50:.1f} (target <= 3), p95 ratio x{o95 / l95:.1f};"
        f" CPU per call mean {mean['convmem']:.2f} vs {mean['limit']:.3f} ms,"
        f" x{mean['convmem'] / max(mean['limit'], 1e-9):.1f}"
    )
    # CPU time per call is what each side's work costs whatever share of a core it got.
    print(
        f"  call start CPU: convmem p50/p95 {co50:.3f}/{co95:.3f} ms, limit {cl50:.3f}/{cl95:.3f} ms,"
        f" p50 ratio x{co50 / max(cl50, 1e-9):.1f}"
    )
    conn.close()
    mem.close()


if __name__ == "__main__":
    raise SystemExit(main())
