"""HTML building blocks of the viewer: escaping, links, times, the page layout.

Every value that reaches a page passes through :func:`esc` (text and attributes) or :func:`url`
(path segments), so stored text cannot open a tag, close ``</user_memory>`` or run a script.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from datetime import UTC, datetime
from html import escape
from typing import Any
from urllib.parse import quote, urlencode

__all__ = [
    "STATIC_PREFIX",
    "esc",
    "fmt_time",
    "json_block",
    "layout",
    "memory_url",
    "query_url",
    "table",
]

#: Where the viewer's CSS and JS are served from.
STATIC_PREFIX = "/viewer/static"


def esc(value: object) -> str:
    """Escape any value for HTML text or a quoted attribute."""
    return escape("" if value is None else str(value), quote=True)


def memory_url(memory_id: str, suffix: str = "") -> str:
    """Return the path of a memory's page (``/memories/<id>``) or of one of its sub-pages."""
    return f"/memories/{quote(memory_id, safe='')}{suffix}"


def query_url(path: str, **params: object) -> str:
    """Return ``path`` with the non-empty ``params`` as its query string."""
    kept = {k: str(v) for k, v in params.items() if v not in (None, "")}
    return f"{path}?{urlencode(kept)}" if kept else path


def fmt_time(ms: int | None) -> str:
    """Render a ms-UTC timestamp as ``<time>``: server-local text, localized in the browser by JS."""
    if not ms:
        return '<span class="muted">-</span>'
    moment = datetime.fromtimestamp(ms / 1000, tz=UTC)
    local = moment.astimezone()
    return (
        f'<time datetime="{esc(moment.isoformat())}" title="{ms} ms UTC">'
        f"{esc(local.strftime('%Y-%m-%d %H:%M:%S'))}</time>"
    )


def json_block(doc: Any, *, css: str = "json") -> str:
    """Pretty-print a JSON-able value in a ``<pre>``."""
    text = json.dumps(doc, ensure_ascii=False, indent=2, default=str)
    return f'<pre class="{esc(css)}">{esc(text)}</pre>'


def table(headers: Iterable[str], rows: Iterable[str], *, css: str = "", empty: str = "none") -> str:
    """Return a table; ``rows`` are ready ``<tr>`` strings."""
    body = "".join(rows)
    if not body:
        return f'<p class="muted">{esc(empty)}</p>'
    head = "".join(f"<th>{esc(h)}</th>" for h in headers)
    return f'<table class="{esc(css)}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def layout(title: str, body: str, *, crumbs: Iterable[tuple[str, str | None]] = ()) -> str:
    """Wrap ``body`` in the page shell (static CSS and JS from the package, no network)."""
    trail = " / ".join(
        f'<a href="{esc(href)}">{esc(label)}</a>' if href else f"<span>{esc(label)}</span>"
        for label, href in [("memories", "/"), *crumbs]
    )
    return (
        "<!doctype html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{esc(title)} · convmem</title>"
        f'<link rel="stylesheet" href="{STATIC_PREFIX}/viewer.css">'
        f'<script defer src="{STATIC_PREFIX}/viewer.js"></script>'
        "</head><body>"
        f'<header><strong class="brand">convmem</strong> <nav class="crumbs">{trail}</nav></header>'
        f"<main>{body}</main></body></html>"
    )
