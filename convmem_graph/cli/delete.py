"""``convmem delete``: delete a memory and everything in it, after a confirmation.

On a terminal the command shows what will go and asks; ``--yes`` skips the question. Without a
terminal to ask on (a script, a pipe) it refuses unless ``--yes`` is given, so a stray line in a
script cannot delete a user's memory unasked.
"""

from __future__ import annotations

import argparse
import sys

from convmem_graph.cli._common import CliError, add_db_argument, open_existing, subcommand

__all__ = ["register"]


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register the sub-command."""
    p = subcommand(
        sub,
        "delete",
        "Delete a memory: messages, fragments, variables, summaries, dead letters and checkpoints "
        "(asks first on a terminal).",
        "convmem delete mem_u10086          # asks for confirmation\n"
        "convmem delete mem_u10086 --yes    # in a script: no question",
    )
    p.add_argument("memory", metavar="MEMORY")
    p.add_argument(
        "-y", "--yes", action="store_true", help="delete without asking (needed without a terminal)"
    )
    add_db_argument(p)
    p.set_defaults(func=run)


def _confirmed(memory_id: str, messages: int, fragments: int) -> bool:
    """Ask on the terminal; only an explicit yes deletes."""
    sys.stderr.write(
        f"delete memory {memory_id} ({messages} messages, {fragments} fragments) and everything in it? [y/N] "
    )
    sys.stderr.flush()
    try:
        answer = sys.stdin.readline()
    except KeyboardInterrupt:
        answer = ""
    return answer.strip().lower() in {"y", "yes"}


def run(args: argparse.Namespace) -> int:
    """Delete the memory after confirmation; exit 2 when it does not exist or was not confirmed."""
    with open_existing(args) as mem:
        info = mem.info(args.memory)  # an unknown memory: "no such memory", before any question
        if not args.yes:
            if not sys.stdin.isatty():
                raise CliError(args.memory, "not deleted: no terminal to confirm on; add --yes to delete it")
            if not _confirmed(args.memory, info.message_count, info.fragment_count):
                print(f"convmem delete: {args.memory}: not deleted", file=sys.stderr)
                return 1
        existed = mem.delete(args.memory)
    if not existed:
        # Deleted by another process between the question and now.
        print(f"convmem delete: {args.memory}: no such memory", file=sys.stderr)
        return 2
    print(f"deleted {args.memory}")
    return 0
