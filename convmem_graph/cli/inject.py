"""``convmem inject``: print the vendor payload that injects a memory into a voice or text agent."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from convmem_graph._ids import check_identifier
from convmem_graph.cli._common import (
    add_db_argument,
    add_embeddings_argument,
    command_config,
    dump_json,
    env_settings,
    one_prefix,
    open_existing,
    subcommand,
)

if TYPE_CHECKING:
    from convmem_graph.store.sqlite_reader import SqliteSnapshotReader

__all__ = ["VENDORS", "register"]

VENDORS = (
    "trtc",
    "trtc-llmconfig",
    "agora",
    "agora-llm",
    "agora-update",
    "agora-custom",
    "agora-standard",
    "openai",
)


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register the sub-command."""
    p = subcommand(
        sub,
        "inject",
        "Print the payload that injects a memory: TRTC StartAIConversation body (LLMConfig as a JSON "
        "string), Agora join/update bodies or custom-LLM messages, or OpenAI messages.",
        """convmem inject mem_u10086 --vendor trtc --persona "你是「小雨」。" --recent 6
convmem inject mem_u10086 --vendor agora-update --options agora.json --query 芒果
convmem inject mem_u10086 --vendor openai --query "what fruit should I avoid?\"""",
    )
    p.add_argument("memory", metavar="MEMORY")
    p.add_argument("--vendor", required=True, choices=VENDORS)
    p.add_argument("--persona", default="", help="persona text placed before the memory block")
    p.add_argument("--query", default=None, help="current user query: ranks facts by relevance")
    p.add_argument("--recent", type=int, default=None, metavar="N", help="recent turns to include (max 30)")
    p.add_argument("--budget", type=int, default=None, metavar="TOKENS", help="memory block budget")
    p.add_argument(
        "--placement",
        choices=["user_messages", "system_prompt"],
        default=None,
        help="TRTC: recent turns in LLMConfig.UserMessages (default) or a delimited SystemPrompt block",
    )
    p.add_argument(
        "--options",
        type=Path,
        default=None,
        metavar="FILE",
        help="JSON file of vendor options passed through "
        "(llm, agent_config, tts_config, params, name, properties ...)",
    )
    add_db_argument(p)
    add_embeddings_argument(p)
    p.set_defaults(func=run)


def _options(args: argparse.Namespace) -> dict[str, Any]:
    options: dict[str, Any] = {}
    if args.options is not None:
        try:
            loaded = json.loads(args.options.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise SystemExit(f"convmem inject: {args.options}: not a JSON options file: {exc}") from exc
        if not isinstance(loaded, dict):
            raise SystemExit(f"convmem inject: {args.options}: $: expected a JSON object")
        # Keys starting with "_" are comments.
        options.update({k: v for k, v in loaded.items() if not k.startswith("_")})
    for key, value in (
        ("persona", args.persona or None),
        ("query", args.query),
        ("recent_turns", args.recent),
        ("budget_tokens", args.budget),
        ("recent_placement", args.placement),
    ):
        if value is not None:
            options[key] = value
    return options


def run(args: argparse.Namespace) -> int:
    """Build and print the payload."""
    try:
        options = _options(args)
    except SystemExit as exc:
        print(exc, file=sys.stderr)
        return 2
    # With embeddings and a query the call start also searches by meaning: the full store does.
    by_meaning = bool(options.get("query")) and bool(args.embeddings or env_settings().embeddings)
    reader = None if by_meaning else _read_only(args.db)
    if reader is not None:
        with reader:
            check_identifier(args.memory, "memory_id")
            snapshot = reader.load_snapshot(args.memory)
            if snapshot is not None:
                from convmem_graph._time import now_ms
                from convmem_graph.snapshot import render_call_start

                build = partial(
                    render_call_start,
                    reader,
                    snapshot,
                    args.vendor,
                    options,
                    config=command_config(args),
                    now_ms=now_ms(),
                )
                return _print(build, args.vendor)
    # A server, a file another version set up, or a memory without a cached snapshot (the store
    # builds it, and reports an unknown memory).
    with open_existing(args) as mem:
        # An invalid id is refused as the id it is; an unknown one by payload() itself
        # (MemoryNotFoundError, nothing created): the call start reads only the snapshot.
        check_identifier(args.memory, "memory_id")
        return _print(partial(mem.payload, args.memory, args.vendor, **options), args.vendor)


def _read_only(db: str) -> SqliteSnapshotReader | None:
    """A read-only reader of the SQLite file ``db`` names (no SQLAlchemy import), when it can serve it."""
    from convmem_graph.store.sqlite_reader import SqliteSnapshotReader
    from convmem_graph.store.urls import sqlite_file

    # A path or a plain sqlite:/// URL (what --help shows): both are read without SQLAlchemy.
    path = sqlite_file(db)
    return None if path is None else SqliteSnapshotReader.open(path)


def _print(build: Callable[[], Any], vendor: str) -> int:
    """Print the payload ``build`` makes; vendor options it refuses exit 2 with one line."""
    try:
        payload = build()
    except ValueError as exc:
        print(f"convmem inject: {one_prefix(vendor, str(exc))}", file=sys.stderr)
        return 2
    dump_json(payload)
    return 0
