"""Conversation sources: vendor payloads in, normalized :class:`~convmem_graph.models.Message` out.

One module per source (``agora``, ``tencent_im``, ``trtc``, ``openai_messages``), ``detect`` for
auto-detection, ``timeline`` to merge several results into one ordered de-duplicated timeline,
and ``files`` to stream JSON documents from files.

Example:
    >>> from convmem_graph.sources import read_payload
    >>> r = read_payload([{"role": "system", "content": "be nice"}, {"role": "user", "content": "hi"}])
    >>> r.source, [m.content for m in r.messages], [s.reason for s in r.skipped]
    ('openai', ['hi'], ['system'])
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

from convmem_graph.config import MemoryConfig
from convmem_graph.errors import SourceFormatError
from convmem_graph.models import ReadResult
from convmem_graph.sources._common import ReadContext, check_item_counts
from convmem_graph.sources.agora import read_agora
from convmem_graph.sources.detect import SOURCE_NAMES, coerce_payload, detect_parsed, detect_source
from convmem_graph.sources.files import iter_documents
from convmem_graph.sources.openai_messages import read_langchain, read_openai
from convmem_graph.sources.tencent_im import read_tencent_im
from convmem_graph.sources.timeline import merge_timeline, normalize_text
from convmem_graph.sources.trtc import read_trtc

__all__ = [
    "SOURCE_NAMES",
    "detect_source",
    "iter_documents",
    "merge_timeline",
    "normalize_text",
    "peek_user_id",
    "read_payload",
]

logger = logging.getLogger(__name__)

_READERS: dict[str, Callable[[Any, ReadContext], ReadResult]] = {
    "agora": read_agora,
    "tencent_im": read_tencent_im,
    "trtc": read_trtc,
    "openai": read_openai,
    "langchain": read_langchain,
}
_ALIASES = {"im": "tencent_im", "tencent": "tencent_im", "lc": "langchain", "openai_messages": "openai"}


def read_payload(
    data: Any,
    source: str | None = None,
    *,
    bot_ids: Sequence[str] = (),
    config: MemoryConfig | None = None,
    lenient: bool = True,
    base_timestamp_ms: int | None = None,
) -> ReadResult:
    """Read one payload of a conversation source into messages and skipped items.

    Args:
        data: The payload: a parsed JSON document, JSON text as ``str``/``bytes`` (UTF-8), or a
            list of LangChain messages.
        source: One of :data:`SOURCE_NAMES`; ``None`` or ``"auto"`` detects it.
        bot_ids: Accounts that are the assistant (added to ``config.bot_ids``).
        config: Deployment settings (bot ids, non-text element rule).
        lenient: ``True``: a bad item is reported in ``skipped`` (reason ``invalid``, its JSON
            path, the problem) and the rest is read; ``False``: the first bad item raises.
        base_timestamp_ms: Time for messages whose payload carries none (OpenAI/LangChain lists
            without timestamps); default 0. Never part of an id.

    Returns:
        The messages in time order (stable on ties), the skipped items, and the user id and
        memory id found in the payload, if any.

    Raises:
        SourceFormatError: The payload's overall structure is wrong, the format is unknown, or
            (strict) an item is bad. Nothing else is raised.
    """
    cfg = config or MemoryConfig()
    name = (source or "auto").strip().lower()
    name = _ALIASES.get(name, name)
    if name != "auto" and name not in _READERS:
        raise SourceFormatError(
            name, "$", f"unknown source format; expected one of {', '.join(SOURCE_NAMES)}"
        )
    try:
        data = coerce_payload(data, "auto" if name == "auto" else name)
        if name == "auto":
            name = detect_parsed(data)
        check_item_counts(name, data)  # bounded work: no 200k-message payloads
        ctx = ReadContext(
            source=name,
            bot_ids=frozenset([*cfg.bot_ids, *bot_ids]),
            config=cfg,
            lenient=lenient,
            base_timestamp_ms=base_timestamp_ms,
        )
        return _READERS[name](data, ctx)
    except SourceFormatError:
        raise
    except Exception as exc:  # noqa: BLE001  # the contract: only SourceFormatError escapes
        logger.warning("unexpected %s while reading a %s payload", type(exc).__name__, name, exc_info=True)
        raise SourceFormatError(name, "$", f"unreadable payload ({type(exc).__name__})") from exc


def peek_user_id(data: Any, source: str | None = None) -> str | None:
    """Return the user id :func:`read_payload` would report, without reading the messages.

    Only formats whose id sits at a fixed place are answered (an OpenAI-style request's ``user``,
    with no memory id in such payloads); ``None`` means "read the payload to know". Replay uses it
    to skip other shards' documents cheaply.
    """
    if not isinstance(data, dict):
        return None
    try:
        name = _ALIASES.get(source, source) if source and source != "auto" else detect_source(data)
    except SourceFormatError:
        return None
    if name != "openai":
        return None
    user = data.get("user")
    return user if isinstance(user, str) and user else None  # as given, like read_payload
