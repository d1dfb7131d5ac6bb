"""``convmem replay``: replay stored conversation archives into memories."""

from __future__ import annotations

import argparse
import sys
import time
from typing import TYPE_CHECKING

from convmem_graph.cli._common import (
    add_db_argument,
    add_embeddings_argument,
    add_model_argument,
    dump_json,
    env_settings,
    open_memory,
    require_paths,
    subcommand,
)

if TYPE_CHECKING:
    from convmem_graph.extractors.pacing import ModelPacing

__all__ = ["register"]

_REDRAW_S = 0.1  # progress bar redraws at most ten times a second


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register the sub-command."""
    p = subcommand(
        sub,
        "replay",
        "Replay files and folders of stored conversations (JSON, JSON Lines, gzip; any supported "
        "source format) into memories: streamed, concurrent, resumable, idempotent, shardable.",
        """convmem replay archive/ --concurrency 4
convmem replay im_2025.jsonl.gz --group-by user --bot-id @RBT#xiaoyu
convmem replay archive/ --db postgresql://postgres@127.0.0.1/test --shard 0/2   # and 1/2 elsewhere
convmem replay calls/ --memory mem_u10086 --strict
convmem replay archive/ --model qwen-plus --model-concurrency 16 --rpm 600 --tpm 1000000

Grouping (--group-by): auto = memory id or user id found in each payload, else the file name;
user = found in the payload, or the document is quarantined; file = one memory per file.
A rerun after Ctrl-C or a kill continues: finished files are skipped, nothing is stored twice.

With --model, up to --model-concurrency calls run at once across memories (a memory's batches stay
in order), paced by --rpm/--tpm; a 429 waits for Retry-After (else backs off exponentially with
jitter) and after 6 attempts fails that memory's batch (its messages stay stored; a rerun resumes).
The limits hold for the whole command: with --concurrency N they are split evenly across the N
worker processes.""",
    )
    p.add_argument("paths", nargs="+", metavar="PATH", help="files or folders")
    add_embeddings_argument(p)
    p.add_argument("--memory", default=None, metavar="ID", help="put everything into this memory")
    p.add_argument("--group-by", choices=["auto", "user", "file"], default="auto")
    p.add_argument("--source", default=None, help="source format of every document (default: detect)")
    p.add_argument("--bot-id", action="append", default=[], metavar="ID", help="an assistant account id")
    p.add_argument(
        "--concurrency",
        type=int,
        default=None,
        metavar="N",
        help="worker processes, each owning a stable share of the memories (default: the CPU cores "
        "this process may use, at most --model-concurrency; 1 for --memory or an in-memory database)",
    )
    p.add_argument(
        "--model-concurrency",
        type=int,
        default=None,
        metavar="K",
        help="with --model: model calls at once across memories, for the whole command (split across "
        "--concurrency worker processes, so at least N; default: one per worker process)",
    )
    p.add_argument(
        "--rpm",
        type=float,
        default=None,
        metavar="N",
        help="with --model: model requests per minute for the whole command (LangChain's "
        "InMemoryRateLimiter; split across worker processes)",
    )
    p.add_argument(
        "--tpm",
        type=int,
        default=None,
        metavar="N",
        help="with --model: model tokens per minute (prompt + answer) for the whole command (split "
        "across worker processes)",
    )
    p.add_argument("--shard", default="0/1", metavar="I/N", help="process only shard I of N (0-based)")
    p.add_argument(
        "--batch",
        type=int,
        default=None,
        metavar="N",
        help="messages per lifecycle run (default 1000; 200 with --model, so a run costs at most one "
        "extraction and one summary call)",
    )
    p.add_argument("--strict", action="store_true", help="exit 1 when any item was quarantined")
    p.add_argument("--json", action="store_true", help="print the final report as JSON")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    add_db_argument(p)
    add_model_argument(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Replay and print the report."""
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

    from convmem_graph.replay import Replayer, ReplayReport, discover_files, parse_shard, replay_in_processes

    require_paths(args.paths)  # a typo exits 2 before the database is created
    try:
        shard = parse_shard(args.shard)
    except ValueError as exc:
        print(f"convmem replay: {exc}", file=sys.stderr)
        return 2
    if args.concurrency is None:
        args.concurrency = _default_workers(args)
    if args.concurrency < 1:
        print("convmem replay: --concurrency: must be at least 1", file=sys.stderr)
        return 2
    problem = _pacing_problem(args)
    if problem is not None:
        print(f"convmem replay: {problem}", file=sys.stderr)
        return 2
    pacing = _pacing(args)
    console = Console(stderr=True)
    show_progress = not args.no_progress and console.is_terminal
    batch = args.batch or (200 if args.model else 1000)
    with open_memory(args) as mem:
        mem.lifecycle.durability = "exit"  # the store's per-step transactions are the durable record
        # Walked first when the bar shows (no file is opened): its total and the ETA. The replay
        # reads this list, so the folders are walked (and symlinks reported) once.
        paths = discover_files(args.paths) if show_progress else args.paths
        total_files = len(paths) if show_progress else 0
        progress = Progress(
            TextColumn("[bold]replay"),
            BarColumn(bar_width=None),
            TextColumn("{task.fields[files]} files"),
            TextColumn("{task.fields[messages]:,} messages"),
            TextColumn("{task.fields[rate]:,.0f} msg/s"),
            TimeElapsedColumn(),
            TextColumn("ETA"),
            TimeRemainingColumn(),
            console=console,
            disable=not show_progress,
            # Redrawn from the callbacks below, not by rich's refresh thread: a single-threaded
            # parent can fork its workers (see replay_in_processes).
            auto_refresh=False,
        )
        task = progress.add_task(
            "replay",
            total=total_files,
            files=f"?/{total_files:,}",
            messages=0,
            rate=0.0,
        )
        drawn = [0.0]

        def advance(read: int, files_done: int) -> None:
            elapsed = progress.tasks[0].elapsed or 0.0
            progress.update(
                task,
                completed=files_done,  # the bar and the ETA follow files
                files=f"{files_done:,}/{total_files:,}",
                messages=read,
                rate=read / elapsed if elapsed > 0 else 0.0,
            )
            now = time.monotonic()
            if now - drawn[0] >= _REDRAW_S:
                drawn[0] = now
                progress.refresh()

        def on_progress(delta: int, report: ReplayReport) -> None:
            # ``report.files`` counts files started: the one being read is not done yet.
            advance(report.messages_read, max(report.files - 1, 0))

        if args.concurrency > 1:
            read, files = [0], [0]

            def on_worker_progress(delta: int) -> None:
                read[0] += delta
                advance(read[0], files[0])

            def on_worker_files(done: int) -> None:
                files[0] = done  # the slowest worker's files done
                advance(read[0], done)

            with progress:
                report = replay_in_processes(
                    mem.store.url,
                    paths,
                    pools=mem.store.pools,  # the CONVMEM_PG_* the command read
                    processes=args.concurrency,
                    config=mem.config,
                    model=args.model,
                    source=args.source,
                    group_by=args.group_by,
                    memory_id=args.memory,
                    shard=shard,
                    batch_messages=batch,
                    pacing=pacing,
                    on_progress=on_worker_progress,
                    on_files=on_worker_files,
                    embeddings=args.embeddings or env_settings().embeddings,
                )
                advance(report.messages_read, total_files)
        else:
            replayer = Replayer(
                mem.lifecycle,
                source=args.source,
                group_by=args.group_by,
                memory_id=args.memory,
                shard=shard,
                batch_messages=batch,
                pacing=pacing,
                on_progress=on_progress,
                embeddings=mem.embeddings,
            )
            with progress:
                report = replayer.run(paths)
                advance(report.messages_read, total_files)
    doc = report.as_dict()
    if args.json:
        dump_json(doc)
    else:
        print(
            f"replayed {doc['files']} files ({doc['files_skipped_done']} already done), "
            f"{doc['documents']} documents, {doc['messages_read']} messages read, "
            f"{doc['new_messages']} new, {doc['memories']} memories, "
            f"{doc['seconds']} s, {doc['messages_per_second']} msg/s"
        )
        if report.embedded_turns or report.embed_seconds:
            print(
                f"embedded {report.embedded_turns} turns and {report.embedded_facts} facts "
                f"in {report.embed_seconds:.1f} s"
            )
        for reason, count in sorted(report.quarantined.items()):
            print(f"quarantined: {count} x {reason}")
    return 1 if args.strict and report.quarantined else 0


def _default_workers(args: argparse.Namespace) -> int:
    """One worker per available core, unless the work cannot be shared out."""
    from convmem_graph.replay import default_concurrency
    from convmem_graph.store.urls import is_memory_sqlite, normalize_url

    try:
        in_memory = is_memory_sqlite(normalize_url(args.db))
    except ValueError:
        in_memory = False  # the store reports a bad URL when it opens
    if args.memory is not None or in_memory:
        return 1  # one memory is replayed in order by one worker; workers cannot share :memory:
    workers = default_concurrency()
    if args.model_concurrency is not None:
        workers = min(workers, max(args.model_concurrency, 1))
    return workers


def _pacing_problem(args: argparse.Namespace) -> str | None:
    """What is wrong with --model-concurrency/--rpm/--tpm, as "<flag>: <why>", or ``None``."""
    given = [
        flag
        for flag, value in (
            ("--model-concurrency", args.model_concurrency),
            ("--rpm", args.rpm),
            ("--tpm", args.tpm),
        )
        if value is not None
    ]
    if given and not args.model:
        return f"{given[0]}: needs --model (the offline extractor calls no model)"
    k = args.model_concurrency
    if k is not None and k < 1:
        return "--model-concurrency: must be at least 1"
    if k is not None and k < args.concurrency:
        return (
            f"--model-concurrency: {k} is split across the {args.concurrency} worker processes of "
            f"--concurrency: it must be at least {args.concurrency}"
        )
    if k is not None and k > 1024:
        return "--model-concurrency: at most 1024"
    if args.rpm is not None and not args.rpm > 0:
        return "--rpm: must be > 0"
    if args.tpm is not None and args.tpm < 1:
        return "--tpm: must be at least 1"
    return None


def _pacing(args: argparse.Namespace) -> ModelPacing | None:
    """The limits of the whole command; ``None`` without --model (no model call to pace)."""
    if not args.model:
        return None
    from convmem_graph.extractors.pacing import ModelPacing

    # Without --model-concurrency: one call at a time per worker process, as before; the gate
    # still paces and backs off 429s.
    return ModelPacing(concurrency=args.model_concurrency or args.concurrency, rpm=args.rpm, tpm=args.tpm)
