"""Helpers shared by the ``convmem`` sub-commands."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from langchain_core.embeddings import Embeddings

    from convmem_graph.config import MemoryConfig
    from convmem_graph.memory import ConvMemory
    from convmem_graph.settings import ConvMemSettings

__all__ = [
    "EXAMPLES",
    "CliError",
    "add_db_argument",
    "add_embeddings_argument",
    "add_global_options",
    "add_model_argument",
    "command_config",
    "dump_json",
    "embeddings_of",
    "local_time",
    "one_prefix",
    "open_existing",
    "open_memory",
    "require_paths",
    "resolve_global_options",
    "subcommand",
    "whole_number",
]

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


_DB_HELP = (
    "SQLite file or database URL, e.g. postgresql://user@host/db "
    f"(default: $CONVMEM_DB or ./{DEFAULT_DB}); also accepted before the command"
)
_MODEL_HELP = (
    "OpenAI-compatible chat model for extraction and summaries (base URL and key from "
    "OPENAI_BASE_URL / OPENAI_API_KEY); default: the offline heuristic extractor; also accepted "
    "before the command"
)


def whole_number(minimum: int) -> Callable[[str], int]:
    """An argparse ``type``: a whole number of at least ``minimum``, else argparse's clear error.

    Example:
        >>> whole_number(1)("64")
        64
        >>> whole_number(0)("-1")
        Traceback (most recent call last):
        ...
        argparse.ArgumentTypeError: must be 0 or more, got -1
    """

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be {minimum} or more, got {value}")
        return value

    return parse


class CliError(Exception):
    """A user error, printed as ``convmem <cmd>: <what>: <why>`` (exit ``code``, 2 by default)."""

    def __init__(self, what: str, why: str, code: int = 2) -> None:
        super().__init__(f"{what}: {why}")
        self.what = what
        self.why = why
        self.code = code


def one_prefix(what: str, message: str) -> str:
    """``what: message``, unless the message already starts with ``what`` (no ``trtc: trtc: ...``).

    A vendor name counts with its dashes as spaces too (``agora-join`` and ``agora join``).

    Example:
        >>> one_prefix("trtc", "trtc: StartAIConversation needs room_id")
        'trtc: StartAIConversation needs room_id'
        >>> one_prefix("agora-join", "agora join: name must be a non-empty string")
        'agora join: name must be a non-empty string'
        >>> one_prefix("trtc", "option llm must be a JSON object, got str")
        'trtc: option llm must be a JSON object, got str'
    """
    head = message.split(": ", 1)[0]
    if head in {what, what.replace("-", " ")}:
        return message
    return f"{what}: {message}"


def add_db_argument(parser: argparse.ArgumentParser) -> None:
    """Add ``--db URL`` (SQLite file path or SQLAlchemy URL; env ``CONVMEM_DB``).

    The default is filled in by :func:`resolve_global_options`, so ``convmem --db X CMD`` (given
    before the command) is not overwritten by the command's own default.
    """
    parser.add_argument("--db", default=argparse.SUPPRESS, metavar="URL", help=_DB_HELP)
    parser.set_defaults(_takes_db=True)


def add_model_argument(parser: argparse.ArgumentParser) -> None:
    """Add ``--model NAME`` (an OpenAI-compatible chat model; heuristic extractor when absent)."""
    parser.add_argument("--model", default=argparse.SUPPRESS, metavar="NAME", help=_MODEL_HELP)
    parser.set_defaults(_takes_model=True)


def add_embeddings_argument(parser: argparse.ArgumentParser) -> None:
    """Add ``--embeddings NAME`` (default ``CONVMEM_EMBEDDINGS``; recall by meaning beside the words)."""
    from convmem_graph._embedding_names import EMBEDDINGS_NAMES

    parser.add_argument(
        "--embeddings",
        default=None,
        metavar="NAME",
        help=f"embed turns and search them by meaning: {EMBEDDINGS_NAMES}; OPENAI_BASE_URL / "
        "OPENAI_API_KEY for openai:* (default: CONVMEM_EMBEDDINGS)",
    )


def embeddings_of(args: argparse.Namespace) -> Embeddings | None:
    """The embeddings model ``--embeddings`` (or ``CONVMEM_EMBEDDINGS``) names, if any.

    Raises:
        CliError: The name is not one the package knows, or what it needs is missing.
    """
    if not hasattr(args, "embeddings"):
        return None  # a command without the option (show, delete ...) never loads a model
    name = args.embeddings or env_settings().embeddings
    if not name:
        return None
    from convmem_graph.embeddings import embeddings_from_name

    try:
        return embeddings_from_name(name)
    except ValueError as exc:
        raise CliError("--embeddings", str(exc)) from exc


def add_global_options(parser: argparse.ArgumentParser) -> None:
    """Add ``--db`` and ``--model`` to the top-level parser (given before the command)."""
    parser.add_argument("--db", default=argparse.SUPPRESS, metavar="URL", help=_DB_HELP)
    parser.add_argument("--model", default=argparse.SUPPRESS, metavar="NAME", help=_MODEL_HELP)


def env_settings() -> ConvMemSettings:
    """The ``CONVMEM_*`` environment, read now (the one place commands read it)."""
    from convmem_graph.settings import ConvMemSettings

    return ConvMemSettings()


def resolve_global_options(args: argparse.Namespace) -> None:
    """Fill in ``--db``/``--model`` defaults; refuse them for a command that takes neither.

    Raises:
        CliError: ``--db`` or ``--model`` was given to a command that does not use it.
    """
    for name, takes, default in (
        ("db", "_takes_db", env_settings().db),
        ("model", "_takes_model", None),
    ):
        if getattr(args, takes, False):
            if not hasattr(args, name):
                setattr(args, name, default)
        elif hasattr(args, name):
            raise CliError(f"--{name}", "not an option of this command")


def require_paths(paths: list[str] | list[Any]) -> None:
    """Exit 2 before anything is opened when a named file or folder does not exist.

    Raises:
        CliError: The first path that does not exist.
    """
    for path in paths:
        if not os.path.exists(path):
            raise CliError(str(path), "no such file or directory")


def _database_missing(db: str) -> bool:
    """Whether ``db`` names a SQLite file that does not exist (servers are not checked)."""
    from sqlalchemy.engine import make_url

    from convmem_graph.store.urls import is_memory_sqlite, normalize_url, sqlite_path

    try:
        url = normalize_url(db)
    except ValueError as exc:
        raise CliError(db, str(exc)) from exc
    if make_url(url).get_backend_name() != "sqlite" or is_memory_sqlite(url):
        return False
    path = sqlite_path(url)
    return not path.startswith("file:") and not os.path.exists(path)


def open_existing(args: argparse.Namespace, **config: Any) -> ConvMemory:
    """Open the database of ``--db`` for a command that must not create it (reads, edits of a memory).

    Raises:
        CliError: ``--db`` names a SQLite file that does not exist (nothing is created: no
            database, no lock file).
    """
    if _database_missing(args.db):
        raise CliError(args.db, "no such database")
    return open_memory(args, **config)


def command_config(args: argparse.Namespace, **config: Any) -> MemoryConfig:
    """The MemoryConfig of a command (``--bot-id`` when present, ``config`` overrides)."""
    from convmem_graph.config import MemoryConfig

    # A command is one-shot: a model extractor extracts what it was given now (live turns wait
    # for a batch only in a long-lived process; see MemoryConfig.extract_after_user_messages).
    config = {"extract_after_user_messages": 1, **config}
    return MemoryConfig(bot_ids=list(getattr(args, "bot_id", None) or []), **config)


def open_memory(args: argparse.Namespace, **config: Any) -> ConvMemory:
    """Open the ConvMemory named by ``--db`` (and ``--model``/``--bot-id`` when present)."""
    from convmem_graph.memory import ConvMemory

    return ConvMemory.open(
        args.db,
        model=getattr(args, "model", None),
        config=command_config(args, **config),
        pools=env_settings().pools(),
        embeddings=embeddings_of(args),
        # A command's process ends with the command: it embeds in the foreground, and says so.
        embed_in_background=False,
    )


def local_time(ms: int | None) -> str:
    """Epoch milliseconds as local wall-clock time for tables (``--json`` keeps the milliseconds).

    Example:
        >>> local_time(None)
        ''
    """
    if ms is None:
        return ""
    from datetime import datetime

    return datetime.fromtimestamp(ms / 1000).astimezone().strftime("%Y-%m-%d %H:%M:%S")


def dump_json(doc: Any) -> None:
    """Print one JSON document to stdout (UTF-8, not ASCII-escaped)."""
    sys.stdout.write(json.dumps(doc, ensure_ascii=False, indent=2, default=str) + "\n")
