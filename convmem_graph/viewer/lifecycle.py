"""The lifecycle page: the compiled graph drawn as inline SVG, with the last run's path and timings.

The drawing comes from ``Lifecycle.graph.get_graph()`` (nodes in order, conditional edges dashed),
so it always matches the graph that runs. The last run is read from the checkpointer's latest state
of the memory's thread: its ``node_ms`` holds the time spent inside each node that ran, in order
(:func:`convmem_graph.accounting.timed_node`), so a run with ``durability="exit"`` (the default),
which keeps only its end state, shows its path and per-node timings too. State written before
``node_ms`` existed falls back to the checkpoint history: each checkpoint says which node runs next,
so consecutive checkpoints give the path and the time between them.
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any

from convmem_graph.checkpoints.namespace import thread_id_for
from convmem_graph.memory import ConvMemory
from convmem_graph.viewer._html import esc, json_block, layout, memory_url, table
from convmem_graph.viewer.pages import memory_tabs

__all__ = ["graph_svg", "last_run", "lifecycle_page"]

logger = logging.getLogger(__name__)

_NODE_W, _NODE_H, _GAP, _LEFT, _TOP = 170, 34, 22, 20, 16
_RUN_KEYS = (
    "ingested",
    "dead_letters",
    "new_messages",
    "fragment_ops",
    "variables_changed",
    "summary_version",
    "model_calls",
    "model_usage",
    "payloads",
    "errors",
)


def graph_svg(mem: ConvMemory, path: list[str]) -> str:
    """Draw the compiled lifecycle graph; nodes on ``path`` are highlighted."""
    drawable = mem.lifecycle.graph.get_graph()
    order = list(drawable.nodes)
    y = {name: _TOP + i * (_NODE_H + _GAP) for i, name in enumerate(order)}
    on_path = set(path)
    taken = {(a, b) for a, b in zip(["__start__", *path], [*path, "__end__"], strict=False)}
    edges = []
    right = _LEFT + _NODE_W
    widest = 0
    for arc, e in enumerate(drawable.edges):
        if e.source not in y or e.target not in y:
            continue
        taken_css = " taken" if (e.source, e.target) in taken else ""
        css = "edge" + (" conditional" if e.conditional else "") + taken_css
        span = order.index(e.target) - order.index(e.source)
        if span == 1:  # the straight spine
            x = _LEFT + _NODE_W // 2
            d = f"M{x},{y[e.source] + _NODE_H} L{x},{y[e.target]}"
        else:  # a skip: an arc on the right, wider for longer jumps
            bulge = 24 + 26 * (span - 1) + 3 * (arc % 4)
            widest = max(widest, bulge)
            sy, ty = y[e.source] + _NODE_H // 2 - 4, y[e.target] + _NODE_H // 2 + 4
            d = f"M{right},{sy} C{right + bulge},{sy} {right + bulge},{ty} {right},{ty}"
        edges.append(f'<path class="{css}" d="{d}"><title>{esc(e.source)} → {esc(e.target)}</title></path>')
    nodes = []
    for name in order:
        css = "node" + (" ran" if name in on_path else "") + (" terminal" if name.startswith("__") else "")
        nodes.append(
            f'<g class="{css}" data-node="{esc(name)}"><rect x="{_LEFT}" y="{y[name]}" rx="8" '
            f'width="{_NODE_W}" height="{_NODE_H}"></rect><text x="{_LEFT + _NODE_W // 2}" '
            f'y="{y[name] + _NODE_H // 2 + 5}" text-anchor="middle">{esc(name.strip("_"))}</text></g>'
        )
    height = _TOP * 2 + len(order) * (_NODE_H + _GAP)
    width = right + widest + 24
    return (
        f'<svg class="graph" role="img" aria-label="lifecycle graph" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" xmlns="http://www.w3.org/2000/svg">'
        '<defs><marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="6" markerHeight="6" '
        'orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z"></path></marker></defs>'
        + "".join(edges)
        + "".join(nodes)
        + "</svg>"
    )


def _ms_between(a: str | None, b: str | None) -> float | None:
    if not a or not b:
        return None
    try:
        return (datetime.fromisoformat(b) - datetime.fromisoformat(a)).total_seconds() * 1000
    except ValueError:
        return None


def last_run(mem: ConvMemory, memory_id: str) -> dict[str, Any]:
    """Return the last run's ``path``, per-node ``steps`` (name, ms) and final ``state`` counters."""
    config = {"configurable": {"thread_id": thread_id_for(memory_id)}}
    try:
        history = list(mem.lifecycle.graph.get_state_history(config, limit=64))  # type: ignore[arg-type]
    except Exception as exc:  # noqa: BLE001 - a checkpointer that cannot list history still shows the graph
        logger.warning("lifecycle history of %s unavailable: %s", memory_id, exc)
        return {"path": [], "steps": [], "state": {}, "note": f"no run history: {exc}"}
    if not history:
        return {"path": [], "steps": [], "state": {}, "note": "no checkpointed run yet"}
    run = []
    complete = False
    for snap in history:  # newest first: walk back to the start of the last run
        run.append(snap)
        if (snap.metadata or {}).get("source") == "input":
            complete = True
            break
    run.reverse()
    final = run[-1].values or {}
    state = {k: final[k] for k in _RUN_KEYS if k in final}
    if "new_messages" not in state:
        # A run checkpointed before the ids left the checkpoint kept them, not their count; the
        # graph's state no longer reads them back (an untracked channel), the checkpoint has them.
        saver = mem.lifecycle.checkpointer
        stored = saver.get_tuple(run[-1].config) if saver is not None else None
        ids = stored.checkpoint["channel_values"].get("new_message_ids") if stored is not None else None
        if isinstance(ids, list):
            state["new_messages"] = len(ids)
    timed = final.get("node_ms")
    note = ""
    if isinstance(timed, dict) and timed:
        # Measured inside the nodes and kept in the end state: whole even when only that was written.
        steps = [{"node": str(node), "ms": float(ms)} for node, ms in timed.items()]
    else:
        steps = []
        for before, after in zip(run, run[1:], strict=False):
            for node in before.next:
                steps.append({"node": node, "ms": _ms_between(before.created_at, after.created_at)})
        if not steps:
            note = "this run kept only its end state, written before per-node timings were kept"
        elif not complete:
            note = f"older checkpoints of this run were pruned: its last {len(steps)} steps are shown"
    return {
        "path": [s["node"] for s in steps],
        "steps": steps,
        "state": state,
        "note": note,
        "finished": run[-1].created_at,
    }


def _ms_text(ms: float | None) -> str:
    return "" if ms is None else f"{ms:.1f}"


def _usage_rows(usage: dict[str, dict[str, int]]) -> list[str]:
    """One row per stage that called a model (see :mod:`convmem_graph.accounting`)."""
    return [
        f"<tr><td>{esc(stage)}</td>"
        + "".join(
            f'<td class="num">{int(counts.get(k, 0))}</td>'
            for k in ("calls", "prompt_tokens", "completion_tokens")
        )
        + "</tr>"
        for stage, counts in sorted(usage.items())
    ]


def lifecycle_page(mem: ConvMemory, memory_id: str) -> str:
    """The lifecycle graph of a memory with its last run.

    Raises:
        MemoryNotFoundError: If the memory does not exist.
    """
    mem.info(memory_id)
    run = last_run(mem, memory_id)
    rows = [
        f'<tr><td>{esc(s["node"])}</td><td class="num">{_ms_text(s["ms"])}</td></tr>' for s in run["steps"]
    ]
    body = (
        f"<h1>{esc(memory_id)}: lifecycle</h1>"
        + memory_tabs(memory_id, "lifecycle")
        + '<div class="cols"><div>'
        + graph_svg(mem, run["path"])
        + "</div><div><h2>Last run</h2>"
        + (f'<p class="muted">{esc(run["note"])}</p>' if run.get("note") else "")
        + (f"<p>finished {esc(run['finished'])}</p>" if run.get("finished") else "")
        + f'<p class="path">{" → ".join(esc(n) for n in run["path"]) or "-"}</p>'
        + table(["node", "ms"], rows, css="steps", empty="no per-node timings")
        + "<h3>Model calls and tokens</h3>"
        + table(
            ["stage", "calls", "prompt tokens", "completion tokens"],
            _usage_rows(run["state"].get("model_usage") or {}),
            css="usage",
            empty="no model call in this run",
        )
        + "<h3>Messages in/out, facts, model calls</h3>"
        + json_block(run["state"])
        + "</div></div>"
    )
    return layout(
        f"{memory_id} lifecycle", body, crumbs=[(memory_id, memory_url(memory_id)), ("lifecycle", None)]
    )
