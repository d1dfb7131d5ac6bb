"""The viewer's read pages: the memories list and one memory (timeline, facts, variables, logs).

Each function reads through :class:`~convmem_graph.memory.ConvMemory` (and the paged readers of
:mod:`convmem_graph.store.browse`) and returns a whole HTML page.
"""

from __future__ import annotations

from typing import Any

from convmem_graph.memory import ConvMemory
from convmem_graph.models import Fragment, Message, VariableValue
from convmem_graph.store.browse import count_memories, message_page, search_memories
from convmem_graph.viewer._html import esc, fmt_time, json_block, layout, memory_url, query_url, table

__all__ = ["PAGE_SIZE", "memories_page", "memory_page", "memory_tabs"]

#: Memories per list page and messages per timeline page.
PAGE_SIZE = 50
_FRAGMENT_LIMIT = 500
_LOG_LIMIT = 50


def memory_tabs(memory_id: str, active: str) -> str:
    """The links between a memory's pages."""
    tabs = [
        ("overview", "Memory", memory_url(memory_id)),
        ("search", "Search", memory_url(memory_id, "/search")),
        ("graph", "Memory graph", memory_url(memory_id, "/graph")),
        ("inject", "Inject preview", memory_url(memory_id, "/inject")),
        ("lifecycle", "Lifecycle graph", memory_url(memory_id, "/lifecycle")),
        ("delete", "Delete…", memory_url(memory_id, "/delete")),
    ]
    links = "".join(
        f'<a href="{esc(href)}" class="tab{" active" if key == active else ""}">{esc(label)}</a>'
        for key, label, href in tabs
    )
    return f'<nav class="tabs">{links}</nav>'


def memories_page(mem: ConvMemory, *, q: str = "", page: int = 1, notice: str = "") -> str:
    """The list of memories, searchable by id, with counts and last activity."""
    offset = (page - 1) * PAGE_SIZE
    q = q.strip()
    if q:
        infos = search_memories(mem.store, q, limit=PAGE_SIZE, offset=offset)
    else:
        infos = mem.memories(limit=PAGE_SIZE, offset=offset)
    total = count_memories(mem.store, id_contains=q or None)
    rows = [
        "<tr>"
        f'<td><a class="memory-link" href="{esc(memory_url(i.memory_id))}">{esc(i.memory_id)}</a>'
        f"{f' <span class=muted>{esc(i.description)}</span>' if i.description else ''}</td>"
        f'<td class="num">{i.message_count}</td><td class="num">{i.fragment_count}</td>'
        f"<td>{fmt_time(i.updated_at)}</td></tr>"
        for i in infos
    ]
    pager = []
    if page > 1:
        pager.append(f'<a rel="prev" href="{esc(query_url("/", q=q, page=page - 1))}">← previous</a>')
    if offset + PAGE_SIZE < total:
        pager.append(f'<a rel="next" href="{esc(query_url("/", q=q, page=page + 1))}">more →</a>')
    body = (
        "<h1>Memories</h1>"
        + (f'<p class="notice">{esc(notice)}</p>' if notice else "")
        + '<form class="search" method="get" action="/">'
        f'<input type="search" name="q" value="{esc(q)}" placeholder="memory id contains…" '
        'aria-label="memory id">'
        "<button>Search</button></form>"
        f'<p class="muted">{total} memor{"y" if total == 1 else "ies"}{" matching" if q else ""}</p>'
        + table(
            ["memory", "messages", "active facts", "last activity"],
            rows,
            css="memories",
            empty="no memory matches" if q else "no memories yet: run `convmem replay` or ingest something",
        )
        + f'<p class="pager">{" ".join(pager)}</p>'
    )
    return layout("Memories", body)


# -- one memory -------------------------------------------------------------------------------------
def _value_text(value: Any) -> str:
    return ", ".join(map(str, value)) if isinstance(value, list) else str(value)


def _fact_link(memory_id: str, fragment_id: str, label: str, **params: object) -> str:
    href = query_url(memory_url(memory_id), fact=fragment_id, **params) + "#timeline"
    return f'<a class="fact-link" data-fact="{esc(fragment_id)}" href="{esc(href)}">{esc(label)}</a>'


def _variables_section(mem: ConvMemory, memory_id: str, variables: dict[str, VariableValue]) -> str:
    specs = {s.name: s for s in mem.store.get_specs(memory_id)}
    if not specs:
        from convmem_graph.extractors.variables import DEFAULT_VARIABLE_SPECS

        specs = {s.name: s for s in DEFAULT_VARIABLE_SPECS}
    names = list(dict.fromkeys([*specs, *sorted(variables)]))
    action = esc(memory_url(memory_id, "/variables"))
    rows = []
    for name in names:
        v = variables.get(name)
        spec = specs.get(name)
        value = (
            f'<span class="value">{esc(_value_text(v.value))}</span>' if v else '<span class="muted">-</span>'
        )
        origin = f'<span class="origin {esc(v.origin)}">{esc(v.origin)}</span>' if v else ""
        facts = " ".join(_fact_link(memory_id, fid, fid[:10]) for fid in (v.fragment_ids if v else []))
        clear = (
            f'<form method="post" action="{action}" class="inline">'
            f'<input type="hidden" name="name" value="{esc(name)}">'
            '<button name="action" value="clear" class="danger">clear manual</button></form>'
            if v is not None and v.origin == "manual"
            else ""
        )
        kind = f' <span class="muted">({esc(spec.type)})</span>' if spec is not None else ""
        rows.append(
            f'<tr id="var-{esc(name)}" data-variable="{esc(name)}"><td>{esc(name)}{kind}</td><td>{value}</td>'
            f"<td>{origin}</td><td>{facts}</td>"
            f'<td><form method="post" action="{action}" class="inline set-variable">'
            f'<input type="hidden" name="name" value="{esc(name)}">'
            f'<input name="value" aria-label="manual value of {esc(name)}" placeholder="manual value">'
            f'<button name="action" value="set">set</button></form>{clear}</td></tr>'
        )
    new_var = (
        f'<form method="post" action="{action}" class="inline new-variable">'
        '<input name="name" placeholder="variable" aria-label="new variable name">'
        '<input name="value" placeholder="value" aria-label="new variable value">'
        '<button name="action" value="set">set</button></form>'
    )
    return (
        '<section id="variables"><h2>Variables</h2>'
        '<p class="muted">A manual value always wins over an inferred one; clearing it hands the field '
        "back to inference.</p>"
        + table(["variable", "value", "origin", "because of facts", "edit"], rows, css="variables")
        + new_var
        + "</section>"
    )


def _fragments_section(
    mem: ConvMemory, memory_id: str, fragments: list[Fragment], selected: str | None, now: int
) -> str:
    rows = []
    for f in fragments:
        status: str = f.status
        if f.transient:
            expired = f.expires_at is not None and f.expires_at <= now
            status += " · transient" + (" (expired)" if expired else "")
        expiry = fmt_time(f.expires_at) if f.expires_at else ""
        chain = ""
        if f.superseded_by:
            chain = "superseded by " + _fact_link(memory_id, f.superseded_by, f.superseded_by[:10])
        sources = f"{len(f.source_message_ids)} message{'s' if len(f.source_message_ids) != 1 else ''}"
        edit = ""
        if f.status != "deleted":
            base = memory_url(memory_id, f"/fragments/{f.id}")
            edit = (
                f'<details class="edit"><summary>correct / delete</summary>'
                f'<form method="post" action="{esc(base + "/edit")}" class="inline">'
                f'<input name="content" value="{esc(f.content)}" maxlength="200" size="30" '
                f'aria-label="corrected fact"><button>save</button></form>'
                f'<form method="post" action="{esc(base + "/delete")}" class="inline">'
                '<button class="danger">delete</button></form></details>'
            )
        rows.append(
            f'<tr id="f-{esc(f.id)}" class="fragment status-{esc(f.status)}'
            f'{" selected" if f.id == selected else ""}" data-fact="{esc(f.id)}" '
            f'data-sources="{esc(" ".join(f.source_message_ids))}">'
            f"<td>{_fact_link(memory_id, f.id, f.content)}"
            f'<div class="muted small">{esc(f.key)} · {esc(f.origin)} · {esc(f.id)}</div></td>'
            f"<td>{esc(f.category)}</td><td>{esc(status)}{chain and '<br>' + chain}</td><td>{expiry}</td>"
            f"<td>{_fact_link(memory_id, f.id, sources)}</td><td>{edit}</td></tr>"
        )
    more = (
        f'<p class="muted">showing the first {_FRAGMENT_LIMIT} facts</p>'
        if len(fragments) >= _FRAGMENT_LIMIT
        else ""
    )
    return (
        '<section id="facts"><h2>Facts (fragments)</h2>'
        '<p class="muted">Click a fact to light up the messages it came from.</p>'
        + table(
            ["fact", "category", "status", "expires", "from", ""], rows, css="fragments", empty="no facts yet"
        )
        + more
        + f'<form method="post" action="{esc(memory_url(memory_id, "/fragments"))}" class="add-fact">'
        '<input name="content" maxlength="200" size="40" required placeholder="用户喜欢… / The user …" '
        'aria-label="new fact"> <input name="category" value="other" maxlength="32" size="10" '
        'aria-label="category"> <button>add fact</button></form>' + "</section>"
    )


def _unspoken(m: Message) -> str:
    if not m.original or m.original == m.content:
        return ""
    tail = m.original[len(m.content) :] if m.original.startswith(m.content) else m.original
    label = "generated but not spoken" if m.original.startswith(m.content) else "original text"
    return (
        f'<div class="unspoken" title="{esc(label)}"><span class="label">{esc(label)}:</span> '
        f"{esc(tail)}</div>"
    )


def _message_row(m: Message, highlighted: set[str]) -> str:
    marks = "".join(
        f'<span class="mark {name}">{name}</span>'
        for name, on in (("interrupted", m.interrupted), ("partial", m.partial))
        if on
    )
    ids = " ".join(
        part
        for part in (
            f"round {m.round_id}" if m.round_id else "",
            f"turn {m.turn_id}" if m.turn_id is not None else "",
        )
        if part
    )
    return (
        f'<tr id="m-{esc(m.id)}" data-message="{esc(m.id)}" class="message role-{esc(m.role)}'
        f'{" hl" if m.id in highlighted else ""}">'
        f"<td>{fmt_time(m.timestamp_ms)}</td>"
        f'<td><span class="channel ch-{esc(m.channel)}">{esc(m.channel)}</span> '
        f'<span class="muted">{esc(m.source)}</span></td>'
        f"<td>{esc(m.role)}{f'<div class=muted>{esc(m.speaker_id)}</div>' if m.speaker_id else ''}</td>"
        f'<td class="muted small">{esc(ids)}</td>'
        f'<td class="content">{marks}{esc(m.content)}{_unspoken(m)}</td></tr>'
    )


def _timeline_section(
    mem: ConvMemory,
    memory_id: str,
    *,
    selected: Fragment | None,
    before: str | None,
    after: str | None,
    page_size: int,
) -> str:
    page = message_page(mem.store, memory_id, before=before, after=after, limit=page_size)
    highlighted = set(selected.source_message_ids) if selected is not None else set()
    parts = ['<section id="timeline"><h2>Timeline</h2>']
    if selected is not None:
        sources = mem.store.get_messages(memory_id, selected.source_message_ids)
        parts.append(
            f'<div class="sources" id="fact-sources"><h3>Messages behind “{esc(selected.content)}”</h3>'
            + table(
                ["time", "channel", "role", "round / turn", "message"],
                (_message_row(m, highlighted) for m in sources),
                css="timeline",
                empty="its source messages are no longer stored (retention) or it was set by hand",
            )
            + f'<p><a href="{esc(memory_url(memory_id))}#timeline">clear selection</a></p></div>'
        )
    fact = selected.id if selected is not None else None
    nav = []
    if page.older:
        href = query_url(memory_url(memory_id), before=page.older, fact=fact) + "#timeline"
        nav.append(f'<a rel="prev" href="{esc(href)}">← older</a>')
    if page.newer:
        href = query_url(memory_url(memory_id), after=page.newer, fact=fact) + "#timeline"
        nav.append(f'<a rel="next" href="{esc(href)}">newer →</a>')
    pager = f'<p class="pager">{" ".join(nav)}</p>'
    parts.append(pager)
    parts.append(
        table(
            ["time", "channel", "role", "round / turn", "message"],
            (_message_row(m, highlighted) for _, m in page.messages),
            css="timeline",
            empty="no messages",
        )
    )
    parts.append(pager + "</section>")
    return "".join(parts)


#: Fields of an audit snapshot worth a line (the rest are ids and times).
_AUDIT_FIELDS = ("content", "value", "category", "key", "status", "origin", "superseded_by", "expires_at")


def _short(value: Any) -> str:
    text = _value_text(value) if not isinstance(value, str) else value
    return text if len(text) <= 120 else text[:119] + "…"


def _change_lines(before: Any, after: Any) -> str:
    """What changed, one ``field: old → new`` line each (an added or removed object: its fields)."""
    old = before if isinstance(before, dict) else {}
    new = after if isinstance(after, dict) else {}
    lines = []
    for field in _AUDIT_FIELDS:
        a, b = old.get(field), new.get(field)
        if a == b or (a is None and b is None):
            continue
        if field not in old:
            lines.append(f'<div><span class="muted">{esc(field)}:</span> {esc(_short(b))}</div>')
        elif field not in new:
            lines.append(f'<div><span class="muted">{esc(field)}:</span> <s>{esc(_short(a))}</s></div>')
        else:
            lines.append(
                f'<div><span class="muted">{esc(field)}:</span> <s>{esc(_short(a))}</s> '
                f"→ {esc(_short(b))}</div>"
            )
    return "".join(lines) or '<span class="muted">no field changed</span>'


def _audit_section(mem: ConvMemory, memory_id: str) -> str:
    rows = [
        f"<tr><td>{fmt_time(a.at)}</td><td>{esc(a.kind)}</td><td>{esc(a.action)}</td>"
        f"<td>{esc(a.object_id)}</td><td>{esc(a.cause)}</td>"
        f'<td class="change">{_change_lines(a.before, a.after)}'
        "<details><summary>JSON</summary>"
        f"{json_block({'before': a.before, 'after': a.after}, css='json small')}</details></td></tr>"
        for a in mem.store.list_audit(memory_id, limit=_LOG_LIMIT)
    ]
    return (
        '<section id="audit"><h2>Audit log</h2>'
        f'<p class="muted">latest {_LOG_LIMIT} changes, newest first</p>'
        + table(
            ["when", "kind", "action", "object", "cause", "change"], rows, css="audit", empty="no changes"
        )
        + "</section>"
    )


def _dead_letters_section(mem: ConvMemory, memory_id: str) -> str:
    rows = [
        f"<tr><td>{fmt_time(d.created_at)}</td><td>{esc(d.source)}</td><td><code>{esc(d.path)}</code></td>"
        f'<td>{esc(d.error)}</td><td><details><summary>raw</summary><pre class="json small">'
        f"{esc(d.raw[:4000])}</pre></details></td></tr>"
        for d in mem.store.list_dead_letters(memory_id, limit=_LOG_LIMIT)
    ]
    return (
        '<section id="dead-letters"><h2>Dead letters</h2>'
        + table(["when", "source", "path", "reason", "item"], rows, css="dead", empty="none")
        + "</section>"
    )


def memory_page(
    mem: ConvMemory,
    memory_id: str,
    *,
    fact: str | None = None,
    before: str | None = None,
    after: str | None = None,
    notice: str = "",
    page_size: int = PAGE_SIZE,
) -> str:
    """One memory: summary, variables, facts with provenance, the timeline, audit and dead letters.

    Raises:
        MemoryNotFoundError: If the memory does not exist.
    """
    info = mem.info(memory_id)
    now = mem.lifecycle.clock()
    fragments = mem.store.list_fragments(memory_id, status=None, limit=_FRAGMENT_LIMIT)
    selected = next((f for f in fragments if f.id == fact), None)
    if fact and selected is None:
        try:
            selected = mem.store.get_fragment(memory_id, fact)
        except KeyError:
            selected = None
    summary = mem.summary(memory_id)
    budget = mem.config.summary_budget_tokens
    summary_html = (
        f'<p class="summary">{esc(summary.text)}</p>'
        f'<p class="muted">{summary.tokens} / {budget} tokens · version {summary.version} · '
        f"{esc(summary.origin)} · covers messages until {fmt_time(summary.covers_until_ms)}</p>"
        if summary is not None
        else '<p class="muted">no summary yet</p>'
    )
    body = (
        f"<h1>{esc(memory_id)}</h1>"
        + memory_tabs(memory_id, "overview")
        + (f'<p class="notice">{esc(notice)}</p>' if notice else "")
        + f'<p class="stats">{info.message_count} messages · {info.fragment_count} active facts · '
        f"created {fmt_time(info.created_at)} · last activity {fmt_time(info.updated_at)}</p>"
        + f'<section id="summary"><h2>Summary</h2>{summary_html}</section>'
        + _variables_section(mem, memory_id, mem.variables(memory_id))
        + _fragments_section(mem, memory_id, fragments, fact, now)
        + _timeline_section(
            mem, memory_id, selected=selected, before=before, after=after, page_size=page_size
        )
        + _audit_section(mem, memory_id)
        + _dead_letters_section(mem, memory_id)
    )
    return layout(memory_id, body, crumbs=[(memory_id, None)])
