"""``POST /v1/chat/completions``: an OpenAI-compatible memory proxy for TRTC and Agora agents.

Put this URL in TRTC ``LLMConfig.APIUrl`` or an Agora ``llm.url`` (``vendor: custom``). Per request:

1. The memory id is the one of the call registered for the ``X-Task-Id`` header TRTC sends
   (``convmem call start``, ``POST /tasks/trtc``), else the first of ``proxy_memory_keys`` found:
   ``body:memory_id`` (TRTC copies
   ``LLMConfig.MetaInfo`` into the body, Agora merges ``llm.params``), ``body:MetaInfo.memory_id``,
   ``body:context.memory_id``,
   the OpenAI ``user`` field, then the ``X-User-Id`` header TRTC sends.
   No memory id found: the request is forwarded without memory (``X-Convmem-Memory: none`` on the
   answer, a WARNING once per caller) or, with ``proxy_require_memory``, refused with a 400.
2. The current memory block is added once, as a system message after the caller's own system
   messages. A ``<user_memory>...</user_memory>`` region the caller already sends (TRTC's call-start
   ``SystemPrompt``, Agora ``system_messages``) is cut out of its message, the text around it kept
   word for word, so the model sees one block. When the request carries no earlier turns (TRTC
   ``History`` 0), the block also holds the last stored turns (what TRTC ``UserMessages`` would
   carry; a stale ``<recent_turns>`` region is then replaced too), minus the turns the request
   itself already holds.
3. The request goes to ``CONVMEM_UPSTREAM_URL`` with ``Authorization: Bearer
   <CONVMEM_UPSTREAM_API_KEY>`` (never logged). The proxy waits for the upstream status line: an
   upstream error comes back with its status and an OpenAI-shaped body, also for ``stream: true``,
   with secrets masked (the configured key, ``sk-...`` and ``Bearer ...``); otherwise the upstream
   bytes are passed through unchanged. A non-stream answer is read up to
   ``proxy_max_upstream_bytes`` (past it: a 502 naming the limit, nothing stored); a stream is
   relayed line by line as its lines complete, in linear time, and one line longer than
   ``proxy_max_sse_line_bytes`` ends it with an SSE error event rather than being buffered.
4. The finished turn (the user's text verbatim and what was streamed, ``interrupted`` when the
   client went away first, with the call it belongs to: TRTC ``X-Task-Id``, or the Agora channel
   a tagged join puts in ``llm.params`` as ``convmem_call``, taken out before forwarding, and for
   the answer when its request was sent and its stream closed) is stored in the inbox and
   reaches the lifecycle in the worker. When
   the inbox cannot take it (a database outage, a lock past the bounded wait) it is appended to
   the turn spool (:mod:`convmem_graph.server.spool`, ``CONVMEM_PROXY_SPOOL_DIR``) and moved into
   the inbox, with the same key, once the database answers: an answered turn is delayed, never
   dropped.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import logging
import re
import secrets
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Generic, TypeVar

import httpx
from fastapi import APIRouter, FastAPI, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse, Response, StreamingResponse
from sqlalchemy import select
from starlette.background import BackgroundTask

from convmem_graph._time import now_ms
from convmem_graph.errors import MemoryNotFoundError
from convmem_graph.memory import ConvMemory
from convmem_graph.models import Message
from convmem_graph.payloads.memory_block import (
    MemoryBlockOptions,
    build_memory_block,
    render_recent_turns,
    select_recent_turns,
)
from convmem_graph.server._boundary import (
    BoundaryError,
    BoundaryRoute,
    check_id,
    openai_boundary_error,
    parse_json,
)
from convmem_graph.server._http import openai_error, read_capped_body
from convmem_graph.server.calls import CALL_PARAM
from convmem_graph.server.inbox import Inbox
from convmem_graph.server.settings import ServeSettings
from convmem_graph.server.spool import SpooledTurn, SpoolFlusher, TurnSpool, default_spool_dir
from convmem_graph.server.worker import WorkerHandle
from convmem_graph.store.schema import memories as memories_table
from convmem_graph.text.sentences import normalize_text

__all__ = [
    "MEMORY_HEADER",
    "BlockCache",
    "build_proxy_router",
    "find_memory_id",
    "inject_memory",
    "last_user_text",
    "strip_tagged",
]

logger = logging.getLogger(__name__)

#: Response header telling the caller whether the request was served with a memory: ``used`` (a
#: memory id was found: its block injected, the turn stored) or ``none``.
MEMORY_HEADER = "X-Convmem-Memory"
_MEMORY_TAGS = ("<user_memory>", "</user_memory>")
_TURNS_TAGS = ("<recent_turns>", "</recent_turns>")
#: Callers already warned about a request without memory id (oldest forgotten first).
_MAX_WARNED_CALLERS = 1024
_SYSTEM_ROLES = ("system", "developer")
#: Top-level keys only the proxy reads; OpenAI itself rejects unknown request fields.
_PROXY_ONLY_KEYS = ("memory_id", CALL_PARAM)
_MAX_ERROR_BYTES = 64 * 1024
#: Shown instead of a secret in an upstream error body.
_REDACTED = "[redacted]"
#: Secrets an upstream may echo in an error body besides the configured key: OpenAI-style keys
#: (also the half-starred form "sk-abc1****wxyz" OpenAI prints) and bearer credentials. ``\b`` keeps
#: words that merely contain "sk-" ("task-queue", "disk-full") intact.
_SECRET_PATTERN = re.compile(r"\bsk-[A-Za-z0-9_*\-]{3,}|\b(bearer\s+)[^\s\"'`,;()<>\[\]{}\\]+", re.IGNORECASE)


_RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {"description": "The upstream's answer (JSON, or an SSE stream with stream: true)"},
    400: {"description": "Not a chat request, a bad value (param names it), or no memory id"},
    401: {"description": "Missing or wrong bearer token"},
    413: {"description": "Body over the size limit"},
    502: {"description": "Upstream unreachable or its answer too large"},
    503: {"description": "Memory backlog full (Retry-After) or no upstream configured"},
    504: {"description": "Upstream timed out"},
}


class _ProxyRoute(BoundaryRoute):
    """The proxy reads its body under its own cap and checks it in the handler; errors OpenAI-shaped."""

    check_body = False
    default_responses: ClassVar[Mapping[int | str, dict[str, Any]]] = {}

    def boundary_response(self, request: Request, exc: BoundaryError) -> Response:
        """An OpenAI-shaped 400 whose ``param`` names the field."""
        return openai_boundary_error(exc)


def find_memory_id(body: Mapping[str, Any], headers: Mapping[str, str], keys: list[str]) -> str | None:
    """Return the memory id named by the first of ``keys`` present (``body:a.b`` or ``header:name``).

    Example:
        >>> find_memory_id({"user": "u_1"}, {}, ["body:memory_id", "body:user"])
        'u_1'
        >>> find_memory_id({}, {"x-user-id": "u_2"}, ["body:user", "header:x-user-id"])
        'u_2'
    """
    lowered = {k.lower(): v for k, v in headers.items()}
    for key in keys:
        kind, _, name = key.partition(":")
        value: Any
        if kind == "header":
            value = lowered.get(name.lower())
        else:
            value = body
            for part in name.split("."):
                value = value.get(part) if isinstance(value, Mapping) else None
        if isinstance(value, int) and not isinstance(value, bool):
            value = str(value)
        if isinstance(value, str) and value.strip():
            return value.strip()
    return None


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [p.get("text") for p in content if isinstance(p, Mapping) and p.get("type") in ("text", None)]
        return "".join(p for p in parts if isinstance(p, str))
    return ""


def last_user_text(messages: list[Any]) -> str:
    """Return the text of the last user message (the current turn), or ``""``.

    Example:
        >>> last_user_text([{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"},
        ...                 {"role": "user", "content": [{"type": "text", "text": "bye"}]}])
        'bye'
    """
    for message in reversed(messages):
        if isinstance(message, Mapping) and message.get("role") == "user":
            return _text_of(message.get("content"))
    return ""


def strip_tagged(text: str, tags: tuple[str, str]) -> str:
    r"""Return ``text`` without its ``open...close`` regions; the text around them is kept as it is.

    A region takes one newline next to it along (the one that joined it to its neighbours, as the
    call-start payloads join persona, block and turns with ``"\n"``). An opening tag without a
    closing one is left alone: it is not a block this library wrote.

    Example:
        >>> strip_tagged("You are Rain.\n<m>old</m>\nBe brief.", ("<m>", "</m>"))
        'You are Rain.\nBe brief.'
        >>> strip_tagged("<m>old</m>", ("<m>", "</m>"))
        ''
    """
    open_tag, close_tag = tags
    out: list[str] = []
    rest = text
    while True:
        start = rest.find(open_tag)
        end = rest.find(close_tag, start + len(open_tag)) if start >= 0 else -1
        if end < 0:
            out.append(rest)
            break
        before, after = rest[:start], rest[end + len(close_tag) :]
        if before.endswith("\n"):
            before = before[:-1]
        elif after.startswith("\n"):
            after = after[1:]
        out.append(before)
        rest = after
    return "".join(out)


def _strip_content(content: Any, tags: Sequence[tuple[str, str]]) -> tuple[Any, bool]:
    """Return ``(content without the tagged regions, whether anything was cut)``.

    ``content`` is a string or a list of parts; only text parts are touched, and a part left with
    whitespace only is dropped.
    """

    def cut(text: str) -> str:
        for pair in tags:
            text = strip_tagged(text, pair)
        return text

    if isinstance(content, str):
        cleaned = cut(content)
        return cleaned, cleaned != content
    if not isinstance(content, list):
        return content, False
    parts: list[Any] = []
    changed = False
    for part in content:
        text = part.get("text") if isinstance(part, Mapping) and part.get("type") in ("text", None) else None
        if not isinstance(text, str):
            parts.append(part)
            continue
        cleaned = cut(text)
        if cleaned == text:
            parts.append(part)
            continue
        changed = True
        if cleaned.strip():
            parts.append({**part, "text": cleaned})
    return parts, changed


def inject_memory(messages: list[Any], block: str, *, replace_turns: bool = False) -> list[Any]:
    r"""Return ``messages`` with ``block`` as the one memory block, after the caller's system messages.

    Every ``<user_memory>...</user_memory>`` region in a system or developer message (a stale block
    from call start, alone or inside a persona, also in a list of content parts) is cut out; the
    text around it stays word for word and a message left without text is dropped. With
    ``replace_turns`` (the block carries the recent turns itself) stale ``<recent_turns>`` regions
    go the same way. Every other message is kept unchanged and in order. An empty ``block`` (a new
    or deleted memory) adds nothing, and the stale regions are still cut: the model never sees
    memory the store no longer holds.

    Example:
        >>> sent = [{"role": "system", "content": "You are Rain.\n<user_memory>old</user_memory>"},
        ...         {"role": "user", "content": "hi"}]
        >>> [m["content"] for m in inject_memory(sent, "<user_memory>x</user_memory>")]
        ['You are Rain.', '<user_memory>x</user_memory>', 'hi']
    """
    tags = [_MEMORY_TAGS, _TURNS_TAGS] if replace_turns else [_MEMORY_TAGS]
    kept: list[Any] = []
    for message in messages:
        if not (isinstance(message, Mapping) and message.get("role") in _SYSTEM_ROLES):
            kept.append(message)
            continue
        content, changed = _strip_content(message.get("content"), tags)
        if not changed:
            kept.append(message)
        elif _text_of(content).strip() or (isinstance(content, list) and content):
            kept.append({**message, "content": content})
    at = 0
    while at < len(kept) and isinstance(kept[at], Mapping) and kept[at].get("role") in _SYSTEM_ROLES:
        at += 1
    if not block.strip():
        return kept
    return [*kept[:at], {"role": "system", "content": block}, *kept[at:]]


def _turn_count(messages: list[Any]) -> int:
    return sum(1 for m in messages if isinstance(m, Mapping) and m.get("role") in ("user", "assistant"))


def _has_earlier_turns(messages: list[Any]) -> bool:
    return _turn_count(messages) > 1


def _mask_secrets(text: str, key: str | None) -> str:
    """Return ``text`` with the upstream ``key`` and ``sk-...`` / ``Bearer ...`` secrets replaced.

    Example:
        >>> _mask_secrets("bad key sk-abc123 (Bearer tok.en)", None)
        'bad key [redacted] (Bearer [redacted])'
    """
    if key:
        text = text.replace(key, _REDACTED)
    return _SECRET_PATTERN.sub(lambda found: (found.group(1) or "") + _REDACTED, text)


def _mask_doc(value: Any, key: str | None) -> Any:
    """Return a parsed JSON value with every string in it (object keys too) masked."""
    if isinstance(value, str):
        return _mask_secrets(value, key)
    if isinstance(value, list):
        return [_mask_doc(item, key) for item in value]
    if isinstance(value, dict):
        return {_mask_secrets(k, key): _mask_doc(v, key) for k, v in value.items()}
    return value


def _upstream_error(status: int, raw: bytes, key: str | None) -> JSONResponse:
    """The caller's answer to an upstream error: its status, OpenAI-shaped, secrets masked.

    An upstream may echo the key it was sent ("Incorrect API key provided: ..."): the body is
    masked after parsing, so a key the upstream escaped in its JSON is found too, and a text body
    before it is cut, so no half of a key survives the cut.
    """
    try:
        doc = json.loads(raw.decode("utf-8"))
        if isinstance(doc, dict) and isinstance(doc.get("error"), dict):
            return JSONResponse(_mask_doc(doc, key), status_code=status)
    except (UnicodeDecodeError, ValueError, RecursionError):
        doc = None  # not JSON (or nested too deep to walk): shown as masked text
    # Masked, then cut: a key across the cut is gone whole (the 64 KiB read cap lies past the cut).
    text = _mask_secrets(raw.decode("utf-8", "replace"), key)[:2000] or f"upstream answered HTTP {status}"
    message = text
    if isinstance(doc, dict) and isinstance(doc.get("message"), str):
        message = _mask_secrets(doc["message"], key)
    return openai_error(status, message, type_="upstream_error", code=status)


class _UpstreamTooLarge(ValueError):
    """An upstream answer (or one SSE line of it) is larger than a configured cap."""

    def __init__(self, what: str, limit: int, setting: str) -> None:
        super().__init__(f"upstream {what} exceeds the {limit}-byte limit ({setting})")


def _too_large_event(exc: _UpstreamTooLarge) -> bytes:
    """The SSE event ending a stream that went past a cap (OpenAI SDKs raise on an ``error`` event)."""
    error = {"message": str(exc), "type": "upstream_error", "param": None, "code": "upstream_too_large"}
    return b"data: " + json.dumps({"error": error}).encode() + b"\n\n"


class _SSEText:
    r"""Reads an OpenAI SSE stream line by line: what to relay, and the assistant text in it.

    The unfinished last line is kept as a list of pieces and joined once, when its newline
    arrives, so every byte is copied and scanned a bounded number of times: linear in the stream.
    (``buffer += chunk`` then ``buffer.split`` re-copied and re-scanned the whole unfinished line
    per chunk: 8 MiB without a newline in 4 KiB chunks took 10 s of CPU in the event loop.)

    Args:
        max_line_bytes: Longest line held back; past it :class:`_UpstreamTooLarge` (a
            newline-less "stream" is not buffered without bound).
        max_text_chars: Most assistant text collected (what is stored as the turn).

    Example:
        >>> reader = _SSEText(max_line_bytes=1024, max_text_chars=1024)
        >>> reader.feed(b'data: {"choices": [{"delta": {"content": "hi"}}]}\n\nda')
        b'data: {"choices": [{"delta": {"content": "hi"}}]}\n\n'
        >>> reader.feed(b"ta: [DONE]\n\n"), reader.text, reader.done
        (b'data: [DONE]\n\n', 'hi', True)
    """

    def __init__(self, *, max_line_bytes: int, max_text_chars: int) -> None:
        self._max_line = max_line_bytes
        self._max_text = max_text_chars
        self._pending: list[bytes] = []
        self._pending_size = 0
        self._text_size = 0
        self.parts: list[str] = []
        self.done = False

    def feed(self, chunk: bytes) -> bytes:
        """Take the next chunk; return the bytes whose lines are complete (to relay unchanged).

        Raises:
            _UpstreamTooLarge: The unfinished line, or the collected text, is past its cap.
        """
        # CR, LF and CRLF all end an SSE line; a CRLF split between chunks only adds an empty line.
        cut = max(chunk.rfind(b"\n"), chunk.rfind(b"\r")) + 1
        if not cut:
            self._hold(chunk)
            return b""
        complete = b"".join([*self._pending, chunk[:cut]]) if self._pending else chunk[:cut]
        self._pending, self._pending_size = [], 0
        for line in complete.splitlines():  # bytes split on \r, \n and \r\n only
            self._check_line(len(line))
            self._read_line(line)
        self._hold(chunk[cut:])
        return complete

    def flush(self) -> bytes:
        """Return (and read) the unfinished last line at the end of the stream."""
        rest = b"".join(self._pending)
        self._pending, self._pending_size = [], 0
        if rest:
            self._read_line(rest)
        return rest

    def _hold(self, piece: bytes) -> None:
        if piece:
            self._pending.append(piece)
            self._pending_size += len(piece)
            self._check_line(self._pending_size)

    def _check_line(self, size: int) -> None:
        if size > self._max_line:
            raise _UpstreamTooLarge("SSE line", self._max_line, "CONVMEM_PROXY_MAX_SSE_LINE_BYTES")

    def _read_line(self, line: bytes) -> None:
        line = line.strip()
        if not line.startswith(b"data:"):
            return
        data = line[5:].strip()
        if data == b"[DONE]":
            self.done = True
            return
        try:
            doc = json.loads(data)
        except (ValueError, RecursionError):
            return
        for choice in doc.get("choices") or () if isinstance(doc, dict) else ():
            delta = choice.get("delta") if isinstance(choice, dict) else None
            if isinstance(delta, dict) and isinstance(delta.get("content"), str):
                self.parts.append(delta["content"])
                self._text_size += len(delta["content"])
                if self._text_size > self._max_text:
                    raise _UpstreamTooLarge(
                        "streamed text", self._max_text, "CONVMEM_PROXY_MAX_UPSTREAM_BYTES"
                    )

    @property
    def text(self) -> str:
        return "".join(self.parts)


def _completion_text(raw: bytes) -> str:
    try:
        doc = json.loads(raw)
        content = doc["choices"][0]["message"]["content"]
    except (ValueError, KeyError, IndexError, TypeError):
        return ""
    return content if isinstance(content, str) else ""


_T = TypeVar("_T")


#: Stands for a change stamp that could not be read: never equal to a stamp read later.
_UNKNOWN_STAMP = object()


class BlockCache(Generic[_T]):
    """Memory blocks of recently active memories, rebuilt by the worker after each change.

    The proxy's first byte must not wait for a database read and a render (several ms), so the
    block of a memory is built once, served from here, and rebuilt off the request path when the
    worker has processed new deliveries of that memory (``refresh``). Entries idle for ``ttl_s``
    are built again on their next use.

    With ``stamp`` (a cheap read of the memory's change stamp, ``None`` when the memory does not
    exist) :meth:`get` compares the stamp read when the block was built with the current one on
    every hit and rebuilds on a difference: a change made by another process (``convmem delete``
    from the CLI, the viewer of another server) shows on the next request, not after the TTL. A
    stamp that cannot be read (the database is down) serves the cached block.

    Example:
        >>> cache = BlockCache(lambda mid, recent: f"<{mid}:{recent}>", ttl_s=60)
        >>> cache.get("m", 10), cache.get("m", 10)
        ('<m:10>', '<m:10>')
        >>> stamps = {"m": 1}
        >>> cache = BlockCache(lambda mid, recent: f"<{mid}@{stamps.get(mid)}>", stamp=stamps.get)
        >>> cache.get("m", 0), stamps.pop("m"), cache.get("m", 0)
        ('<m@1>', 1, '<m@None>')
    """

    def __init__(
        self,
        build: Callable[[str, int], _T],
        *,
        max_entries: int = 10_000,
        ttl_s: float = 60.0,
        stamp: Callable[[str], object] | None = None,
    ):
        self._build = build
        self._max = max_entries
        self._ttl = ttl_s
        self._stamp = stamp
        self._entries: OrderedDict[tuple[str, int], tuple[_T, float, object]] = OrderedDict()
        self._lock = threading.Lock()

    def _fresh(self, key: tuple[str, int]) -> tuple[_T, float, object] | None:
        with self._lock:
            entry = self._entries.get(key)
            if entry is None or time.monotonic() - entry[1] > self._ttl:
                return None
            self._entries.move_to_end(key)
            return entry

    def _read_stamp(self, memory_id: str) -> object:
        if self._stamp is None:
            return None
        try:
            return self._stamp(memory_id)
        except Exception as exc:  # noqa: BLE001 - an unreadable stamp must not fail the request
            logger.debug("proxy: change stamp of %s unreadable (%s)", memory_id, type(exc).__name__)
            return _UNKNOWN_STAMP

    def peek(self, memory_id: str, recent: int) -> _T | None:
        """Return a fresh cached block without building one or reading the stamp (``None`` on a miss)."""
        entry = self._fresh((memory_id, recent))
        return None if entry is None else entry[0]

    def get(self, memory_id: str, recent: int) -> _T:
        """Return the block, building it on a miss or when the memory's change stamp moved."""
        key = (memory_id, recent)
        entry = self._fresh(key)
        if entry is not None:
            if self._stamp is None:
                return entry[0]
            current = self._read_stamp(memory_id)
            if current is _UNKNOWN_STAMP or current == entry[2]:
                return entry[0]
            logger.debug("proxy: memory %s changed in the store; its cached block is rebuilt", memory_id)
        return self._rebuild(key)

    def _rebuild(self, key: tuple[str, int]) -> _T:
        # The stamp is read before the build: a change landing during the build moves the stamp
        # past the one kept, so the next hit builds again rather than keeping a stale block.
        stamp = self._read_stamp(key[0])
        block = self._build(*key)
        with self._lock:
            self._entries[key] = (block, time.monotonic(), stamp)
            self._entries.move_to_end(key)
            while len(self._entries) > self._max:
                self._entries.popitem(last=False)
        return block

    def refresh(self, memory_ids: list[str]) -> None:
        """Rebuild the cached blocks of these memories (called by the worker after a batch)."""
        wanted = set(memory_ids)
        with self._lock:
            keys = [key for key in self._entries if key[0] in wanted]
        for key in keys:
            self._rebuild(key)


@dataclass(frozen=True)
class _MemoryParts:
    """What the proxy injects for one memory, kept apart so the turns can be matched per request.

    Attributes:
        block: The ``<user_memory>`` block (``""`` for an empty or unknown memory).
        language: The block's language, for the recent-turn labels.
        recent: The newest stored turns the block carries, oldest first.
        turns_text: ``recent`` rendered as a ``<recent_turns>`` block (``""`` without turns).
    """

    block: str = ""
    language: str = "auto"
    recent: tuple[Message, ...] = ()
    turns_text: str = ""

    def render(self, messages: list[Any], request_id: str | None) -> str:
        """The text injected into a request whose messages are ``messages``.

        Stored turns the request already carries are left out, so no turn reaches the model
        twice: turns this very request stored before (a retry with the same ``X-Request-Id``),
        and newest stored turns that are copies of the request's own turns (the current
        sentence stored from a TRTC 903 before the LLM call).
        """
        turns = [
            m for m in self.recent if not (request_id and m.metadata.get("proxy_request_id") == request_id)
        ]
        sent: dict[tuple[str, str], int] = {}
        for message in messages:
            if isinstance(message, Mapping) and message.get("role") in ("user", "assistant"):
                key = (str(message["role"]), normalize_text(_text_of(message.get("content"))))
                sent[key] = sent.get(key, 0) + 1
        cut = len(turns)
        while cut and sent.get(key := (turns[cut - 1].role, normalize_text(turns[cut - 1].content)), 0) > 0:
            sent[key] -= 1
            cut -= 1
        turns = turns[:cut]
        if len(turns) == len(self.recent):
            text = self.turns_text
        else:
            language = self.language if self.language in ("zh", "en") else "auto"
            text = render_recent_turns(turns, n=len(turns), language=language)  # type: ignore[arg-type]
        return "\n".join(p for p in (self.block, text) if p.strip())


class _WarnedCallers:
    """The callers already warned about a request without memory id, bounded (oldest forgotten).

    A caller is the salted hash of its ``Authorization`` header when it sends one (TRTC ``APIKey``,
    Agora ``api_key``: one configured agent, whatever egress address the vendor uses), else the
    client's address. The salt is random per process, so a logged hash never lets a reader test
    a guess of the key. A forgotten caller is warned again, which bounds the set, not the log.
    """

    def __init__(self, max_entries: int = _MAX_WARNED_CALLERS) -> None:
        self._max = max_entries
        self._seen: OrderedDict[str, None] = OrderedDict()
        self._salt = secrets.token_bytes(16)
        self._lock = threading.Lock()

    def caller(self, request: Request) -> str:
        """Return the caller of ``request`` as logged: ``key <hash>`` or ``host <address>``."""
        auth = request.headers.get("authorization")
        if auth:
            return (
                "key "
                + hmac.new(self._salt, auth.encode("utf-8", "replace"), hashlib.sha256).hexdigest()[:16]
            )
        return f"host {request.client.host if request.client else 'unknown'}"

    def first(self, caller: str) -> bool:
        """Record ``caller``; ``True`` the first time it is seen (while remembered)."""
        with self._lock:
            if caller in self._seen:
                self._seen.move_to_end(caller)
                return False
            self._seen[caller] = None
            while len(self._seen) > self._max:
                self._seen.popitem(last=False)
            return True


def _inbox_key(memory_id: str, request_id: str) -> str:
    """The inbox key of a proxied turn: scoped by memory and hashed, so never cut (70 characters)."""
    digest = hashlib.sha256(f"{memory_id}\x00{request_id}".encode("utf-8", "surrogatepass")).hexdigest()
    return f"proxy:{digest}"


def build_proxy_router(
    mem: ConvMemory,
    inbox: Inbox,
    worker: WorkerHandle,
    settings: ServeSettings,
    app: FastAPI,
    *,
    transport: httpx.AsyncBaseTransport | None = None,
) -> APIRouter:
    """Return the router of the memory proxy; its HTTP client closes with ``app``.

    Args:
        mem: The memory to inject from.
        inbox: Where finished turns are stored.
        worker: Woken when a turn was stored.
        settings: Upstream URL and key, memory-id keys, caps.
        app: The application (its shutdown closes the upstream client).
        transport: An httpx transport for the upstream (tests); ``None`` uses the network.
    """
    router = APIRouter(tags=["proxy"], route_class=_ProxyRoute, responses=_RESPONSES)
    client = httpx.AsyncClient(
        timeout=httpx.Timeout(settings.upstream_timeout_s, connect=10.0),
        limits=httpx.Limits(max_connections=200, max_keepalive_connections=50),
        transport=transport,
    )
    app.state.on_close.append(client.aclose)
    upstream_key = settings.secret("upstream_api_key")

    def memory_parts(memory_id: str, recent: int, query: str = "", skip: int | None = None) -> _MemoryParts:
        """Build what is injected for ``memory_id``: the block and the newest ``recent`` turns.

        ``skip``: the newest stored turns the request carries anyway, never quoted in the block
        (default ``recent``: the turns added below it).
        """
        try:
            snap = mem.query_snapshot(memory_id, query or None)
            options = MemoryBlockOptions(
                budget_tokens=mem.config.memory_block_budget_tokens,
                query=query or None,
                skip_recent_turns=recent if skip is None else skip,
                now_ms=mem.lifecycle.clock(),
            )
            block = build_memory_block(snap, options, list_all_dropped=False)
            turns = tuple(select_recent_turns(snap.recent, recent, memory_id=memory_id))
            language = block.language if block.text else "auto"
            turns_text = render_recent_turns(turns, n=len(turns), language=language) if turns else ""
        except MemoryNotFoundError:
            return _MemoryParts()
        except Exception:  # noqa: BLE001 - the call goes on without memory rather than failing
            logger.exception("proxy: no memory block for %s (forwarding without it)", memory_id)
            return _MemoryParts()
        return _MemoryParts(block=block.text, language=language, recent=turns, turns_text=turns_text)

    def memory_stamp(memory_id: str) -> tuple[int, int] | None:
        """The memory's change stamp: one primary-key read; ``None`` once it is deleted.

        ``updated_at`` moves with every change of what the block shows (the store stamps it when
        it drops the memory's snapshot), ``created_at`` tells a memory deleted and made again.
        """
        with mem.store.read() as conn:
            row = conn.execute(
                select(memories_table.c.created_at, memories_table.c.updated_at).where(
                    memories_table.c.memory_id == memory_id
                )
            ).first()
        return None if row is None else (int(row[0]), int(row[1]))

    cache: BlockCache[_MemoryParts] = BlockCache(
        memory_parts, ttl_s=settings.proxy_cache_ttl_s, stamp=memory_stamp
    )
    worker.listeners.append(cache.refresh)
    warned = _WarnedCallers()
    # Turns the inbox could not take; app.py starts the flusher (after a flush) with the lifespan.
    spool = TurnSpool(
        settings.proxy_spool_dir or default_spool_dir(mem.store.url), max_turns=settings.proxy_spool_max_turns
    )
    flusher = SpoolFlusher(
        spool,
        lambda turn: inbox.add(turn.vendor, turn.key, turn.body, memory_id=turn.memory_id),
        on_stored=worker.wake,
        retry_s=settings.proxy_spool_retry_s,
    )
    app.state.proxy_spool = flusher
    looked_at = ", ".join(["the call registered for header:x-task-id", *settings.proxy_memory_keys])

    def record_completion(
        memory_id: str,
        request_id: str,
        user_text: str,
        content: bytes,
        started: int,
        first: int,
        task_id: str = "",
        rtc_channel: str = "",
    ) -> None:
        # Parsed here, in the worker thread: a JSON answer of megabytes must not hold the event loop.
        answer = _completion_text(content)
        record(memory_id, request_id, user_text, answer, started, first, False, task_id, rtc_channel)

    def record(
        memory_id: str,
        request_id: str,
        user_text: str,
        answer: str,
        started: int,
        first: int,
        interrupted: bool,
        task_id: str = "",
        rtc_channel: str = "",
    ) -> None:
        # The call (TRTC task, Agora channel): the store lets the call's voice copy of these turns win.
        meta: dict[str, Any] = {"proxy_request_id": request_id}
        if task_id:
            meta["task_id"] = task_id
        elif rtc_channel:
            meta["rtc_channel"] = rtc_channel
        messages = []
        if user_text.strip():
            messages.append(
                Message(
                    id=_turn_id(request_id, "user"),
                    role="user",
                    content=user_text,
                    channel="api",
                    source="message",
                    timestamp_ms=started,
                    metadata=dict(meta),
                )
            )
        if answer.strip():
            # When the request was open (sent, stream closed: this runs as it closes): the bot
            # round of the call spoken in that span is the one it answered, even when the call
            # repeats its words (convmem_graph._copies.answers_round).
            span = {"request_ms": started, "answered_ms": max(now_ms(), first, started)}
            messages.append(
                Message(
                    id=_turn_id(request_id, "assistant"),
                    role="assistant",
                    content=answer,
                    channel="api",
                    source="llm",
                    timestamp_ms=max(first, started + 1),
                    interrupted=interrupted,
                    metadata={**meta, **span},
                )
            )
        if not messages:
            return
        body = json.dumps({"messages": [m.model_dump(mode="json") for m in messages]}, ensure_ascii=False)
        key = _inbox_key(memory_id, request_id)
        # While turns wait in the spool, new ones queue behind them: a memory's turns reach the
        # inbox in the order they were answered, and an outage is not hit once per turn.
        if not spool.pending:
            try:
                if inbox.add("proxy", key, body, memory_id=memory_id):
                    worker.wake()
                return
            except Exception as exc:  # noqa: BLE001 - the caller was answered: keep the turn on disk
                logger.warning(
                    "proxy: inbox unavailable for the turn of request %s (%s); spooling it",
                    request_id,
                    type(exc).__name__,
                )
        try:
            spool.append(SpooledTurn(vendor="proxy", key=key, body=body, memory_id=memory_id))
        except OSError:
            # Both the database and the spool directory failed: the one case a turn is lost.
            logger.exception("proxy: the turn of request %s is lost (inbox and spool failed)", request_id)
            return
        flusher.wake()

    @router.post("/v1/chat/completions", summary="OpenAI-compatible chat completions with memory")
    async def chat_completions(request: Request) -> Response:
        started = now_ms()
        if inbox.pending_count >= settings.queue_max:
            return openai_error(
                503,
                "memory backlog is full; retry shortly",
                type_="server_busy",
                headers={"Retry-After": "5"},
            )
        if spool.full:
            # The store has been unreachable for a while: a turn answered now could not be kept, so
            # the caller is told to retry before anything is asked of the upstream.
            return openai_error(
                503,
                f"the memory store is unavailable and {spool.pending} answered turns wait in the "
                "spool (CONVMEM_PROXY_SPOOL_MAX_TURNS); retry shortly",
                type_="server_busy",
                code="store_busy",
                headers={"Retry-After": "5"},
            )
        if not settings.upstream_url:
            return openai_error(
                503, "no upstream model configured (CONVMEM_UPSTREAM_URL)", type_="server_error"
            )
        raw = await read_capped_body(request, settings.max_proxy_body_bytes)
        # The boundary: depth and number limits, no NUL or lone surrogate in any string (a lone
        # surrogate cannot be sent upstream or stored; NUL stopped the PostgreSQL queue).
        body = parse_json(raw)
        if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
            return openai_error(400, "'messages' must be a list", code="invalid_messages")
        messages: list[Any] = body["messages"]
        memory_id: str | None = None
        task_id = (request.headers.get("x-task-id") or "").strip()
        if task_id:
            check_id(task_id, "X-Task-Id")
            # TRTC sends X-Task-Id with every LLM request: a call registered at start names the
            # memory more surely than X-User-Id (an RTC id) or ``user``.
            registered = await run_in_threadpool(inbox.task, task_id)
            memory_id = registered.memory_id if registered is not None else None
        if memory_id is None:
            memory_id = find_memory_id(body, request.headers, settings.proxy_memory_keys)
            if memory_id is not None:
                # Found under one of proxy_memory_keys: the same identifier rule as everywhere.
                check_id(memory_id, "memory_id", "memory_id")
        # An Agora join tagged at call start names its channel in every request (server/calls.py).
        rtc_channel = body.get(CALL_PARAM)
        rtc_channel = check_id(rtc_channel, CALL_PARAM) if rtc_channel is not None else ""
        user_text = last_user_text(messages)
        given_request_id = request.headers.get("x-request-id") or request.headers.get("x-rquest-id")
        request_id = given_request_id or uuid.uuid4().hex
        # Every answer from here on says whether a memory served it (clients cannot tell otherwise).
        tag = {MEMORY_HEADER: "used" if memory_id is not None else "none"}
        if memory_id is None:
            caller = warned.caller(request)
            if warned.first(caller):
                logger.warning(
                    "proxy: a request from %s names no memory id (looked at %s); %s",
                    caller,
                    looked_at,
                    "refused (proxy_require_memory)"
                    if settings.proxy_require_memory
                    else "forwarded without memory, turn not stored",
                )
            if settings.proxy_require_memory:
                return openai_error(
                    400,
                    f"no memory id in the request; looked at {looked_at} (first match wins)",
                    code="memory_id_required",
                    headers=tag,
                )
        else:
            recent = 0 if _has_earlier_turns(messages) else settings.proxy_recent_turns
            if settings.proxy_rank_by_query:
                # The request's own turns are the newest stored ones: do not quote them back.
                skip = recent or _turn_count(messages)
                parts = await run_in_threadpool(memory_parts, memory_id, recent, user_text, skip)
            else:
                # In the threadpool even on a hit: the hit reads the memory's change stamp, so a
                # delete by another process (the CLI) is seen by the very next request.
                parts = await run_in_threadpool(cache.get, memory_id, recent)
            block = parts.render(messages, given_request_id)
            body["messages"] = inject_memory(messages, block, replace_turns=recent > 0)
        for key in _PROXY_ONLY_KEYS:
            body.pop(key, None)
        headers = {"Content-Type": "application/json"}
        if upstream_key:
            headers["Authorization"] = f"Bearer {upstream_key}"
        stream = bool(body.get("stream"))
        upstream_request = client.build_request(
            "POST",
            settings.upstream_url,
            content=json.dumps(body, ensure_ascii=False).encode(),
            headers=headers,
        )
        try:
            upstream = await client.send(upstream_request, stream=True)
        except httpx.TimeoutException:
            return openai_error(504, "upstream model timed out", type_="upstream_error", headers=tag)
        except httpx.HTTPError as exc:
            logger.warning("proxy: upstream unreachable: %s", type(exc).__name__)
            return openai_error(
                502, f"upstream model unreachable ({type(exc).__name__})", type_="upstream_error", headers=tag
            )
        if upstream.status_code >= 400:
            try:
                error_body = await _read_error_body(upstream, _MAX_ERROR_BYTES)
            finally:
                await upstream.aclose()
            # The body is not logged: it may echo the key (the caller gets it masked).
            logger.info("proxy: upstream answered %d for memory %s", upstream.status_code, memory_id)
            answer = _upstream_error(upstream.status_code, error_body, upstream_key)
            answer.headers.update(tag)
            return answer
        passthrough = {
            k: v
            for k, v in upstream.headers.items()
            if k.lower() in ("content-type", "cache-control", "x-request-id")
        }
        passthrough.update(tag)
        if not stream:
            try:
                content = await _read_capped(upstream, settings.proxy_max_upstream_bytes)
            except _UpstreamTooLarge as exc:
                # A 64 MiB answer read whole took the server to 760 MB RSS: refuse it, store nothing.
                logger.warning("proxy: %s (memory %s); answered 502", exc, memory_id)
                return openai_error(
                    502, str(exc), type_="upstream_error", code="upstream_too_large", headers=tag
                )
            finally:
                await upstream.aclose()
            task = None
            if memory_id is not None:
                task = BackgroundTask(
                    run_in_threadpool,
                    record_completion,
                    memory_id,
                    request_id,
                    user_text,
                    content,
                    started,
                    now_ms(),
                    task_id,
                    rtc_channel,
                )
            return Response(content, status_code=upstream.status_code, headers=passthrough, background=task)

        async def relay() -> AsyncIterator[bytes]:
            collected = _SSEText(
                max_line_bytes=settings.proxy_max_sse_line_bytes,
                max_text_chars=settings.proxy_max_upstream_bytes,
            )
            first = 0
            finished = False
            try:
                try:
                    # Decoded bytes: the relayed answer carries no Content-Encoding, and the reader
                    # must see the text, not gzip.
                    async for chunk in upstream.aiter_bytes():
                        if not first:
                            first = now_ms()
                        complete = collected.feed(chunk)
                        if complete:
                            yield complete
                    rest = collected.flush()
                    if rest:
                        yield rest
                    finished = True
                except _UpstreamTooLarge as exc:
                    # The status line is sent: end the stream with an error event the caller's SDK
                    # raises on; the overlong line itself never reaches the caller.
                    logger.warning("proxy: %s (memory %s); stream ended", exc, memory_id)
                    yield _too_large_event(exc)
            finally:
                await upstream.aclose()
                if memory_id is not None:
                    interrupted = not finished and not collected.done
                    # Fire and forget in a worker thread: after a disconnect nothing here may await.
                    asyncio.get_running_loop().run_in_executor(
                        None,
                        record,
                        memory_id,
                        request_id,
                        user_text,
                        collected.text,
                        started,
                        first or now_ms(),
                        interrupted,
                        task_id,
                        rtc_channel,
                    )

        passthrough.setdefault("content-type", "text/event-stream")
        passthrough["x-accel-buffering"] = "no"
        return StreamingResponse(relay(), status_code=upstream.status_code, headers=passthrough)

    return router


async def _read_capped(response: httpx.Response, limit: int) -> bytes:
    """Read a non-stream answer (decoded), at most ``limit`` bytes, in linear time.

    Raises:
        _UpstreamTooLarge: The answer is longer than ``limit``; reading stops there.
    """
    try:
        body = response.content  # already read (a transport that buffers)
    except httpx.ResponseNotRead:
        pieces: list[bytes] = []
        size = 0
        async for piece in response.aiter_bytes():
            size += len(piece)
            if size > limit:
                raise _UpstreamTooLarge("answer", limit, "CONVMEM_PROXY_MAX_UPSTREAM_BYTES") from None
            pieces.append(piece)
        body = b"".join(pieces)
    if len(body) > limit:
        raise _UpstreamTooLarge("answer", limit, "CONVMEM_PROXY_MAX_UPSTREAM_BYTES")
    return body


async def _read_error_body(response: httpx.Response, limit: int) -> bytes:
    """Read at most ``limit`` bytes of an error answer (the rest is not needed to report it)."""
    try:
        return response.content[:limit]  # already read (a transport that buffers)
    except httpx.ResponseNotRead:
        pass
    pieces: list[bytes] = []
    size = 0
    async for piece in response.aiter_bytes():
        pieces.append(piece)
        size += len(piece)
        if size > limit:
            break
    return b"".join(pieces)[:limit]


def _turn_id(request_id: str, role: str) -> str:
    digest = hashlib.blake2b(f"{request_id}\x1f{role}".encode(), digest_size=10).hexdigest()
    return f"proxy_{digest}"
