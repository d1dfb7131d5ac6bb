"""OpenAI-style message lists and LangChain message lists.

OpenAI: a list of ``{role, content}`` dicts or a chat-completions request ``{"messages": [...]}``
(its ``user`` field is the human's id). LangChain: a list of ``BaseMessage`` objects or the dicts
of ``messages_to_dict``.

Rules decided here:

- System/developer messages are not memory (``system``, or ``memory_block`` when they hold our
  ``<user_memory>`` block); tool/function results are skipped as ``tool``; an assistant message
  with tool calls and no text is skipped as ``tool_call`` (with text, the text is kept).
- ``content`` may be a list of parts: the text parts are joined; a message without text is
  skipped as ``non_text`` (only non-text parts) or ``empty``.
- Time: a message's own ``timestamp`` (OpenAI dict) or ``additional_kwargs["timestamp"]``
  (LangChain), seconds or ms by magnitude; else the previous message's time; else the request's
  ``timestamp``/``created``; else the caller's base time; else 0. Ids never depend on it.
- Id: the LangChain message ``id`` when set; otherwise position + role + content hash, identical
  for the same conversation given as OpenAI dicts or LangChain messages (prefix ``api``).
- Channel ``api``; source ``message`` for the user, ``llm`` for the assistant; ``name`` is the
  speaker id.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
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
    get_list,
    idx,
    join,
    timestamp_ms,
)

__all__ = ["looks_like_langchain", "looks_like_openai", "read_langchain", "read_openai"]

_MEMORY_BLOCK_TAG = "<user_memory>"
_ROLES = {"user": "user", "human": "user", "assistant": "assistant", "ai": "assistant"}
_SYSTEM = {"system", "developer"}
_TOOL = {"tool", "function"}
_TEXT_PART_TYPES = {"text", "input_text", "output_text"}


def looks_like_openai(data: Any) -> bool:
    """Return whether ``data`` is a list of ``{role, content}`` dicts or a ``{"messages"}`` request."""
    if isinstance(data, Mapping):
        data = data.get("messages")
    return isinstance(data, list) and all(isinstance(m, Mapping) and "role" in m for m in data[:50])


def looks_like_langchain(data: Any) -> bool:
    """Return whether ``data`` is a list of LangChain messages or ``messages_to_dict`` dicts."""
    from langchain_core.messages import BaseMessage

    if isinstance(data, Mapping):
        data = data.get("messages")
    if not isinstance(data, list) or not data:
        return False
    return all(
        isinstance(m, BaseMessage)
        or (isinstance(m, Mapping) and isinstance(m.get("type"), str) and isinstance(m.get("data"), Mapping))
        for m in data[:50]
    )


def _items(data: Any, source: str) -> tuple[list[Any], str, Mapping[str, Any]]:
    if isinstance(data, Mapping):
        return get_list(source, data, "messages", "$"), "messages", data
    if isinstance(data, list):
        return data, "$", {}
    fail(source, "$", "expected a list of messages or an object with 'messages'")


def _doc_time(source: str, doc: Mapping[str, Any], ctx: ReadContext) -> int:
    for key in ("timestamp", "created"):
        if doc.get(key) not in (None, ""):
            try:
                return timestamp_ms(source, doc[key], key)
            except SourceFormatError:
                break  # a bad request time only loses the fallback
    return ctx.base_timestamp_ms or 0


def _parts_text(source: str, content: Any, path: str) -> tuple[str, bool]:
    """Return (text, had_non_text_parts) of a string or a list of content parts."""
    if content is None:
        return "", False
    if isinstance(content, str):
        return content, False
    if not isinstance(content, list):
        fail(source, path, "expected a string or a list of content parts")
    texts: list[str] = []
    other = False
    for j, part in enumerate(content):
        if isinstance(part, str):
            texts.append(part)
        elif (
            isinstance(part, Mapping)
            and isinstance(part.get("type"), str)
            and part["type"] in _TEXT_PART_TYPES
        ):
            text = part.get("text")
            if not isinstance(text, str):
                fail(source, join(idx(path, j), "text"), "expected a string")
            texts.append(text)
        elif isinstance(part, Mapping):
            other = True
        else:
            fail(source, idx(path, j), "expected a content part object")
    return "".join(texts), other


def _message(
    source: str,
    ctx: ReadContext,
    *,
    role_name: str,
    raw_text: str,
    non_text: bool,
    tool_calls: bool,
    path: str,
    index: int,
    own_id: str | None,
    name: str | None,
    ts: int | None,
) -> Message | None:
    text = clean_text(raw_text).strip()
    if role_name in _SYSTEM:
        ctx.skip("memory_block" if _MEMORY_BLOCK_TAG in text else "system", path)
        return None
    if role_name in _TOOL:
        ctx.skip("tool", path, role_name)
        return None
    role = _ROLES.get(role_name)
    if role is None:
        fail(source, join(path, "role"), f"unknown role {role_name[:40]!r}")
    if not text:
        if tool_calls:
            ctx.skip("tool_call", path, "assistant tool call without text")
        elif non_text:
            ctx.skip("non_text", path, "only non-text content parts")
        else:
            ctx.skip("empty", path, "empty content")
        return None
    if len(text) > MAX_TEXT_CHARS:
        fail(source, join(path, "content"), f"longer than {MAX_TEXT_CHARS} characters")
    if own_id:
        msg_id = stable_id("lc", own_id)
    elif ts is not None:
        # The message's own time is part of its identity: "ok" said on two days is two messages.
        msg_id = stable_id("api", index, role, content_hash(text), ts)
    else:
        msg_id = stable_id("api", index, role, content_hash(text))
    return Message(
        id=msg_id,
        role=role,
        content=text,
        channel="api",
        source="message" if role == "user" else "llm",
        timestamp_ms=ts if ts is not None else 0,
        speaker_id=name or None,
        metadata={"path": path},
    )


def _fill_times(messages: list[tuple[Message, int | None]], fallback: int) -> list[Message]:
    current = fallback
    out = []
    for message, ts in messages:
        if ts is None:
            message.timestamp_ms = current
        else:
            current = ts
        out.append(message)
    return out


def read_openai(data: Any, ctx: ReadContext) -> ReadResult:
    """Read an OpenAI-style message list or chat-completions request.

    Args:
        data: A list of ``{role, content}`` dicts or ``{"messages": [...], "user": ...}``.
        ctx: Reader settings and skipped-items sink.

    Returns:
        The conversation messages in list order and the skipped items.

    Raises:
        SourceFormatError: Not a message list, or (strict) a bad message.
    """
    return _read_list(data, ctx, "openai", _read_openai_item)


def _read_openai_item(
    item: Any, index: int, path: str, ctx: ReadContext
) -> tuple[Message, int | None] | None:
    source = "openai"
    if not isinstance(item, Mapping):
        fail(source, path, "expected a message object")
    role = item.get("role")
    if not isinstance(role, str):
        fail(source, join(path, "role"), "missing or not a string")
    text, non_text = _parts_text(source, item.get("content"), join(path, "content"))
    ts = None
    if item.get("timestamp") not in (None, ""):
        ts = timestamp_ms(source, item["timestamp"], join(path, "timestamp"))
    name = item.get("name")
    message = _message(
        source,
        ctx,
        role_name=role.strip().lower(),
        raw_text=text,
        non_text=non_text,
        tool_calls=bool(item.get("tool_calls") or item.get("function_call")),
        path=path,
        index=index,
        own_id=None,
        name=clean_text(name) if isinstance(name, str) else None,
        ts=ts,
    )
    return None if message is None else (message, ts)


def read_langchain(data: Any, ctx: ReadContext) -> ReadResult:
    """Read a list of LangChain messages (objects or ``messages_to_dict`` dicts).

    Args:
        data: A list of ``BaseMessage`` or their dicts, or ``{"messages": [...]}``.
        ctx: Reader settings and skipped-items sink.

    Returns:
        The conversation messages in list order and the skipped items.

    Raises:
        SourceFormatError: Not a message list, or (strict) a bad message.
    """
    return _read_list(data, ctx, "langchain", _read_langchain_item)


def _read_list(
    data: Any,
    ctx: ReadContext,
    source: str,
    read_item: Callable[[Any, int, str, ReadContext], tuple[Message, int | None] | None],
) -> ReadResult:
    """Read every item of a message list with ``read_item``; times filled, ids de-duplicated."""
    items, path, doc = _items(data, source)
    fallback = _doc_time(source, doc, ctx)
    parsed: list[tuple[Message, int | None]] = []
    for i, item in enumerate(items):
        got = ctx.guarded(read_item, item, i, idx(path, i), ctx)
        if got is not None:
            parsed.append(got)
    result = ReadResult(source=source, skipped=ctx.skipped)
    result.messages = dedupe_by_id(ctx, _fill_times(parsed, fallback), lambda m: 0)
    user = doc.get("user")
    if isinstance(user, str) and user:
        # Kept as given: an invalid id is rejected where it is used, never silently transformed.
        result.user_id = user
    return result


def _to_message(item: Any, path: str) -> Any:
    from langchain_core.messages import BaseMessage, messages_from_dict

    if isinstance(item, BaseMessage):
        return item
    if not isinstance(item, Mapping):
        fail("langchain", path, "expected a LangChain message or a messages_to_dict dict")
    try:
        return messages_from_dict([dict(item)])[0]
    # langchain-core raises ValueError, KeyError, TypeError or pydantic errors on bad dicts;
    # all of them mean "not a message".
    except Exception as exc:  # noqa: BLE001
        fail("langchain", path, f"not a LangChain message dict: {type(exc).__name__}")


def _read_langchain_item(
    item: Any, index: int, path: str, ctx: ReadContext
) -> tuple[Message, int | None] | None:
    source = "langchain"
    msg = _to_message(item, path)
    role = msg.type
    if role == "chat":
        role = getattr(msg, "role", "")
    if role == "remove":
        ctx.skip("control", path, "RemoveMessage")
        return None
    role = role.strip().lower() if isinstance(role, str) else ""
    text, non_text = _parts_text(source, msg.content, join(path, "content"))
    kwargs = msg.additional_kwargs if isinstance(msg.additional_kwargs, Mapping) else {}
    ts = None
    if kwargs.get("timestamp") not in (None, ""):
        ts = timestamp_ms(source, kwargs["timestamp"], join(path, "additional_kwargs.timestamp"))
    tool_calls = bool(
        getattr(msg, "tool_calls", None) or kwargs.get("tool_calls") or kwargs.get("function_call")
    )
    own_id = msg.id if isinstance(msg.id, str) and msg.id else None
    message = _message(
        source,
        ctx,
        role_name=role or "?",
        raw_text=text,
        non_text=non_text,
        tool_calls=tool_calls,
        path=path,
        index=index,
        own_id=clean_text(own_id) if own_id else None,
        name=clean_text(msg.name) if isinstance(msg.name, str) else None,
        ts=ts,
    )
    return None if message is None else (message, ts)
