"""Replay throughput, memory and disk use on the embedded default, versus the default LangGraph pattern.

Builds an archive from LoCoMo (path as an argument) replicated to at least 100k messages over at
least 500 memories, as JSON Lines of OpenAI-style message lists (one document per session, the
memory's user id in ``user``), then:

1. ``convmem_graph``: ``Replayer`` on SQLite (store + checkpoints in one file), heuristic extractor,
   extractive summaries; prints messages/s, peak RSS, bytes on disk per message, and the
   per-message cost of the first and last tenth of the archive.
2. The default pattern: a graph whose state accumulates ``messages`` with the ``add_messages``
   reducer under ``SqliteSaver``, one invoke per batch (session) on a thread per memory.

Each phase runs in its own process so peak RSS is its own.

With ``--postgres URL`` only convmem_graph's replay is run, on PostgreSQL (store and checkpoints
in a fresh schema per round) and on SQLite, same archive and workers, interleaved round by round;
it prints both throughputs, their ratio (target: PostgreSQL >= 0.8x SQLite), the CPU seconds of
the replay's own processes (parent and workers) and, on PostgreSQL, of the server backends serving
URL's database (sampled from ``/proc``: use a database of your own on a shared server). With
``--baseline DIR`` the same rounds also replay with the ``convmem_graph`` of the checkout DIR (in
the order this, baseline, alternating per round), each side in a fresh process.

Usage:
    python benchmarks/replay.py ../shared/data/locomo/locomo10.json [--messages 100000] [--memories 500]
        [--concurrency 2] [--repeat 3] [--postgres postgresql://...] [--baseline DIR]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
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
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any, TypedDict

from _pg import BackendCpu, scratch_schema
from langchain_core.messages import AnyMessage
from langgraph.graph.message import add_messages

_DATE = re.compile(r"(\d+):(\d+)\s*(am|pm) on (\d+) (\w+),? (\d{4})", re.I)


def _session_ms(text: str) -> int:
    m = _DATE.search(text or "")
    if not m:
        return 1_683_500_000_000
    hour, minute, ampm, day, month, year = m.groups()
    h = int(hour) % 12 + (12 if ampm.lower() == "pm" else 0)
    dt = datetime.strptime(f"{day} {month[:3]} {year} {h}:{minute}", "%d %b %Y %H:%M").replace(tzinfo=UTC)
    return int(dt.timestamp() * 1000)


def load_sessions(path: Path) -> list[list[list[dict[str, Any]]]]:
    """Return, per LoCoMo conversation, its sessions as OpenAI-style messages with timestamps."""
    data = json.loads(path.read_text(encoding="utf-8"))
    conversations = []
    for sample in data:
        conv = sample["conversation"]
        speaker_a = conv["speaker_a"]
        sessions = []
        n = 1
        while f"session_{n}" in conv or f"session_{n}_date_time" in conv:
            turns = conv.get(f"session_{n}") or []
            base = _session_ms(conv.get(f"session_{n}_date_time", ""))
            msgs = []
            for i, t in enumerate(turns):
                text = t.get("text", "")
                if t.get("blip_caption"):
                    text = f"{text} [shares a photo: {t['blip_caption']}]"
                role = "user" if t.get("speaker") == speaker_a else "assistant"
                msgs.append({"role": role, "content": text, "timestamp": base + i * 30_000})
            if msgs:
                sessions.append(msgs)
            n += 1
        conversations.append(sessions)
    return conversations


def build_archive(
    locomo: Path, out: Path, *, messages: int, memories: int, per_file: int = 10
) -> tuple[int, int]:
    """Write the replicated archive as JSONL files; returns (messages, memories) written."""
    conversations = load_sessions(locomo)
    per_memory = -(-messages // memories)
    written = 0
    out.mkdir(parents=True, exist_ok=True)
    handle = None
    for k in range(memories):
        if k % per_file == 0:
            if handle:
                handle.close()
            handle = (out / f"archive_{k // per_file:04d}.jsonl").open("w", encoding="utf-8")
        sessions = conversations[k % len(conversations)]
        s = (k // len(conversations)) % len(sessions)
        count = 0
        memory_id = f"locomo_{k:05d}"
        while count < per_memory:
            msgs = sessions[s % len(sessions)]
            # Later copies of a session are shifted in time so repeated text is a new utterance.
            shift = (s // len(sessions)) * 86_400_000 * 365
            doc = {"user": memory_id, "messages": [{**m, "timestamp": m["timestamp"] + shift} for m in msgs]}
            assert handle is not None
            handle.write(json.dumps(doc, ensure_ascii=False) + "\n")
            count += len(msgs)
            s += 1
        written += count
    if handle:
        handle.close()
    return written, memories


def _remove_db(db: Path) -> None:
    """Start a phase from an empty database (a repeated round must not find the last one's)."""
    for p in db.parent.glob(db.name + "*"):
        # The database, its WAL files and its directory of per-memory lock files.
        if p.is_dir():
            shutil.rmtree(p)
        else:
            p.unlink()


def _disk_bytes(db: Path) -> int:
    return sum(p.stat().st_size for p in db.parent.glob(db.name + "*") if p.is_file())


def _cpu_seconds() -> float:
    """CPU seconds (user + system) of this process and its joined children (the replay workers)."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def phase_ours(archive: Path, workdir: Path, queue: Any, concurrency: int, episodic: bool = True) -> None:
    from convmem_graph.config import MemoryConfig
    from convmem_graph.replay import replay_in_processes
    from convmem_graph.store import MemoryStore

    db = workdir / f"ours-{concurrency}-{'ep' if episodic else 'noep'}.db"
    _remove_db(db)
    MemoryStore.from_url(str(db)).close()  # create the schema once, before the workers race to
    marks: list[tuple[float, int]] = [(time.perf_counter(), 0)]

    def progress(delta: int) -> None:
        marks.append((time.perf_counter(), marks[-1][1] + delta))

    started, cpu = time.perf_counter(), _cpu_seconds()
    # What `convmem replay archive/ --group-by user --concurrency N` does.
    report = replay_in_processes(
        str(db),
        [archive],
        processes=concurrency,
        config=MemoryConfig(episodic=episodic),
        group_by="user",
        on_progress=progress,
    )
    seconds, cpu = time.perf_counter() - started, _cpu_seconds() - cpu
    with sqlite3.connect(db) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        stored = conn.execute("SELECT count(*) FROM cm_messages").fetchone()[0]
        fragments = conn.execute("SELECT count(*) FROM cm_fragments").fetchone()[0]
    total = report.messages_read

    def seconds_between(lo: float, hi: float) -> float:
        # Wall time to read messages lo..hi of the archive (progress is reported as read).
        t_lo = next(t for t, n in marks if n >= lo * total)
        t_hi = next(t for t, n in marks if n >= hi * total)
        return t_hi - t_lo

    first = seconds_between(0.0, 0.1) / (0.1 * total)
    last = seconds_between(0.9, 1.0) / (0.1 * total)
    queue.put(
        {
            "messages": total,
            "stored": stored,
            "fragments": fragments,
            "seconds": seconds,
            "client_cpu": cpu,
            # Children's peak RSS: the workers do the work; the parent only routes progress.
            "rss_mb": max(
                resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss,
                resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
            )
            / 1024,
            "disk_bytes": _disk_bytes(db),
            "first_tenth_us_per_msg": first * 1e6,
            "last_tenth_us_per_msg": last * 1e6,
        }
    )


def phase_pg(archive: Path, workdir: Path, queue: Any, concurrency: int, url: str) -> None:
    """The same replay as :func:`phase_ours`, with store and checkpoints on PostgreSQL (a fresh schema)."""
    import psycopg

    from convmem_graph.config import MemoryConfig
    from convmem_graph.replay import replay_in_processes
    from convmem_graph.store import MemoryStore
    from convmem_graph.store.urls import libpq_url

    with scratch_schema(url) as db_url:
        MemoryStore.from_url(db_url).close()  # create the schema once, before the workers race to
        started, cpu = time.perf_counter(), _cpu_seconds()
        report = replay_in_processes(
            db_url, [archive], processes=concurrency, config=MemoryConfig(), group_by="user"
        )
        seconds, cpu = time.perf_counter() - started, _cpu_seconds() - cpu
        with psycopg.connect(libpq_url(db_url)) as conn:
            stored = conn.execute("SELECT count(*) FROM cm_messages").fetchone()[0]  # type: ignore[index]
            fragments = conn.execute("SELECT count(*) FROM cm_fragments").fetchone()[0]  # type: ignore[index]
    queue.put(
        {
            "messages": report.messages_read,
            "stored": stored,
            "fragments": fragments,
            "seconds": seconds,
            "client_cpu": cpu,
        }
    )


def _phase_elsewhere(
    checkout: Path, which: str, archive: Path, workdir: Path, args: argparse.Namespace
) -> dict[str, Any]:
    """Run one phase in a fresh process whose ``convmem_graph`` is ``checkout``'s (``--phase``)."""
    cmd = [sys.executable, __file__, str(args.locomo), "--phase", which, "--archive", str(archive)]
    cmd += ["--workdir", str(workdir), "--concurrency", str(args.concurrency)]
    if which == "pg":
        cmd += ["--postgres", args.postgres]
    env = dict(os.environ, PYTHONPATH=str(checkout))
    done = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True)
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def _postgres_versus_sqlite(archive: Path, workdir: Path, args: argparse.Namespace) -> None:
    """Replay on PostgreSQL against SQLite, same archive and workers, interleaved rounds.

    With ``--baseline`` each round replays with this checkout and the baseline's, in alternating
    order, so both meet the same minute of a noisy host.
    """
    from sqlalchemy.engine import make_url

    here = Path(__file__).resolve().parent.parent
    database = str(make_url(args.postgres).database)
    sides = [("this", here)] + ([("baseline", args.baseline.resolve())] if args.baseline else [])
    rows: dict[str, list[dict[str, float]]] = {name: [] for name, _ in sides}
    for k in range(args.repeat):
        order = sides if k % 2 == 0 else sides[::-1]
        for name, checkout in order:
            side_dir = workdir / name
            side_dir.mkdir(parents=True, exist_ok=True)
            lite = _phase_elsewhere(checkout, "sqlite", archive, side_dir, args)
            # Sampled from here: a thread in the replay's process would make it spawn its workers
            # instead of forking them (see replay_in_processes).
            with BackendCpu(database) as server:
                pg = _phase_elsewhere(checkout, "pg", archive, side_dir, args)
            pg["server_cpu"] = server.seconds
            r_lite, r_pg = lite["messages"] / lite["seconds"], pg["messages"] / pg["seconds"]
            pg_cpu = pg["client_cpu"] + pg["server_cpu"]
            row = {
                "ratio": r_pg / r_lite,
                "cpu_ratio": lite["client_cpu"] / pg_cpu,
                "lite": r_lite,
                "pg": r_pg,
                "lite_cpu": lite["client_cpu"],
                "pg_client_cpu": pg["client_cpu"],
                "pg_server_cpu": pg["server_cpu"],
            }
            rows[name].append(row)
            print(
                f"round {k + 1} {name}: {args.concurrency} workers: SQLite {r_lite:,.0f} msg/s, "
                f"{lite['client_cpu']:.1f} CPU-s ({lite['stored']:,} messages, {lite['fragments']:,} "
                f"fragments stored); PostgreSQL {r_pg:,.0f} msg/s, {pg['client_cpu']:.1f} CPU-s client + "
                f"{pg['server_cpu']:.1f} server ({pg['stored']:,} messages, {pg['fragments']:,} "
                f"fragments); PostgreSQL / SQLite x{r_pg / r_lite:.2f} wall, "
                f"x{row['cpu_ratio']:.2f} by CPU (SQLite CPU / PostgreSQL client + server CPU)"
            )
            sys.stdout.flush()
    for name, _ in sides:
        got = rows[name]

        def med(key: str, got: list[dict[str, float]] = got) -> float:
            return statistics.median(r[key] for r in got)

        median = med("ratio")
        rounds = " / ".join(f"x{r['ratio']:.2f}" for r in got)
        verdict = "met" if median >= 0.8 else "NOT met"
        print(
            f"{name}: PostgreSQL / SQLite throughput over {args.repeat} rounds: median x{median:.2f} "
            f"(rounds {rounds}); target >= x0.8: {verdict}; "
            f"by CPU median x{med('cpu_ratio'):.2f}; medians SQLite {med('lite'):,.0f} msg/s "
            f"{med('lite_cpu'):.1f} CPU-s, PostgreSQL {med('pg'):,.0f} msg/s {med('pg_client_cpu'):.1f} "
            f"+ {med('pg_server_cpu'):.1f} CPU-s"
        )


class DefaultState(TypedDict):
    """The state a LangGraph user writes by default: the whole conversation, appended to."""

    messages: Annotated[list[AnyMessage], add_messages]


def phase_default(archive: Path, workdir: Path, queue: Any, max_seconds: float) -> None:
    from langchain_core.messages import convert_to_messages
    from langgraph.checkpoint.sqlite import SqliteSaver
    from langgraph.graph import START, StateGraph

    def remember(state: DefaultState) -> dict[str, Any]:
        return {}

    g = StateGraph(DefaultState)
    g.add_node("remember", remember)
    g.add_edge(START, "remember")
    db = workdir / "default.db"
    _remove_db(db)
    conn = sqlite3.connect(db, check_same_thread=False)
    graph = g.compile(checkpointer=SqliteSaver(conn))
    started = time.perf_counter()
    done = 0
    per_doc: list[tuple[int, float]] = []
    truncated = False
    for path in sorted(archive.glob("*.jsonl")):
        with path.open(encoding="utf-8") as fh:
            for line in fh:
                doc = json.loads(line)
                msgs = convert_to_messages(
                    [{"role": m["role"], "content": m["content"]} for m in doc["messages"]]
                )
                t0 = time.perf_counter()
                graph.invoke({"messages": msgs}, {"configurable": {"thread_id": doc["user"]}})
                per_doc.append((len(msgs), time.perf_counter() - t0))
                done += len(msgs)
        if time.perf_counter() - started > max_seconds:
            truncated = True
            break
    seconds = time.perf_counter() - started
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    tenth = max(1, len(per_doc) // 10)
    first = sum(t for _, t in per_doc[:tenth]) / max(1, sum(n for n, _ in per_doc[:tenth]))
    last = sum(t for _, t in per_doc[-tenth:]) / max(1, sum(n for n, _ in per_doc[-tenth:]))
    queue.put(
        {
            "messages": done,
            "seconds": seconds,
            "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "disk_bytes": _disk_bytes(db),
            "truncated": truncated,
            "first_tenth_us_per_msg": first * 1e6,
            "last_tenth_us_per_msg": last * 1e6,
        }
    )


def _run(target: Any, *args: Any) -> dict[str, Any]:
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    proc = ctx.Process(target=target, args=(*args[:2], queue, *args[2:]))
    proc.start()
    while True:
        try:
            result: dict[str, Any] = queue.get(timeout=1.0)
            break
        except Exception:  # noqa: BLE001 - queue.Empty; a crashed phase must not hang the benchmark
            if not proc.is_alive():
                raise SystemExit(
                    f"benchmark phase {target.__name__} failed (exit code {proc.exitcode})"
                ) from None
    proc.join()
    return result


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("locomo", type=Path, help="path to locomo10.json")
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--memories", type=int, default=500)
    parser.add_argument("--concurrency", type=int, default=2, help="replay worker processes (default 2)")
    parser.add_argument(
        "--default-max-seconds", type=float, default=600.0, help="time cap of the default pattern"
    )
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument(
        "--repeat", type=int, default=1, help="rounds of both phases; >1 also prints medians (default 1)"
    )
    parser.add_argument(
        "--episodic-cost",
        action="store_true",
        help="only compare one-process replay with the episodic index off and on (interleaved rounds)",
    )
    parser.add_argument(
        "--postgres",
        metavar="URL",
        default=None,
        help="only compare replay on PostgreSQL at URL (store and checkpoints, a fresh schema per "
        "round, dropped after) with replay on SQLite, same --concurrency, interleaved rounds",
    )
    parser.add_argument(
        "--baseline",
        metavar="DIR",
        type=Path,
        default=None,
        help="with --postgres: also replay with the convmem_graph of checkout DIR, interleaved",
    )
    parser.add_argument("--phase", choices=("sqlite", "pg"), help=argparse.SUPPRESS)
    parser.add_argument("--archive", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="convmem-bench-"))
    if args.phase:
        # One phase for --baseline's interleaving: its figures as one JSON line.
        extra = (args.postgres,) if args.phase == "pg" else ()
        result = _run(
            phase_pg if args.phase == "pg" else phase_ours, args.archive, workdir, args.concurrency, *extra
        )
        print(json.dumps(result))
        return 0
    archive = workdir / "archive"
    n_messages, n_memories = build_archive(
        args.locomo, archive, messages=args.messages, memories=args.memories
    )
    print(
        f"archive: {n_messages:,} messages, {n_memories} memories, {len(list(archive.glob('*.jsonl')))} files"
    )
    print(f"machine: {os.cpu_count()} CPUs, Python {sys.version.split()[0]}")

    if args.episodic_cost:
        _episodic_cost(archive, workdir, args.repeat)
        return 0
    if args.postgres:
        _postgres_versus_sqlite(archive, workdir, args)
        return 0
    rounds = [_round(archive, workdir, args, k, args.repeat) for k in range(args.repeat)]
    if args.repeat > 1:
        _print_medians(rounds, args.concurrency)
    return 0


def _episodic_cost(archive: Path, workdir: Path, repeat: int) -> None:
    """One process, episodic index off then on, interleaved per round: what the index costs."""
    ratios: list[float] = []
    sizes: list[tuple[float, float]] = []
    for k in range(repeat):
        off = _run(phase_ours, archive, workdir, 1, False)
        on = _run(phase_ours, archive, workdir, 1, True)
        r_off, r_on = off["messages"] / off["seconds"], on["messages"] / on["seconds"]
        b_off, b_on = off["disk_bytes"] / off["messages"], on["disk_bytes"] / on["messages"]
        ratios.append(r_on / r_off)
        sizes.append((b_off, b_on))
        print(
            f"round {k + 1}: episodic off {r_off:,.0f} msg/s, {b_off:,.0f} B/msg; "
            f"on {r_on:,.0f} msg/s, {b_on:,.0f} B/msg; throughput on/off x{r_on / r_off:.2f}"
        )
        sys.stdout.flush()
    print(
        f"episodic index cost over {repeat} rounds: "
        f"throughput on/off median x{statistics.median(ratios):.2f} "
        f"(rounds {' / '.join(f'x{x:.2f}' for x in ratios)}); bytes/message off "
        f"{statistics.median(b for b, _ in sizes):,.0f}, on {statistics.median(b for _, b in sizes):,.0f}"
    )


def _round(archive: Path, workdir: Path, args: argparse.Namespace, k: int, n: int) -> dict[str, float]:
    """Run both phases once (and ours in one process too) and print their figures."""
    if n > 1:
        print(f"\n=== round {k + 1} of {n} ===")
    sys.stdout.flush()
    single: dict[str, Any] | None = None
    if args.concurrency > 1:
        # The same replay in one process, for the per-process figure.
        single = _run(phase_ours, archive, workdir, 1)
    ours = _run(phase_ours, archive, workdir, args.concurrency)
    rate = ours["messages"] / ours["seconds"]
    print(
        f"\nconvmem_graph (SQLite store + checkpoints, heuristic extractor, extractive summary, "
        f"{args.concurrency} worker processes; includes their start-up):"
    )
    print(f"  {ours['messages']:,} messages in {ours['seconds']:.1f} s = {rate:,.0f} messages/s")
    print(f"  stored messages {ours['stored']:,}, fragments {ours['fragments']:,}")
    print(f"  peak RSS {ours['rss_mb']:.0f} MB")
    print(
        f"  disk {ours['disk_bytes'] / 1e6:.1f} MB = "
        f"{ours['disk_bytes'] / ours['messages']:,.0f} bytes/message"
    )
    print(
        f"  per-message cost first tenth {ours['first_tenth_us_per_msg']:.0f} us, "
        f"last tenth {ours['last_tenth_us_per_msg']:.0f} us "
        f"(ratio {ours['last_tenth_us_per_msg'] / ours['first_tenth_us_per_msg']:.2f})"
    )

    default = _run(phase_default, archive, workdir, args.default_max_seconds)
    drate = default["messages"] / default["seconds"]
    print("\ndefault pattern (add_messages state under SqliteSaver, one invoke per session):")
    note = " (stopped at the time cap)" if default["truncated"] else ""
    print(f"  {default['messages']:,} messages in {default['seconds']:.1f} s = {drate:,.0f} messages/s{note}")
    print(f"  peak RSS {default['rss_mb']:.0f} MB")
    print(
        f"  disk {default['disk_bytes'] / 1e6:.1f} MB = "
        f"{default['disk_bytes'] / default['messages']:,.0f} bytes/message"
    )
    print(
        f"  per-message cost first tenth {default['first_tenth_us_per_msg']:.0f} us, "
        f"last tenth {default['last_tenth_us_per_msg']:.0f} us"
    )
    srate = single["messages"] / single["seconds"] if single is not None else rate
    if single is not None:
        print(f"\nconvmem_graph in one process: {srate:,.0f} messages/s")
    print("\nratios (convmem_graph / default):")
    print(f"  throughput x{rate / drate:.1f}")
    if single is not None:
        print(f"  throughput of one process x{srate / drate:.1f}")
    dpm = default["disk_bytes"] / default["messages"]
    print(f"  disk per message x{(ours['disk_bytes'] / ours['messages']) / dpm:.2f}")
    print(f"  peak RSS x{ours['rss_mb'] / default['rss_mb']:.2f}")
    sys.stdout.flush()
    return {"ours": rate, "single": srate, "default": drate}


def _print_medians(rounds: list[dict[str, float]], concurrency: int) -> None:
    def row(key: str) -> str:
        values = [r[key] for r in rounds]
        return f"{' / '.join(f'{v:,.0f}' for v in values)} (median {statistics.median(values):,.0f})"

    ratios = [r["ours"] / r["default"] for r in rounds]
    print(f"\n=== {len(rounds)} rounds ===")
    print(f"convmem_graph, {concurrency} workers: {row('ours')} messages/s")
    if concurrency > 1:
        print(f"convmem_graph, one process: {row('single')} messages/s")
    print(f"default pattern: {row('default')} messages/s")
    print(
        f"throughput ratio: {' / '.join(f'x{x:.1f}' for x in ratios)} "
        f"(median x{statistics.median(ratios):.1f})"
    )


if __name__ == "__main__":
    sys.exit(main())
