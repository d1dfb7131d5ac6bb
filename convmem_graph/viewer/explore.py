"""The viewer's search page and memory graph page (issue 26, item 1).

- **Search** (``/memories/{id}/search``): the memory's timeline through the store's own episodic
  index (FTS5 on SQLite, the PostgreSQL index otherwise) and its facts through convmem's ranker,
  both narrowed by filters (channel, role, category, status, date range). Every turn found links
  to its place in the timeline; every fact to its source turns.
- **Graph** (``/memories/{id}/graph``): facts, the turns they came from, the variables they feed
  and the supersede chain, drawn as a server-rendered SVG of links (no script, no CDN): a fact
  links to its source turns on the memory page; a turn node links to its place in the timeline.
"""

from __future__ import annotations

import datetime as dt
from typing import Any, get_args

from convmem_graph.memory import ConvMemory
from convmem_graph.models import Channel, Fragment, Message
from convmem_graph.viewer._html import esc, fmt_time, layout, memory_url, query_url, table
from convmem_graph.viewer.pages import memory_tabs

__all__ = ["SearchFilters", "graph_page", "search_page", "turn_url"]

_SEARCH_TURNS = 200
_GRAPH_FACTS = 2000
_ROW = 26


class SearchFilters:
    """The filters of the search page, parsed from the query string (empty: no filter)."""

    def __init__(
        self,
        *,
        channel: str = "",
        role: str = "",
        category: str = "",
        status: str = "active",
        since: str = "",
        until: str = "",
    ) -> None:
        self.channel = channel.strip()
        self.role = role.strip()
        self.category = category.strip()
        self.status = (
            status.strip() if status.strip() in ("active", "superseded", "deleted", "any") else "active"
        )
        self.since_ms = _day_ms(since, "since")
        self.until_ms = _day_ms(until, "until", end=True)
        self.since = since.strip()
        self.until = until.strip()

    def turn_ok(self, m: Message) -> bool:
        """Whether a turn passes the channel, role and date filters."""
        return (
            (not self.channel or m.channel == self.channel)
            and (not self.role or m.role == self.role)
            and (self.since_ms is None or m.timestamp_ms >= self.since_ms)
            and (self.until_ms is None or m.timestamp_ms < self.until_ms)
        )

    def fact_ok(self, f: Fragment) -> bool:
        """Whether a fact passes the category and date filters (status is applied by the read)."""
        when = f.observed_at or f.created_at
        return (
            (not self.category or f.category == self.category)
            and (self.since_ms is None or when >= self.since_ms)
            and (self.until_ms is None or when < self.until_ms)
        )


def _day_ms(text: str, name: str, *, end: bool = False) -> int | None:
    text = text.strip()
    if not text:
        return None
    try:
        day = dt.date.fromisoformat(text)
    except ValueError:
        raise ValueError(f"{name}: a date as YYYY-MM-DD, got {text[:20]!r}") from None
    if end:
        day += dt.timedelta(days=1)
    return int(dt.datetime(day.year, day.month, day.day, tzinfo=dt.UTC).timestamp() * 1000)


def turn_url(memory_id: str, seq: int, m: Message) -> str:
    """The memory page's timeline starting at this turn, scrolled to it."""
    cursor = f"{m.timestamp_ms}.{seq - 1}"
    return query_url(memory_url(memory_id), after=cursor) + f"#m-{m.id}"


def _seqs(mem: ConvMemory, memory_id: str, ids: list[str]) -> dict[str, int]:
    from sqlalchemy import select

    from convmem_graph.store.schema import messages

    if not ids:
        return {}
    stmt = select(messages.c.id, messages.c.seq).where(
        messages.c.memory_id == memory_id, messages.c.id.in_(ids)
    )
    with mem.store.read() as conn:
        return {r.id: int(r.seq) for r in conn.execute(stmt)}


def _select(name: str, value: str, options: list[str]) -> str:
    opts = "".join(
        f'<option value="{esc(o)}"{" selected" if o == value else ""}>{esc(o or "any")}</option>'
        for o in options
    )
    return f'<label>{esc(name)} <select name="{esc(name)}">{opts}</select></label>'


def search_page(mem: ConvMemory, memory_id: str, q: str, filters: SearchFilters) -> str:
    """Full-text search over one memory's timeline and facts, with filters.

    Raises:
        MemoryNotFoundError: If the memory does not exist.
        ValueError: A malformed date filter.
    """
    mem.info(memory_id)
    status = None if filters.status == "any" else filters.status
    facts_all = mem.store.list_fragments(memory_id, status=status)  # type: ignore[arg-type]
    turns: list[tuple[int, Message]] = []
    facts: list[Fragment] = []
    if q.strip():
        found = mem.store.search_episodes(memory_id, q, limit=_SEARCH_TURNS)
        # Hits holding a query term (a reply found only as context of a hit holds none).
        turns = [(h.seq, h.message) for h in found.hits if h.terms and filters.turn_ok(h.message)]
        turns.sort(key=lambda t: (t[1].timestamp_ms, t[0]))
        words = [w for w in q.lower().split() if w]
        facts = [f for f in facts_all if filters.fact_ok(f) and all(w in f.content.lower() for w in words)]
        if not facts:
            from convmem_graph.payloads.relevance import lexical_scores

            scores = lexical_scores(q, [f.content for f in facts_all])
            facts = [
                facts_all[i]
                for i in sorted(scores, key=lambda i: -scores[i])
                if filters.fact_ok(facts_all[i])
            ]
    categories = sorted({f.category for f in facts_all})
    form = (
        f'<form method="get" action="{esc(memory_url(memory_id, "/search"))}" class="search">'
        f'<input type="search" name="q" value="{esc(q)}" placeholder="words in turns and facts" autofocus> '
        + _select("channel", filters.channel, ["", *get_args(Channel)])
        + _select("role", filters.role, ["", "user", "assistant"])
        + _select("category", filters.category, ["", *categories])
        + _select("status", filters.status, ["active", "superseded", "deleted", "any"])
        + f'<label>since <input type="date" name="since" value="{esc(filters.since)}"></label>'
        + f'<label>until <input type="date" name="until" value="{esc(filters.until)}"></label>'
        + '<button type="submit">Search</button></form>'
    )
    turn_rows = [
        f'<tr class="hit role-{esc(m.role)}"><td>{fmt_time(m.timestamp_ms)}</td><td>{esc(m.channel)}</td>'
        f'<td>{esc(m.role)}</td><td><a href="{esc(turn_url(memory_id, seq, m))}">'
        f"{esc(m.content)}</a></td></tr>"
        for seq, m in turns
    ]
    fact_rows = [
        f'<tr class="hit"><td>{esc(f.category)}</td><td>{esc(f.status)}</td>'
        f'<td><a href="{esc(query_url(memory_url(memory_id), fact=f.id))}#fact-sources">'
        f"{esc(f.content)}</a></td></tr>"
        for f in facts
    ]
    body = (
        f"<h1>{esc(memory_id)}: search</h1>"
        + memory_tabs(memory_id, "search")
        + form
        + (
            f'<p class="muted">{len(turns)} turns, {len(facts)} facts for “{esc(q)}”</p>'
            if q.strip()
            else '<p class="muted">type words to search the timeline and the facts</p>'
        )
        + '<h2 id="turns">Turns</h2>'
        + table(
            ["time", "channel", "role", "message"], turn_rows, css="timeline results", empty="no turn found"
        )
        + '<h2 id="facts">Facts</h2>'
        + table(["category", "status", "fact"], fact_rows, css="results", empty="no fact found")
    )
    return layout(f"{memory_id} search", body, crumbs=[(memory_id, memory_url(memory_id)), ("search", None)])


def _box(x: int, y: int, w: int, text: str, href: str, css: str, node_id: str) -> str:
    label = text if len(text) <= 28 else text[:27] + "…"
    return (
        f'<a href="{esc(href)}" id="{esc(node_id)}" class="node {css}"><title>{esc(text)}</title>'
        f'<rect x="{x}" y="{y}" width="{w}" height="{_ROW - 6}" rx="4"/>'
        f'<text x="{x + 6}" y="{y + 14}">{esc(label)}</text></a>'
    )


def graph_page(mem: ConvMemory, memory_id: str) -> str:
    """The memory as a graph: facts, their source turns, the variables they feed, supersede chains.

    Raises:
        MemoryNotFoundError: If the memory does not exist.
    """
    mem.info(memory_id)
    facts = mem.store.list_fragments(memory_id, status=None)[:_GRAPH_FACTS]
    variables = mem.variables(memory_id)
    source_ids = sorted({i for f in facts for i in f.source_message_ids})
    seqs = _seqs(mem, memory_id, source_ids)
    turns = {m.id: m for m in mem.store.get_messages(memory_id, [i for i in source_ids if i in seqs])}
    ordered_turns = sorted(turns.values(), key=lambda m: (m.timestamp_ms, seqs.get(m.id, 0)))
    # Facts in the order of their first source turn: most links run level, few cross.
    turn_index = {m.id: i for i, m in enumerate(ordered_turns)}
    facts.sort(
        key=lambda f: (
            min((turn_index[s] for s in f.source_message_ids if s in turn_index), default=len(turn_index)),
            f.created_at,
            f.id,
        )
    )
    fact_y = {f.id: 10 + i * _ROW for i, f in enumerate(facts)}
    turn_y = {m.id: 10 + i * _ROW for i, m in enumerate(ordered_turns)}
    feeds: dict[str, list[str]] = {}
    for name, v in variables.items():
        for fid in v.fragment_ids or []:
            feeds.setdefault(fid, []).append(name)
    var_names = sorted({n for names in feeds.values() for n in names})
    var_y = {n: 10 + i * _ROW for i, n in enumerate(var_names)}
    xt, xf, xv, w = 10, 330, 650, 260
    edges: list[str] = []
    for f in facts:
        y0 = fact_y[f.id] + 10
        for sid in f.source_message_ids:
            if sid in turn_y:
                edges.append(
                    f'<path class="edge source" d="M{xf},{y0} C{xf - 40},{y0} '
                    f'{xt + w + 40},{turn_y[sid] + 10} {xt + w},{turn_y[sid] + 10}"/>'
                )
        for name in feeds.get(f.id, []):
            yv = var_y[name] + 10
            edges.append(
                f'<path class="edge feeds" d="M{xf + w},{y0} C{xv - 40},{y0} {xf + w + 40},{yv} {xv},{yv}"/>'
            )
        if f.superseded_by and f.superseded_by in fact_y:
            y1 = fact_y[f.superseded_by] + 10
            edges.append(
                f'<path class="edge supersede" d="M{xf + w},{y0} '
                f'C{xf + w + 30},{y0} {xf + w + 30},{y1} {xf + w},{y1}"/>'
            )
    nodes = [
        _box(
            xt,
            turn_y[m.id],
            w,
            f"{m.role}: {m.content}",
            turn_url(memory_id, seqs[m.id], m),
            f"turn role-{m.role}",
            f"t-{m.id}",
        )
        for m in ordered_turns
    ]
    nodes += [
        _box(
            xf,
            fact_y[f.id],
            w,
            f.content,
            query_url(memory_url(memory_id), fact=f.id) + "#fact-sources",
            f"fact status-{f.status}",
            f"f-{f.id}",
        )
        for f in facts
    ]
    nodes += [
        _box(
            xv,
            var_y[n],
            200,
            f"{n} = {variables[n].value}",
            memory_url(memory_id) + "#variables",
            "variable",
            f"v-{n}",
        )
        for n in var_names
    ]
    height = 20 + _ROW * max(len(facts), len(ordered_turns), len(var_names), 1)
    svg = (
        f'<svg class="memory-graph" xmlns="http://www.w3.org/2000/svg" width="{xv + 220}" height="{height}" '
        f'role="img" aria-label="memory graph">' + "".join(edges) + "".join(nodes) + "</svg>"
    )
    counts: dict[str, Any] = {
        "facts": len(facts),
        "turns": len(ordered_turns),
        "variables": len(var_names),
        "superseded": sum(1 for f in facts if f.superseded_by),
    }
    legend = (
        '<p class="muted">turns (left) → facts (middle) → variables (right); an arc on the right of a fact '
        "joins it to the fact that superseded it. Click a turn for its place in the timeline, a fact for "
        f"its source turns. {counts['facts']} facts, {counts['turns']} turns, "
        f"{counts['variables']} variables, {counts['superseded']} superseded.</p>"
    )
    body = f"<h1>{esc(memory_id)}: memory graph</h1>" + memory_tabs(memory_id, "graph") + legend + svg
    return layout(f"{memory_id} graph", body, crumbs=[(memory_id, memory_url(memory_id)), ("graph", None)])
