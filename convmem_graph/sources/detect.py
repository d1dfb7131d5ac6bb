"""Auto-detection of a payload's source format from its shape.

Checked in this order (first match wins): Tencent IM (``MsgList``/``ActionStatus``/``pages``),
TRTC (``EventGroupId``/``EventInfo``/``deliveries``), Agora (NCS envelope, ``contents``, or
messages carrying Agora's ``turn_id``/``metadata``/``speech_*_ms`` or request ``interruptable``),
LangChain (``BaseMessage`` objects or ``messages_to_dict`` dicts), then OpenAI (``{role, content}``
dicts). An empty list is an empty OpenAI conversation.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from convmem_graph.errors import SourceFormatError
from convmem_graph.sources._common import check_structure, parse_json_text
from convmem_graph.sources.agora import looks_like_agora
from convmem_graph.sources.openai_messages import looks_like_langchain, looks_like_openai
from convmem_graph.sources.tencent_im import looks_like_tencent_im
from convmem_graph.sources.trtc import looks_like_trtc

__all__ = ["SOURCE_NAMES", "coerce_payload", "detect_parsed", "detect_source"]

#: Every source format name, in detection order of the error message.
SOURCE_NAMES: tuple[str, ...] = ("agora", "tencent_im", "trtc", "openai", "langchain")

_CHECKS: tuple[tuple[str, Callable[[Any], bool]], ...] = (
    ("tencent_im", looks_like_tencent_im),
    ("trtc", looks_like_trtc),
    ("agora", looks_like_agora),
    ("langchain", looks_like_langchain),
    ("openai", looks_like_openai),
)


def coerce_payload(data: Any, source: str = "auto") -> Any:
    """Parse JSON text (``str``/``bytes``, UTF-8) and check nesting depth and size of any payload.

    Raises:
        SourceFormatError: Undecodable bytes, invalid JSON, or a payload too deep or too large.
    """
    if isinstance(data, str | bytes | bytearray):
        return parse_json_text(source, data, "$")
    check_structure(source, data)
    return data


def detect_source(data: Any) -> str:
    """Return the source format name of a payload.

    Args:
        data: A parsed payload, or JSON text as ``str``/``bytes``.

    Returns:
        One of :data:`SOURCE_NAMES`.

    Raises:
        SourceFormatError: (``source="auto"``, ``path="$"``) when no format matches; the message
            lists the formats tried.

    Example:
        >>> detect_source({"EventGroupId": 9, "EventType": 903, "EventInfo": {}})
        'trtc'
    """
    return detect_parsed(coerce_payload(data))


def detect_parsed(data: Any) -> str:
    """Like :func:`detect_source` for a payload already parsed and checked by :func:`coerce_payload`."""
    if isinstance(data, list) and not data:
        return "openai"
    for name, check in _CHECKS:
        if check(data):
            return name
    shape = type(data).__name__
    if isinstance(data, dict):
        keys = ", ".join(sorted(str(k) for k in list(data)[:8]))
        shape = f"object with keys {keys or '(none)'}"
    raise SourceFormatError(
        "auto", "$", f"unrecognized payload ({shape[:120]}); tried: {', '.join(SOURCE_NAMES)}"
    )
