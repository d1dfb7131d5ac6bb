"""Helpers shared by the ``convmem`` sub-commands."""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from convmem_graph.memory import ConvMemory

__all__ = ["EXAMPLES", "add_db_argument", "add_model_argument", "dump_json", "open_memory", "subcommand"]

DEFAULT_DB = "convmem.db"

EXAMPLES = "examples:\n  "


def subcommand(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], name: str, help_text: str, example: str
) -> argparse.ArgumentParser:
    """Add a sub-command whose --help ends with a worked example."""
    return sub.add_parser(
        name,
        help=help_text,
        description=help_text,
        epilog=EXAMPLES + example.strip().replace("\n", "\n  "),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )


def add_db_argument(parser: argparse.ArgumentParser) -> None:
    """Add ``--db URL`` (SQLite file path or SQLAlchemy URL; env ``CONVMEM_DB``)."""
    parser.add_argument(
        "--db",
        default=os.environ.get("CONVMEM_DB", DEFAULT_DB),
        metavar="URL",
        help="SQLite file or database URL, e.g. postgresql://user@host/db "
        f"(default: $CONVMEM_DB or ./{DEFAULT_DB})",
    )


def add_model_argument(parser: argparse.ArgumentParser) -> None:
    """Add ``--model NAME`` (an OpenAI-compatible chat model; heuristic extractor when absent)."""
    parser.add_argument(
        "--model",
        default=None,
        metavar="NAME",
        help="OpenAI-compatible chat model for extraction and summaries (base URL and key from "
        "OPENAI_BASE_URL / OPENAI_API_KEY); default: the offline heuristic extractor",
    )


def open_memory(args: argparse.Namespace, **config: Any) -> ConvMemory:
    """Open the ConvMemory named by ``--db`` (and ``--model``/``--bot-id`` when present)."""
    from convmem_graph.config import MemoryConfig
    from convmem_graph.memory import ConvMemory

    cfg = MemoryConfig(bot_ids=list(getattr(args, "bot_id", None) or []), **config)
    return ConvMemory.open(args.db, model=getattr(args, "model", None), config=cfg)


def dump_json(doc: Any) -> None:
    """Print one JSON document to stdout (UTF-8, not ASCII-escaped)."""
    sys.stdout.write(json.dumps(doc, ensure_ascii=False, indent=2, default=str) + "\n")
