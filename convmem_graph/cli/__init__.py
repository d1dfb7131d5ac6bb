"""The ``convmem`` command: one module per sub-command, each exposing ``register(subparsers)``.

Sub-command modules import their heavy dependencies inside their handlers so ``convmem --help``
stays fast. Every handler returns the process exit code; user errors exit 2 with one clear line on
stderr and never a traceback.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import logging
import sys
from collections.abc import Sequence

from pydantic import ValidationError

from convmem_graph.cli._common import CliError, add_global_options, resolve_global_options
from convmem_graph.errors import ConvMemError, MemoryNotFoundError, describe_validation_error

__all__ = ["build_parser", "main", "run"]

# Order is the order shown in --help.
_COMMAND_MODULES = (
    "normalize",
    "ingest",
    "replay",
    "show",
    "memories",
    "delete",
    "variables",
    "inject",
    "export",
    "graph",
    "serve",
    "pull",
    "call",
    "view",
    "vectors",
)

#: Commands registered by a module of another name.
_OTHER_COMMANDS = {"import": "export"}


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("convmem-graph")
    except PackageNotFoundError:  # a source tree that was never installed
        return "unknown"


def _named_command(argv: Sequence[str]) -> str | None:
    """The sub-command ``argv`` names, skipping the global options before it (None: none named)."""
    takes_value = {"--db", "--model"}
    tokens = iter(argv)
    for token in tokens:
        if token == "--":
            return next(tokens, None)
        if token in takes_value:
            next(tokens, None)
        elif not token.startswith("-"):
            return token
    return None


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """Build the argument parser with every sub-command that is installed.

    Args:
        command: Register this sub-command only (when it is one): a command's run then imports
            its own module, not the other fourteen (~20 ms of a call start's ~0.4 s).
    """
    parser = argparse.ArgumentParser(
        prog="convmem",
        description="Conversational memory for voice and text agents (LangGraph lifecycle).",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="Run 'convmem COMMAND --help' for a command's options and an example.",
    )
    parser.add_argument("-v", "--verbose", action="count", default=0, help="log more (-vv for debug)")
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    add_global_options(parser)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    module_of = _OTHER_COMMANDS.get(command or "", command)
    names = (module_of,) if module_of in _COMMAND_MODULES else _COMMAND_MODULES
    for name in names:
        try:
            module = importlib.import_module(f"convmem_graph.cli.{name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"convmem_graph.cli.{name}":
                raise
            continue
        module.register(sub)
    return parser


def _database_error(exc: BaseException) -> BaseException | None:
    """The driver's error when ``exc`` is a database error (through SQLAlchemy or the SQLite reader)."""
    # Looked up, not imported: a command that never loaded SQLAlchemy cannot have raised its errors,
    # and a call start's read-only path runs without it.
    sqlalchemy_exc = sys.modules.get("sqlalchemy.exc")
    sqlite3 = sys.modules.get("sqlite3")
    if sqlalchemy_exc is not None and isinstance(exc, sqlalchemy_exc.SQLAlchemyError):
        orig = getattr(exc, "orig", None)
        return orig if isinstance(orig, BaseException) else exc
    return exc if sqlite3 is not None and isinstance(exc, sqlite3.Error) else None


def _is_model_error(exc: BaseException) -> bool:
    """Whether ``exc`` (or what caused it) comes from a chat model endpoint or its HTTP client."""
    from httpx import HTTPError
    from langchain_core.exceptions import ModelError

    seen: BaseException | None = exc
    for _ in range(10):  # the cause chain is short; a bound keeps a cycle harmless
        if seen is None:
            return False
        if isinstance(seen, ModelError | HTTPError) or type(seen).__module__.startswith("openai"):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``convmem`` command line and return its exit code."""
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser(_named_command(argv))
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.WARNING - 10 * min(args.verbose, 2),
        format="%(levelname)s %(name)s: %(message)s",
    )
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        resolve_global_options(args)
        code: int = args.func(args)
        return code
    except CliError as exc:
        print(f"convmem {args.command}: {exc.what}: {exc.why}", file=sys.stderr)
        return exc.code
    except MemoryNotFoundError as exc:
        memory = getattr(args, "memory", None)
        what = memory if isinstance(memory, str) else str(exc)
        print(f"convmem {args.command}: {what}: no such memory", file=sys.stderr)
        return 2
    except ValidationError as exc:
        # Never pydantic's own text: it echoes the input, which may hold an API key.
        print(f"convmem {args.command}: invalid input: {describe_validation_error(exc)}", file=sys.stderr)
        return 2
    except (ConvMemError, ValueError) as exc:
        if args.verbose >= 2:
            raise
        # The message names what failed first (a file, a field path): "<what>: <why>".
        print(f"convmem {args.command}: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"convmem {args.command}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # Output piped into `head` and the like: stop quietly, as Unix tools do.
        sys.stderr.close()
        return 141
    except Exception as exc:
        if args.verbose >= 2:
            raise
        failed = _database_error(exc)
        if failed is not None:
            # The driver's first line says what failed (unreachable server, locked file ...).
            reason = (str(failed).strip().splitlines() or [type(failed).__name__])[0]
            print(f"convmem {args.command}: database error: {reason} (-vv for details)", file=sys.stderr)
            return 2
        if not _is_model_error(exc):
            raise
        # An unreachable or failing model endpoint: one line, exit 1 (what was stored stays; the
        # next run retries the batch).
        reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
        print(f"convmem {args.command}: model error: {reason} (-vv for details)", file=sys.stderr)
        return 1


def run() -> None:
    """Entry point of the ``convmem`` executable (and ``python -m convmem_graph``): exit with :func:`main`.

    A command starts by importing SQLAlchemy, pydantic and its own modules, a few hundred thousand
    long-lived objects that the cyclic collector would scan over and over: at the default
    thresholds that was ~10 % of a ``convmem inject`` (117 collections). The process raises the
    youngest generation's threshold instead (one or two collections at start-up); a long-running
    command (``serve``) still collects, just less often. ``main()`` called in your own process
    leaves your collector alone.
    """
    gc.set_threshold(50_000, 20, 20)
    sys.exit(main())


if __name__ == "__main__":  # pragma: no cover
    run()
