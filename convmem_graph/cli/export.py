"""``convmem export`` and ``convmem import``: a memory as one JSON document, round-tripping exactly."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from convmem_graph.cli._common import CliError, add_db_argument, open_existing, open_memory, subcommand

__all__ = ["register"]


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register both sub-commands."""
    e = subcommand(
        sub,
        "export",
        "Export a memory (messages, fragments of every status, variables, summary, audit log) as JSON.",
        "convmem export mem_u10086 -o mem_u10086.json",
    )
    e.add_argument("memory", metavar="MEMORY")
    e.add_argument("-o", "--output", type=Path, default=None, help="file to write (default: stdout)")
    add_db_argument(e)
    e.set_defaults(func=run_export)
    i = subcommand(
        sub,
        "import",
        "Import a memory exported with 'convmem export' (one transaction; exact round trip).",
        "convmem import mem_u10086.json --db postgresql://postgres@127.0.0.1/test\n"
        "convmem import mem_u10086.json --memory mem_copy --replace",
    )
    i.add_argument("file", type=Path, metavar="FILE")
    i.add_argument("--memory", default=None, metavar="ID", help="store under this memory id")
    i.add_argument("--replace", action="store_true", help="overwrite an existing memory of that id")
    add_db_argument(i)
    i.set_defaults(func=run_import)


def run_export(args: argparse.Namespace) -> int:
    """Write the export document."""
    from convmem_graph.store.transfer import export_memory

    with open_existing(args) as mem:
        mem.info(args.memory)  # an unknown memory is an error, never created by a read
        doc = export_memory(mem.store, args.memory)
    text = json.dumps(doc, ensure_ascii=False, indent=1, sort_keys=True) + "\n"
    if args.output is None:
        sys.stdout.write(text)
    else:
        args.output.write_text(text, encoding="utf-8")
        print(f"exported {args.memory} to {args.output}", file=sys.stderr)
    return 0


def run_import(args: argparse.Namespace) -> int:
    """Read and import the document."""
    from convmem_graph.errors import MemoryExistsError
    from convmem_graph.store._export_schema import ExportFormatError
    from convmem_graph.store.transfer import import_memory

    try:
        doc = json.loads(args.file.read_text(encoding="utf-8"))
    except OSError as exc:
        print(f"convmem import: {args.file}: cannot read: {exc.strerror or exc}", file=sys.stderr)
        return 2
    except ValueError as exc:
        print(f"convmem import: {args.file}: not JSON: {exc}", file=sys.stderr)
        return 2
    with open_memory(args) as mem:
        try:
            target = import_memory(
                mem.store, doc, memory_id=args.memory, replace=args.replace, index=mem.config.episodic
            )
        except ExportFormatError as exc:
            # The file first, then the field: "convmem import: FILE: $.format: ...".
            raise CliError(str(args.file), f"{exc.path}: {exc.reason}") from None
        except MemoryExistsError as exc:
            # The shell option, not the Python argument.
            raise CliError(exc.memory_id, "exists; add --replace to overwrite it") from None
        mem.snapshot(target)  # rebuild the call-start cache
    print(f"imported {target}")
    return 0
