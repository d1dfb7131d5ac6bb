"""Agora ConvoAI short-term memory: GET history, NCS event 103, and the custom-LLM request body.

All three carry the same OpenAI-style items with Agora's extension fields (``turn_id``,
``timestamp``, ``metadata.{source,user,interrupted,original}``, ``speech_*_ms``); every field
except ``role`` and ``content`` is optional.

Rules decided here (the vendor docs disagree with themselves, see the spec's doc conflicts):

- Time of an item: ``timestamp`` (seconds or ms by magnitude), else ``speech_start_ms``, else
  ``speech_end_ms``; an item without any takes the previous item's time (leading ones take the
  payload's ``start_ts``, else the first later item time, else the LLM request's ``timestamp``),
  so array order is kept.
- ``turn_id`` is kept exactly as given (0- or 1-based); ``""`` (SIP) means none.
- ``metadata.source`` is lower-cased with spaces/dashes as ``_`` (``llm failure`` ->
  ``llm_failure``); absent, it is ``asr`` for user and ``llm`` for assistant items.
- Channel: ``im`` for ``source == "message"`` (text typed by the user over RTM), else ``voice``.
- Ids: ``agent_id`` + role + ``turn_id`` + item time; items without a time use their index and a
  content hash; a custom-LLM request (no ``agent_id``) adds the content hash. The NCS ``noticeId``
  changes per delivery and is never used.
- Skipped: system messages (``memory_block`` when they hold our ``<user_memory>`` block), tool
  messages, tool-call-only assistant messages, empty content, think-API injections.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from convmem_graph._ids import stable_id
from convmem_graph.errors import SourceFormatError
from convmem_graph.models import Message, ReadResult
from convmem_graph.sources._common import (
    MAX_TEXT_CHARS,
    ReadContext,
    clean_text,
    content_hash,
    dedupe_by_id,
    fail,
    get_dict,
    get_list,
    idx,
    join,
    opt_int,
    opt_str,
    timestamp_ms,
)
from convmem_graph.text.sentences import normalize_text

__all__ = ["MEMORY_BLOCK_TAG", "THINK_PREFIX", "looks_like_agora", "read_agora"]

SOURCE = "agora"
#: Opening tag of the memory block our payload builders inject as a system message.
MEMORY_BLOCK_TAG = "<user_memory>"
#: Prefix of user items injected by Agora's "think" API (not said by the user).
THINK_PREFIX = "[think API injected]"
_EVENT_NAMES = {
    101: "agent joined",
    102: "agent left",
    103: "agent history",
    104: "agent expire",
    110: "agent error",
    111: "agent metrics",
    112: "turns finished",
    201: "inbound call state",
    202: "outbound call state",
}
_EXTENSION_KEYS = ("turn_id", "metadata", "speech_start_ms", "speech_end_ms", "speech_algorithmic_delay")
_REQUEST_KEYS = ("turn_id", "interruptable")


def _is_item_list(value: Any) -> bool:
    return isinstance(value, list) and any(
        isinstance(it, Mapping) and any(k in it for k in _EXTENSION_KEYS) for it in value[:50]
    )


def looks_like_agora(data: Any) -> bool:
    """Return whether ``data`` has the shape of an Agora history, 103 notification or LLM request."""
    if isinstance(data, list):
        if (
            data
            and all(isinstance(d, Mapping) for d in data[:50])
            and all(_is_document(d) for d in data[:50])
        ):
            return True
        return _is_item_list(data)
    return isinstance(data, Mapping) and _is_document(data)


def _is_document(data: Mapping[str, Any]) -> bool:
    if "noticeId" in data and "payload" in data:
        return True
    if isinstance(data.get("eventType"), int) and isinstance(data.get("payload"), Mapping):
        return True
    if "contents" in data:  # the reader names the field when it is not an array
        return True
    messages = data.get("messages")
    if isinstance(messages, list):
        return any(k in data for k in _REQUEST_KEYS) or _is_item_list(messages)
    return False


@dataclass
class _Item:
    message: Message
    raw_ts: int | None
    index: int


@dataclass
class _Doc:
    agent_id: str | None
    start_ms: int | None
    labels: Mapping[str, Any]
    channel: str | None
    request_ms: int | None = None


def read_agora(data: Any, ctx: ReadContext) -> ReadResult:
    """Read an Agora history response, 103 notification, custom-LLM request, or a list of them.

    Args:
        data: The parsed payload.
        ctx: Reader settings and skipped-items sink.

    Returns:
        Messages ordered by time (array order on ties) and the skipped items.

    Raises:
        SourceFormatError: The payload is not one of the Agora shapes (or, when strict, an item is bad).
    """
    result = ReadResult(source=SOURCE)
    messages: list[Message] = []
    if isinstance(data, list) and data and all(isinstance(d, Mapping) and _is_document(d) for d in data):
        for i, doc in enumerate(data):
            messages.extend(_read_document(doc, idx("$", i), ctx, result))
    elif isinstance(data, list):
        messages.extend(_read_items(data, "$", _Doc(None, None, {}, None), ctx, result))
    elif isinstance(data, Mapping):
        messages.extend(_read_document(data, "$", ctx, result))
    else:
        fail(SOURCE, "$", "expected an Agora history response, 103 notification or LLM request object")
    result.messages = dedupe_by_id(ctx, messages, lambda m: 1 if m.interrupted else 0)
    result.skipped = ctx.skipped
    return result


def _read_document(doc: Mapping[str, Any], path: str, ctx: ReadContext, result: ReadResult) -> list[Message]:
    if "payload" in doc and ("noticeId" in doc or "eventType" in doc):
        event = opt_int(SOURCE, doc, "eventType", path)
        if event != 103:
            name = _EVENT_NAMES.get(event or -1, "unknown event")
            ctx.skip("event_type_ignored", join(path, "eventType"), f"{event} {name}")
            return []
        doc = get_dict(SOURCE, doc, "payload", path)
        path = join(path, "payload")
    if "contents" in doc:
        items = get_list(SOURCE, doc, "contents", path)
        items_path = join(path, "contents")
    elif "messages" in doc:
        items = get_list(SOURCE, doc, "messages", path)
        items_path = join(path, "messages")
    else:
        fail(SOURCE, path, "expected 'contents' (history / event 103) or 'messages' (LLM request)")
    labels_raw = doc.get("labels")
    labels: Mapping[str, Any] = labels_raw if isinstance(labels_raw, Mapping) else {}
    start_ms = _optional_ts(doc, "start_ts", path)
    info = _Doc(
        agent_id=_soft_str(doc.get("agent_id")),
        start_ms=start_ms,
        labels=labels,
        channel=_soft_str(doc.get("channel")),
        request_ms=_optional_ts(doc, "timestamp", path) if "messages" in doc else None,
    )
    memory_id = _id_str(labels.get("memory_id"))
    if memory_id and result.memory_id is None:
        result.memory_id = memory_id
    app_user = _id_str(labels.get("app_user_id"))
    if app_user and result.user_id is None:
        result.user_id = app_user
    return _read_items(items, items_path, info, ctx, result)


def _id_str(value: Any) -> str | None:
    # Memory and user ids are kept as given: an invalid one is rejected where it is used (one
    # identifier rule), never silently transformed (two ids could collapse into one).
    if isinstance(value, str) and value:
        return value
    return _soft_str(value)


def _soft_str(value: Any) -> str | None:
    if isinstance(value, str) and value:
        return clean_text(value)
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    return None


def _optional_ts(obj: Mapping[str, Any], key: str, path: str) -> int | None:
    value = obj.get(key)
    if value is None or value == "":
        return None
    try:
        return timestamp_ms(SOURCE, value, join(path, key))
    except SourceFormatError:
        return None  # a bad envelope time only loses a fallback, never the items


def _read_items(
    items: list[Any], path: str, doc: _Doc, ctx: ReadContext, result: ReadResult
) -> list[Message]:
    parsed: list[_Item] = []
    for i, item in enumerate(items):
        got = ctx.guarded(_read_item, item, i, idx(path, i), doc, ctx)
        if isinstance(got, _Item):
            parsed.append(got)
            if result.user_id is None and got.message.role == "user" and got.message.speaker_id:
                result.user_id = got.message.speaker_id
    # Items without a time of their own follow their predecessor (array order is the only order).
    known = [p.raw_ts for p in parsed if p.raw_ts is not None]
    candidates = (doc.start_ms, known[0] if known else None, doc.request_ms, ctx.base_timestamp_ms, 0)
    fallback = next(c for c in candidates if c is not None)
    current = fallback
    for p in parsed:
        if p.raw_ts is None:
            p.message.timestamp_ms = current
        else:
            current = p.raw_ts
    parsed.sort(key=lambda p: (p.message.timestamp_ms, p.index))
    if doc.agent_id:
        _identify_by_agent(parsed, doc.agent_id)
    return [p.message for p in parsed]


def _identify_by_agent(parsed: list[_Item], agent_id: str) -> None:
    """Give each item of one agent's transcript the id every copy of that utterance shares.

    ``GET history`` and the 103 webhook are two transcripts of one agent session that differ in
    everything but the words: the history has ``turn_id`` and ends of speech, the 103 neither
    and starts of speech. An utterance is therefore the agent, the role, the normalized text and
    which occurrence of that text it is in the transcript (in time order): copies merge by id
    whatever their order or run, and a real repeat ("好的" twice) stays two messages.
    """
    seen: Counter[tuple[str, str]] = Counter()
    for p in parsed:
        m = p.message
        key = (m.role, normalize_text(m.content) or m.content)
        seen[key] += 1
        m.id = stable_id("ag", agent_id, m.role, content_hash(key[1]), "occurrence", seen[key])


def _text(item: Mapping[str, Any], path: str) -> str | None:
    content = item.get("content")
    if content is None or isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for j, part in enumerate(content):
            if isinstance(part, Mapping) and part.get("type") == "text":
                text = part.get("text")
                if not isinstance(text, str):
                    fail(SOURCE, join(idx(join(path, "content"), j), "text"), "expected a string")
                parts.append(text)
        return "".join(parts)
    fail(SOURCE, join(path, "content"), "expected a string")


def _read_item(item: Any, index: int, path: str, doc: _Doc, ctx: ReadContext) -> _Item | None:
    if not isinstance(item, Mapping):
        fail(SOURCE, path, "expected a message object")
    role = item.get("role")
    if not isinstance(role, str):
        fail(SOURCE, join(path, "role"), "missing or not a string")
    raw_text = _text(item, path)
    text = clean_text(raw_text or "").strip()
    if role in ("system", "developer"):
        if MEMORY_BLOCK_TAG in text:
            ctx.skip("memory_block", path, "our injected memory block")
        else:
            ctx.skip("system", path)
        return None
    if role in ("tool", "function"):
        ctx.skip("tool", path, role)
        return None
    if role not in ("user", "assistant"):
        fail(SOURCE, join(path, "role"), f"unknown role {role[:40]!r}")
    if not text:
        if item.get("tool_calls") or item.get("function_call"):
            ctx.skip("tool_call", path)
        else:
            ctx.skip("empty", path, "empty content")
        return None
    if text.startswith(THINK_PREFIX):
        ctx.skip("think_injected", path, "text injected by the think API")
        return None
    if len(text) > MAX_TEXT_CHARS:
        fail(SOURCE, join(path, "content"), f"longer than {MAX_TEXT_CHARS} characters")
    meta_raw = item.get("metadata")
    if meta_raw is not None and not isinstance(meta_raw, Mapping):
        fail(SOURCE, join(path, "metadata"), "expected an object")
    meta: Mapping[str, Any] = meta_raw or {}
    meta_path = join(path, "metadata")
    source = opt_str(SOURCE, meta, "source", meta_path)
    source = _normalize_source(source or "") or ("asr" if role == "user" else "llm")
    turn_id = opt_int(SOURCE, item, "turn_id", path)
    raw_ts: int | None = None
    for key in ("timestamp", "speech_start_ms", "speech_end_ms"):
        if item.get(key) not in (None, ""):
            raw_ts = timestamp_ms(SOURCE, item[key], join(path, key))
            break
    interrupted = _truthy(meta.get("interrupted"))
    original = opt_str(SOURCE, meta, "original", meta_path) if interrupted else None
    speaker = opt_str(SOURCE, meta, "user", meta_path, allow_int=True) if role == "user" else None
    extra: dict[str, Any] = {"path": path}
    if doc.agent_id:
        extra["agent_id"] = doc.agent_id
    if doc.channel:
        extra["rtc_channel"] = doc.channel
    for key in ("speech_start_ms", "speech_end_ms"):
        value = item.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 10**15:
            extra[key] = value
    if interrupted and meta.get("interrupt_timestamp") not in (None, ""):
        extra["interrupt_timestamp_ms"] = timestamp_ms(
            SOURCE, meta["interrupt_timestamp"], join(meta_path, "interrupt_timestamp")
        )
    parts: list[object] = [doc.agent_id or "", role, "" if turn_id is None else turn_id]
    if raw_ts is None:
        parts += ["#", index, content_hash(text)]
    else:
        parts.append(raw_ts)
        if not doc.agent_id:
            parts.append(content_hash(text))
    message = Message(
        id=stable_id("ag", *parts),
        role=role,
        content=text,
        channel="im" if source == "message" else "voice",
        source=source,
        timestamp_ms=raw_ts if raw_ts is not None else 0,
        turn_id=turn_id,
        speaker_id=speaker or None,
        interrupted=interrupted,
        original=original.strip() if original else None,
        metadata=extra,
    )
    return _Item(message=message, raw_ts=raw_ts, index=index)


def _normalize_source(value: str) -> str:
    return "_".join(value.strip().lower().replace("-", " ").split())[:40]


def _truthy(value: Any) -> bool:
    if isinstance(value, str):
        return value.strip().lower() in ("true", "1", "yes")
    return value is True or (isinstance(value, int) and value == 1)
