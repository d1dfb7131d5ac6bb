"""``convmem delete``: delete a memory and everything in it."""

from __future__ import annotations

import argparse
import sys

from convmem_graph.cli._common import add_db_argument, open_existing, subcommand

__all__ = ["register"]


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register the sub-command."""
    p = subcommand(
        sub,
        "delete",
        "Delete a memory: messages, fragments, variables, summaries, dead letters and checkpoints.",
        "convmem delete mem_u10086",
    )
    p.add_argument("memory", metavar="MEMORY")
    add_db_argument(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Delete the memory; exit 2 when it does not exist."""
    with open_existing(args) as mem:
        existed = mem.delete(args.memory)
    if not existed:
        print(f"convmem delete: {args.memory}: no such memory", file=sys.stderr)
        return 2
    print(f"deleted {args.memory}")
    return 0
