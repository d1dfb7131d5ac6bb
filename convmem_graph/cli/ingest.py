"""``convmem ingest``: run the memory lifecycle on conversation files for one memory."""

from __future__ import annotations

import argparse
import logging
import sys
from typing import TYPE_CHECKING

from convmem_graph.cli._common import (
    add_db_argument,
    add_embeddings_argument,
    add_model_argument,
    dump_json,
    open_memory,
    subcommand,
)
from convmem_graph.errors import SourceFormatError

if TYPE_CHECKING:
    from convmem_graph.memory import ConvMemory
    from convmem_graph.runner import RunResult
    from convmem_graph.state import RawInput

__all__ = ["register"]

# Loggers that warn once per quarantined item: the command prints one line per bad item itself.
_ITEM_LOGGERS = ("convmem_graph.nodes.ingest", "convmem_graph.store.repository")


class _DropWarnings(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno != logging.WARNING


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register the sub-command."""
    p = subcommand(
        sub,
        "ingest",
        "Run the lifecycle (ingest, normalize, extract, variables, summary, inject) on files for one memory.",
        """convmem ingest im_history.json call_callbacks.json --memory mem_u10086 --bot-id ai_xiaoyu_bot
convmem ingest chat.jsonl.gz --memory mem_1 --db postgresql://postgres@127.0.0.1/test --model qwen-plus""",
    )
    p.add_argument("files", nargs="+", metavar="FILE", help="JSON, JSON Lines or .gz files")
    p.add_argument("--memory", required=True, metavar="ID", help="memory id (the isolation unit)")
    p.add_argument("--source", default=None, help="source format (default: detect per document)")
    p.add_argument("--bot-id", action="append", default=[], metavar="ID", help="an assistant account id")
    p.add_argument("--session-ended", action="store_true", help="refresh the summary now")
    p.add_argument("--json", action="store_true", help="print the run result as JSON")
    add_db_argument(p)
    add_model_argument(p)
    add_embeddings_argument(p)
    p.set_defaults(func=run)


def _all_unreadable(
    mem: ConvMemory, inputs: list[RawInput]
) -> list[tuple[RawInput, SourceFormatError]] | None:
    """Every document with its read error when no reader accepts any, else ``None``.

    Stops at the first readable document (usually the first one): the run reads them all again.
    """
    from convmem_graph.sources import read_payload

    bad: list[tuple[RawInput, SourceFormatError]] = []
    now = mem.lifecycle.clock()
    for item in inputs:
        try:
            read_payload(
                item.data, item.source, bot_ids=mem.config.bot_ids, config=mem.config, base_timestamp_ms=now
            )
        except SourceFormatError as exc:
            bad.append((item, exc))
            continue
        return None
    return bad


def _quarantine_only(
    mem: ConvMemory, memory_id: str, rejected: list[tuple[RawInput, SourceFormatError]]
) -> RunResult:
    """Keep the rejected documents as dead letters of ``memory_id`` without creating the memory."""
    from convmem_graph.nodes.ingest import _raw_text
    from convmem_graph.runner import RunResult
    from convmem_graph.state import MAX_DEAD_LETTERS_PER_RUN, MAX_ERRORS_KEPT

    # Stored as the ingest node stores them: the same raw form (and so dead-letter key), the same cap.
    for item, exc in rejected[:MAX_DEAD_LETTERS_PER_RUN]:
        raw = _raw_text(item.data)
        mem.store.add_dead_letter(memory_id, source=exc.source, raw=raw, error=exc.reason, path=exc.path)
    unstored = len(rejected) - MAX_DEAD_LETTERS_PER_RUN
    if unstored > 0:
        mem.store.add_dead_letter(
            memory_id,
            source="convmem",
            raw=f"{unstored} more bad payloads or items in the run at {mem.lifecycle.clock()}",
            error=f"dead-letter limit of {MAX_DEAD_LETTERS_PER_RUN} per run reached",
        )
    errors = [
        {"name": item.name or "", "source": exc.source, "path": exc.path, "reason": exc.reason}
        for item, exc in rejected[:MAX_ERRORS_KEPT]
    ]
    return RunResult(
        memory_id=memory_id, dead_letters=len(rejected), errors=errors, error_count=len(rejected)
    )


def run(args: argparse.Namespace) -> int:
    """Read every file (bad files are reported and skipped), then run the lifecycle once."""
    from convmem_graph.sources import iter_documents
    from convmem_graph.sources.files import DEFAULT_LIMITS
    from convmem_graph.state import RawInput

    inputs: list[RawInput] = []
    bad = 0
    cap = DEFAULT_LIMITS.max_documents
    for path in args.files:
        try:
            docs: list[RawInput] = []
            for loc, doc in iter_documents(path):
                if len(inputs) + len(docs) >= cap:  # one run holds every document in memory
                    raise SourceFormatError(
                        "json",
                        loc,
                        f"more than {cap} documents in one ingest; use convmem replay for archives",
                    )
                docs.append(RawInput(doc, args.source, name=loc))
        except SourceFormatError as exc:
            print(f"convmem ingest: {path}: {exc}", file=sys.stderr)
            bad += 1
            continue
        except OSError as exc:
            print(f"convmem ingest: {path}: cannot read: {exc.strerror or exc}", file=sys.stderr)
            bad += 1
            continue
        inputs.extend(docs)
    if not inputs and bad:
        # Every file was rejected: nothing to run, and nothing is written (no empty memory,
        # snapshot or checkpoints).
        return 2
    drop = _DropWarnings()
    loggers = [] if getattr(args, "verbose", 0) else [logging.getLogger(n) for n in _ITEM_LOGGERS]
    for item_logger in loggers:
        item_logger.addFilter(drop)
    try:
        with open_memory(args) as mem:
            rejected = _all_unreadable(mem, inputs)
            if rejected is not None:
                # Nothing readable: quarantine without a lifecycle run, so no memory is created.
                result = _quarantine_only(mem, args.memory, rejected)
            else:
                result = mem.ingest(args.memory, inputs, session_ended=args.session_ended)
            # With --embeddings the new turns get their vectors before the command returns.
            embedded = (
                mem.embed_turns(args.memory) if mem.embeddings is not None and result.new_messages else 0
            )
    finally:
        for item_logger in loggers:
            item_logger.removeFilter(drop)
    for err in result.errors:
        print(
            f"convmem ingest: {err['name']}: {err['source']}: {err['path']}: {err['reason']}", file=sys.stderr
        )
        bad += 1
    if result.error_count > len(result.errors):
        more = result.error_count - len(result.errors)
        print(f"convmem ingest: {more} more unreadable payloads: see the dead letters", file=sys.stderr)
        bad += more
    if args.json:
        dump_json(result.model_dump() | ({"embedded_turns": embedded} if embedded else {}))
    else:
        ops = ", ".join(f"{k} {v}" for k, v in sorted(result.fragment_ops.items())) or "none"
        print(
            f"{args.memory}: {result.new_messages} new messages from {result.ingested} payloads; "
            f"fragment ops: {ops}; variables changed: {', '.join(result.variables_changed) or 'none'}"
            + (f"; {embedded} turns embedded" if embedded else "")
        )
    return 2 if bad else 0
