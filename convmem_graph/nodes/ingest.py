"""``ingest``: read and validate this run's raw payloads; quarantine what fails.

A payload that cannot be read at all, and every item a reader marks invalid, goes to the store's
dead-letter table with the error and its JSON path, so nothing is dropped silently (or, with
``context.strict_inputs``, an unreadable payload raises). Readable items are handed to
``normalize`` through the run context (not the checkpointed state). In a graph whose state also
has a ``messages`` channel (``MessagesState``), the messages added since the last run are read too.
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from collections.abc import Mapping
from typing import Any

from langgraph.runtime import Runtime

from convmem_graph.errors import SourceFormatError
from convmem_graph.models import ReadResult
from convmem_graph.state import (
    MAX_DEAD_LETTERS_PER_RUN,
    MAX_ERRORS_KEPT,
    MemoryContext,
    MemoryState,
    RawInput,
)

__all__ = ["IngestInput", "ingest"]

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


class IngestInput(MemoryState, total=False):
    """What ``ingest`` reads: the lifecycle state and, in graphs that have one, ``messages``.

    LangGraph hands a node only the keys of its input type, so ``messages`` is named here; in a
    graph without it the key is simply absent.
    """

    messages: list[Any]


def _state_messages(state: IngestInput) -> tuple[list[Any], str | None]:
    """New entries of a ``messages`` channel (graphs composing MemoryState with MessagesState).

    With message ids (``add_messages`` gives every message one) only the messages after the last
    one read are returned. Without ids every message is returned: their stored ids then come from
    their position in the list, so reading them again stores nothing twice.
    """
    messages = state.get("messages")
    if not isinstance(messages, list) or not messages:
        return [], None
    ids = [getattr(m, "id", None) or (m.get("id") if isinstance(m, Mapping) else None) for m in messages]
    if not all(isinstance(i, str) and i for i in ids):
        return list(messages), None
    cursor = state.get("messages_cursor")
    start = ids.index(cursor) + 1 if cursor in ids else 0
    return list(messages[start:]), ids[-1]


def ingest(state: IngestInput, runtime: Runtime[MemoryContext]) -> MemoryState:
    """Read every raw input of the run with its source reader (auto-detected unless named).

    New messages of a ``messages`` channel, when the graph has one, are read too (as LangChain
    messages). An unreadable payload is quarantined as a dead letter, or, with
    ``context.strict_inputs``, raises :class:`SourceFormatError` before anything is stored.

    Returns the run's counters and resets every per-run key of the state.
    """
    from convmem_graph.sources import read_payload

    ctx = runtime.context
    memory_id = state["memory_id"]
    ctx.inbox.clear()
    ctx.held.clear()  # a context used for a second run holds the first one's rows
    skipped: Counter[str] = Counter()
    dead = 0
    errors: list[dict[str, str]] = []
    error_count = 0
    unstored = 0  # bad payloads and items past MAX_DEAD_LETTERS_PER_RUN
    now = ctx.clock()
    inputs = list(ctx.inputs)
    from_state, cursor = _state_messages(state)
    if from_state:
        inputs.append(RawInput(from_state, None, name="state.messages"))
    read: list[tuple[RawInput, Any, ReadResult | SourceFormatError]] = []
    for item in inputs:
        if isinstance(item.data, ReadResult):
            # Already read by the caller (e.g. replay reads payloads to group them by user).
            read.append((item, None, item.data))
            continue
        try:
            # Message lists without times (OpenAI/LangChain) are stamped with the run's time.
            result = read_payload(
                item.data, item.source, bot_ids=ctx.config.bot_ids, config=ctx.config, base_timestamp_ms=now
            )
        except SourceFormatError as exc:
            if ctx.strict_inputs:
                raise  # before anything of this run is stored
            read.append((item, item.data, exc.with_traceback(None)))  # no frames kept per bad payload
            continue
        read.append((item, item.data, result))
    for item, raw_doc, outcome in read:
        if isinstance(outcome, SourceFormatError):
            bad = outcome
            error_count += 1
            dead += 1
            if len(errors) < MAX_ERRORS_KEPT:
                errors.append(
                    {"name": item.name, "source": bad.source, "path": bad.path, "reason": bad.reason}
                )
            if dead > MAX_DEAD_LETTERS_PER_RUN:
                unstored += 1
                continue
            logger.warning("quarantined %s: %s", item.name or "payload", bad)
            ctx.store.add_dead_letter(
                memory_id, source=bad.source, raw=_raw_text(raw_doc), error=bad.reason, path=bad.path
            )
            continue
        result = outcome
        if result.session_ended:
            # A TRTC 902 read from a file or replayed ends the session like --session-ended does.
            ctx.session_ended = True
        for s in result.skipped:
            skipped[s.reason] += 1
            if s.reason == "invalid":
                dead += 1
                if dead > MAX_DEAD_LETTERS_PER_RUN:
                    unstored += 1
                    continue
                raw = _raw_text(_resolve(raw_doc, s.path)) if raw_doc is not None else s.detail
                ctx.store.add_dead_letter(
                    memory_id,
                    source=result.source,
                    raw=f"{item.name}: {raw}" if item.name else raw,
                    error=s.detail or "invalid item",
                    path=s.path,
                )
        ctx.inbox.append(result)
    if unstored:
        # Bounded work on hostile input: one note instead of one write per bad item.
        logger.warning("%d more bad payloads or items of this run were counted, not quarantined", unstored)
        ctx.store.add_dead_letter(
            memory_id,
            source="convmem",
            raw=f"{unstored} more bad payloads or items in the run at {now}",
            error=f"dead-letter limit of {MAX_DEAD_LETTERS_PER_RUN} per run reached",
        )
    out: MemoryState = {
        "ingested": len(ctx.inbox),
        "dead_letters": dead,
        "errors": errors,
        "error_count": error_count,
        "summary_version": 0,
        "skipped": dict(skipped),
        "new_message_ids": [],
        "new_messages": 0,
        "fragment_ops": {},
        "variable_guesses": {},
        "variables_changed": [],
        "touched_keys": None,
        "fragments_changed": False,
        "model_calls": 0,
        "model_usage": {},
        "payloads": [],
    }
    if cursor is not None:
        out["messages_cursor"] = cursor
    return out
