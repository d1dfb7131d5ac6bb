"""``convmem memories``: list the memories of a database, one page at a time, ids never cut.

On a terminal the list is a table whose id column is never shortened (the other columns give way);
piped, it is one tab-separated line per memory, so ``cut -f1`` and ``xargs`` get whole ids. A page
that is not the whole list ends with a line on stderr saying how many more there are.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from convmem_graph.cli._common import (
    add_db_argument,
    dump_json,
    local_time,
    open_existing,
    subcommand,
    whole_number,
)

if TYPE_CHECKING:
    from convmem_graph.models import MemoryInfo

__all__ = ["register"]

_DEFAULT_LIMIT = 100


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register the sub-command."""
    p = subcommand(
        sub,
        "memories",
        "List memories with their message and fragment counts (a page at a time; says how many more).",
        "convmem memories                     # the first 100\n"
        "convmem memories --offset 100        # the next 100\n"
        "convmem memories --all | cut -f1     # every id, whole, one a line",
    )
    p.add_argument(
        "--limit",
        type=whole_number(0),
        default=_DEFAULT_LIMIT,
        metavar="N",
        help=f"memories per page (default {_DEFAULT_LIMIT}); the rest are counted on stderr",
    )
    p.add_argument(
        "--offset", type=whole_number(0), default=0, metavar="N", help="skip the first N memories (default 0)"
    )
    p.add_argument("--all", action="store_true", help="list every memory (no page limit)")
    p.add_argument("--json", action="store_true", help="print JSON (one array; ids whole)")
    add_db_argument(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """List one page of memories and say how many are left."""
    from convmem_graph.store.browse import count_memories

    with open_existing(args) as mem:
        total = count_memories(mem.store)
        limit = max(total - args.offset, 0) if args.all else args.limit
        infos = mem.memories(limit=limit, offset=args.offset) if limit else []
    if args.json:
        dump_json([i.model_dump() for i in infos])
    elif sys.stdout.isatty():
        _print_table(infos)
    else:
        _print_plain(infos)
    more = total - args.offset - len(infos)
    if more > 0:
        # stderr: a pipe of ids (or the JSON array) stays clean, a person still sees it.
        next_offset = args.offset + len(infos)
        print(
            f"{more} more (of {total}): --offset {next_offset} for the next page, --all for every one",
            file=sys.stderr,
        )
    return 0


def _print_plain(infos: list[MemoryInfo]) -> None:
    """One tab-separated line per memory: id, messages, fragments, created, updated."""
    for i in infos:
        fields = (
            i.memory_id,
            i.message_count,
            i.fragment_count,
            local_time(i.created_at),
            local_time(i.updated_at),
        )
        sys.stdout.write("\t".join(map(str, fields)) + "\n")


def _print_table(infos: list[MemoryInfo]) -> None:
    """A table for a person; the id column keeps its full width whatever the terminal's."""
    from rich.console import Console
    from rich.markup import escape
    from rich.measure import Measurement
    from rich.table import Column, Table

    longest = max((len(i.memory_id) for i in infos), default=6)
    table = Table(
        Column("memory", no_wrap=True, min_width=longest),
        "messages",
        "fragments",
        "created",
        "updated",
    )
    for i in infos:
        table.add_row(
            escape(i.memory_id),
            str(i.message_count),
            str(i.fragment_count),
            local_time(i.created_at),
            local_time(i.updated_at),
        )
    console = Console()
    # A terminal narrower than the table: render it at its natural width rather than cut an id
    # (the terminal wraps the line; the id stays whole and copyable).
    natural = Measurement.get(console, console.options.update_width(10_000), table).maximum
    console.width = max(console.width, natural)
    console.print(table)
