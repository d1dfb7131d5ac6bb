"""``convmem show``: print one memory: variables, fragments with provenance, summary, recent turns."""

from __future__ import annotations

import argparse
from typing import Any

from convmem_graph.cli._common import add_db_argument, dump_json, local_time, open_existing, subcommand

__all__ = ["register", "show_document"]

_FRAGMENT_FIELDS = (
    "id",
    "content",
    "category",
    "key",
    "status",
    "transient",
    "expires_at",
    "source_message_ids",
    "origin",
    "superseded_by",
    "created_at",
    "updated_at",
)


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register the sub-command."""
    p = subcommand(
        sub,
        "show",
        "Show a memory: variables (with origin and supporting fragments), fragments with provenance, "
        "summary and recent turns.",
        "convmem show mem_u10086\nconvmem show mem_u10086 --json --all",
    )
    p.add_argument("memory", metavar="MEMORY")
    p.add_argument("--json", action="store_true", help="print one JSON document")
    p.add_argument("--all", action="store_true", help="include superseded and deleted fragments")
    p.add_argument("--recent", type=int, default=10, metavar="N", help="recent turns to show (default 10)")
    add_db_argument(p)
    p.set_defaults(func=run)


def show_document(
    mem: Any, memory_id: str, *, all_fragments: bool = False, recent: int = 10
) -> dict[str, Any]:
    """Build the ``convmem show --json`` document for ``memory_id``."""
    info = mem.info(memory_id)
    summary = mem.summary(memory_id)
    fragments = mem.fragments(memory_id, status=None if all_fragments else "active")
    return {
        "memory_id": memory_id,
        "message_count": info.message_count,
        "fragment_count": info.fragment_count,
        "variables": {
            name: {
                "value": v.value,
                "origin": v.origin,
                "fragment_ids": v.fragment_ids,
                "updated_at": v.updated_at,
            }
            for name, v in sorted(mem.variables(memory_id).items())
        },
        "fragments": [f.model_dump(include=set(_FRAGMENT_FIELDS)) for f in fragments],
        "summary": None
        if summary is None
        else {
            "text": summary.text,
            "tokens": summary.tokens,
            "version": summary.version,
            "covers_until_ms": summary.covers_until_ms,
        },
        "recent": [
            {
                "id": m.id,
                "role": m.role,
                "content": m.content,
                "timestamp_ms": m.timestamp_ms,
                "channel": m.channel,
            }
            for m in mem.recent(memory_id, recent)
        ],
    }


def run(args: argparse.Namespace) -> int:
    """Print the memory."""
    with open_existing(args) as mem:
        doc = show_document(mem, args.memory, all_fragments=args.all, recent=args.recent)
    if args.json:
        dump_json(doc)
        return 0
    _print_rich(doc)
    return 0


def _print_rich(doc: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    console = Console()
    console.print(
        f"[bold]{escape(doc['memory_id'])}[/bold]: {doc['message_count']} messages, "
        f"{doc['fragment_count']} active fragments"
    )
    variables = Table("variable", "value", "origin", "because of fragments", "updated", title="Variables")
    for name, v in doc["variables"].items():
        value = ", ".join(v["value"]) if isinstance(v["value"], list) else str(v["value"])
        variables.add_row(
            escape(name),
            escape(value),
            v["origin"],
            ", ".join(v["fragment_ids"]),
            local_time(v["updated_at"]),
        )
    console.print(variables)
    fragments = Table("id", "fact", "category", "status", "from messages", title="Fragments")
    for f in doc["fragments"]:
        status = f["status"] + (" (transient)" if f["transient"] else "")
        fragments.add_row(
            f["id"], escape(f["content"]), escape(f["category"]), status, ", ".join(f["source_message_ids"])
        )
    console.print(fragments)
    if doc["summary"]:
        console.print(
            f"[bold]Summary[/bold] ({doc['summary']['tokens']} tokens): {escape(doc['summary']['text'])}"
        )
    recent = Table("time", "role", "content", "channel", title="Recent turns")
    for m in doc["recent"]:
        recent.add_row(local_time(m["timestamp_ms"]), m["role"], escape(m["content"]), m["channel"])
    console.print(recent)
