"""``convmem memories``: list the memories of a database."""

from __future__ import annotations

import argparse

from convmem_graph.cli._common import add_db_argument, dump_json, local_time, open_existing, subcommand

__all__ = ["register"]


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register the sub-command."""
    p = subcommand(
        sub, "memories", "List memories with their message and fragment counts.", "convmem memories --json"
    )
    p.add_argument("--limit", type=int, default=100)
    p.add_argument("--offset", type=int, default=0)
    p.add_argument("--json", action="store_true", help="print JSON")
    add_db_argument(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """List memories."""
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    with open_existing(args) as mem:
        infos = mem.memories(limit=args.limit, offset=args.offset)
    if args.json:
        dump_json([i.model_dump() for i in infos])
        return 0
    table = Table("memory", "messages", "fragments", "created", "updated")
    for i in infos:
        table.add_row(
            escape(i.memory_id),
            str(i.message_count),
            str(i.fragment_count),
            local_time(i.created_at),
            local_time(i.updated_at),
        )
    Console().print(table)
    return 0
