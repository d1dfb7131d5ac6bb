"""``convmem normalize``: print the merged, normalized timeline of conversation files."""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import Counter
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from convmem_graph.errors import SourceFormatError

if TYPE_CHECKING:
    from convmem_graph.models import Message, ReadResult, SkippedItem

__all__ = ["register", "run"]

_EXAMPLE = """examples:
  convmem normalize im_roammsg_pages.json trtc_callbacks.json agora_history.json
  convmem normalize callbacks.jsonl.gz --source trtc --bot-id ai_xiaoyu_bot --json
  convmem normalize history.json --strict --json > timeline.json"""

_MESSAGE_FIELDS = (
    "id",
    "role",
    "content",
    "timestamp_ms",
    "channel",
    "source",
    "turn_id",
    "round_id",
    "speaker_id",
    "partial",
    "interrupted",
    "original",
)
_LIST_PATH = re.compile(r"^\[(\d+)\]\.?(.*)$")


class _InputError(Exception):
    """A bad input file: one line naming the file, the source format and the field path."""


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register the ``normalize`` sub-command."""
    from convmem_graph.sources import SOURCE_NAMES

    text = "Read conversation files (any supported source) and print one merged, normalized timeline."
    p = sub.add_parser(
        "normalize",
        help=text,
        description=text
        + "\nBad input exits with code 2 and one line naming the file, format and field path.",
        epilog=_EXAMPLE,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("files", nargs="+", metavar="FILE", help=".json, .jsonl/.ndjson, or .gz of either")
    p.add_argument(
        "--source", choices=SOURCE_NAMES, default=None, help="source format (default: detect per document)"
    )
    p.add_argument(
        "--bot-id", action="append", default=[], metavar="ID", help="an assistant account id (repeatable)"
    )
    p.add_argument("--json", action="store_true", help="print one JSON document instead of a table")
    p.add_argument("--strict", action="store_true", help="fail on the first bad item instead of skipping it")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Read, merge and print; return 0, or 2 with one stderr line on bad input."""
    from convmem_graph.sources.timeline import merge_timeline_traced

    try:
        inputs = _read_all(args)
    except _InputError as exc:
        print(f"convmem normalize: error: {exc}", file=sys.stderr)
        return 2
    messages, traced = merge_timeline_traced([result for result, _ in inputs])
    skipped = [_locate(item, inputs[origin][1]) for origin, item in traced]
    if args.json:
        _print_json(messages, skipped)
    else:
        _print_table(messages, skipped)
    return 0


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _read_all(args: argparse.Namespace) -> list[tuple[ReadResult, list[str] | str]]:
    """Read every document into (result, its file locator, or the locators of a batch list).

    TRTC callbacks of all files are read as one batch, so a turn whose sentences were delivered
    (and saved) separately is still joined and the bot is recognized from any 905 event.
    """
    from convmem_graph.sources import detect_source, iter_documents, read_payload
    from convmem_graph.sources.files import DEFAULT_LIMITS

    inputs: list[tuple[ReadResult, list[str] | str]] = []
    trtc_docs: list[Any] = []
    trtc_locs: list[str] = []
    opts: dict[str, Any] = {"bot_ids": args.bot_id, "lenient": not args.strict}
    documents = 0
    for path in args.files:
        locator = path
        try:
            for locator, doc in iter_documents(path):
                documents += 1
                if documents > DEFAULT_LIMITS.max_documents:  # every document is held in memory
                    raise _InputError(
                        f"{locator}: json: more than {DEFAULT_LIMITS.max_documents} documents in one run"
                    )
                source = args.source or detect_source(doc)
                if source == "trtc":
                    # Bodies of all files are read as one batch; a file holding a list of bodies
                    # adds its elements (ingest reads the same list as one payload: same messages).
                    items = doc if isinstance(doc, list) else [doc]
                    trtc_docs.extend(items)
                    trtc_locs.extend(
                        [locator] if len(items) == 1 else [f"{locator}[{i}]" for i in range(len(items))]
                    )
                    continue
                inputs.append((read_payload(doc, source, **opts), locator))
        except SourceFormatError as exc:
            if exc.source == "json":
                raise _InputError(f"{exc.path}: json: {_one_line(exc.reason)}") from None
            raise _InputError(f"{locator}: {exc.source}: {exc.path}: {_one_line(exc.reason)}") from None
        except OSError as exc:
            raise _InputError(f"{path}: cannot read: {exc.strerror or exc}") from None
    if trtc_docs:
        try:
            inputs.append((read_payload(trtc_docs, "trtc", **opts), trtc_locs))
        except SourceFormatError as exc:
            loc, sub = _split(exc.path, trtc_locs)
            raise _InputError(f"{loc}: trtc: {sub}: {_one_line(exc.reason)}") from None
    return inputs


def _split(path: str, locators: list[str]) -> tuple[str, str]:
    """Map a path inside a batch list (``[3].EventInfo``) to (locator of element 3, ``EventInfo``)."""
    match = _LIST_PATH.match(path)
    if match and int(match.group(1)) < len(locators):
        return locators[int(match.group(1))], match.group(2) or "$"
    return ", ".join(locators[:3]), path


def _locate(item: SkippedItem, where: list[str] | str) -> dict[str, str]:
    if isinstance(where, str):
        file, path = where, item.path
    else:
        file, path = _split(item.path, where)
    return {"reason": item.reason, "path": path, "detail": item.detail, "file": file}


def _print_json(messages: list[Message], skipped: list[dict[str, str]]) -> None:
    doc = {
        "messages": [{key: getattr(m, key) for key in _MESSAGE_FIELDS} for m in messages],
        "skipped": skipped,
    }
    encoding = (getattr(sys.stdout, "encoding", None) or "").lower().replace("-", "").replace("_", "")
    sys.stdout.write(json.dumps(doc, ensure_ascii=encoding != "utf8", indent=2) + "\n")


#: Timelines longer than this print as tab-separated lines instead of a table.
_TABLE_ROWS = 1000


def _print_table(messages: list[Message], skipped: list[dict[str, str]]) -> None:
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    table = Table(header_style="bold")
    table.add_column("time (UTC)", no_wrap=True)
    table.add_column("role", no_wrap=True)
    table.add_column("channel/source", no_wrap=True)
    table.add_column("turn/round", no_wrap=True)
    table.add_column("content", ratio=1, min_width=24)
    rows = []
    for m in messages:
        when = datetime.fromtimestamp(m.timestamp_ms / 1000, tz=UTC).strftime("%Y-%m-%d %H:%M:%S")
        turn = str(m.turn_id) if m.turn_id is not None else (m.round_id or "")
        flags = "".join(f" [{f}]" for f, on in (("partial", m.partial), ("interrupted", m.interrupted)) if on)
        rows.append((when, m.role, f"{m.channel}/{m.source}", turn, m.content + flags))
    console = Console(highlight=False)
    if not console.is_terminal:  # piped output: do not squeeze the text into 80 columns
        console = Console(highlight=False, width=160)
    if len(rows) > _TABLE_ROWS:
        # A rich table costs ~2 ms a row (20k messages took 40 s): long timelines print plain lines.
        sys.stdout.write("".join("\t".join(row).replace("\n", " ") + "\n" for row in rows))
    else:
        for when, role, where, turn, content in rows:
            table.add_row(when, role, where, turn, Text(content))
        console.print(table)
    counts = Counter(s["reason"] for s in skipped)
    summary = ", ".join(f"{reason} {n}" for reason, n in sorted(counts.items())) or "none"
    console.print(Text(f"{len(messages)} messages; skipped: {summary}"))
