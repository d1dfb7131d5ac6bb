"""``ingest``: read and validate this run's raw payloads; quarantine what fails.

A payload that cannot be read at all, and every item a reader marks invalid, goes to the store's
dead-letter table with the error and its JSON path, so nothing is dropped silently. Readable items
are handed to ``normalize`` through the run context (not the checkpointed state).
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from typing import Any

from langgraph.runtime import Runtime

from convmem_graph.errors import SourceFormatError
from convmem_graph.models import ReadResult
from convmem_graph.state import MemoryContext, MemoryState

__all__ = ["ingest"]

logger = logging.getLogger(__name__)


def _raw_text(data: Any) -> str:
    if isinstance(data, bytes):
        return data.decode("utf-8", errors="replace")
    if isinstance(data, str):
        return data
    try:
        return json.dumps(data, ensure_ascii=False, default=repr)
    except (TypeError, ValueError):  # e.g. circular structures
        return repr(data)


def _resolve(data: Any, path: str) -> Any:
    """Best-effort lookup of ``a.b[2].c`` in ``data``; returns ``data`` when the path does not resolve."""
    node = data
    for part in path.replace("[", ".[").split("."):
        if not part or part == "$":
            continue
        try:
            node = node[int(part[1:-1])] if part.startswith("[") else node[part]
        except (KeyError, IndexError, TypeError, ValueError):
            return data
    return node


def ingest(state: MemoryState, runtime: Runtime[MemoryContext]) -> MemoryState:
    """Read every raw input of the run with its source reader (auto-detected unless named).

    Returns the run's counters and resets every per-run key of the state.
    """
    from convmem_graph.sources import read_payload

    ctx = runtime.context
    memory_id = state["memory_id"]
    ctx.inbox.clear()
    skipped: Counter[str] = Counter()
    dead = 0
    errors: list[dict[str, str]] = []
    now = ctx.clock()
    for item in ctx.inputs:
        raw_doc: Any = None
        if isinstance(item.data, ReadResult):
            # Already read by the caller (e.g. replay reads payloads to group them by user).
            result = item.data
        else:
            raw_doc = item.data
            try:
                # Message lists without times (OpenAI/LangChain) are stamped with the run's time.
                result = read_payload(
                    raw_doc, item.source, bot_ids=ctx.config.bot_ids, config=ctx.config, base_timestamp_ms=now
                )
            except SourceFormatError as exc:
                logger.warning("quarantined %s: %s", item.name or "payload", exc)
                ctx.store.add_dead_letter(
                    memory_id, source=exc.source, raw=_raw_text(raw_doc), error=exc.reason, path=exc.path
                )
                dead += 1
                errors.append(
                    {"name": item.name, "source": exc.source, "path": exc.path, "reason": exc.reason}
                )
                continue
        for s in result.skipped:
            skipped[s.reason] += 1
            if s.reason == "invalid":
                raw = _raw_text(_resolve(raw_doc, s.path)) if raw_doc is not None else s.detail
                ctx.store.add_dead_letter(
                    memory_id,
                    source=result.source,
                    raw=f"{item.name}: {raw}" if item.name else raw,
                    error=s.detail or "invalid item",
                    path=s.path,
                )
                dead += 1
        ctx.inbox.append(result)
    return {
        "ingested": len(ctx.inbox),
        "dead_letters": dead,
        "errors": errors,
        "summary_version": 0,
        "skipped": dict(skipped),
        "new_message_ids": [],
        "fragment_ops": {},
        "variable_guesses": {},
        "variables_changed": [],
        "fragments_changed": False,
        "model_calls": 0,
        "payloads": [],
    }
