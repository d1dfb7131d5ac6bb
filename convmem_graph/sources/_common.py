"""Private helpers shared by the source readers: JSON paths, typed field access, limits, text.

Every reader walks an untrusted payload. The helpers here turn every way a field can be wrong
into a :class:`SourceFormatError` that names the source and the JSON path, so a reader never
leaks ``KeyError``/``TypeError`` and a lenient reader can quarantine one bad item and go on.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, NoReturn, TypeVar

from convmem_graph._time import to_ms
from convmem_graph.config import MemoryConfig
from convmem_graph.errors import SourceFormatError
from convmem_graph.models import Message, SkippedItem

__all__ = [
    "BOT_PREFIX",
    "MAX_DEPTH",
    "MAX_DOCUMENT_BYTES",
    "MAX_ITEMS_PER_PAYLOAD",
    "MAX_NODES",
    "MAX_TEXT_CHARS",
    "ReadContext",
    "check_item_counts",
    "check_structure",
    "clean_text",
    "content_hash",
    "dedupe_by_id",
    "fail",
    "get_dict",
    "get_list",
    "get_str",
    "idx",
    "join",
    "opt_int",
    "opt_str",
    "parse_json_text",
    "timestamp_ms",
]

#: Tencent IM chatbot accounts start with this prefix.
BOT_PREFIX = "@RBT#"
#: Largest JSON text (str or bytes) a reader parses.
MAX_DOCUMENT_BYTES = 32 * 1024 * 1024
#: Deepest nesting accepted; vendor payloads are < 10 levels deep.
MAX_DEPTH = 64
#: Most JSON values (containers and scalars) walked in one payload.
MAX_NODES = 5_000_000
#: Longest message text kept; a longer "utterance" is not conversation.
MAX_TEXT_CHARS = 100_000
#: Most items (messages, bodies, pages) in one list of a payload: normalizing 200k messages of one
#: 11 MB payload took 14 s and over 400 MB; vendor pages hold at most a few thousand.
MAX_ITEMS_PER_PAYLOAD = 20_000
_T = TypeVar("_T")
# Timestamps: 1e14 ms is the year 5138, so anything larger is micro- or nanoseconds; above 1e20
# the value is nonsense.
_MICRO_THRESHOLD = 100_000_000_000_000
_NANO_THRESHOLD = 100_000_000_000_000_000
_TS_MAX = 100_000_000_000_000_000_000


def check_item_counts(source: str, data: Any, *, depth: int = 4) -> None:
    """Refuse a payload with a list longer than :data:`MAX_ITEMS_PER_PAYLOAD` in its top levels.

    Only containers are walked, ``depth`` levels deep (every vendor shape keeps its message list
    within four levels), so the check costs little more than the number of containers there.

    Raises:
        SourceFormatError: Naming the list's JSON path and the limit.
    """
    # A container's path is written out only for the error: (parent, key, is index) until then
    # (formatting every message's path cost a replay more than the walk).
    stack: list[tuple[Any, _Where, int]] = [(data, "$", 0)]
    while stack:
        node, where, level = stack.pop()
        if isinstance(node, list):
            if len(node) > MAX_ITEMS_PER_PAYLOAD:
                fail(
                    source,
                    _where_path(where),
                    f"{len(node)} items exceed the limit of {MAX_ITEMS_PER_PAYLOAD} per payload",
                )
            if level < depth:
                stack.extend(
                    (v, (where, i, True), level + 1)
                    for i, v in enumerate(node)
                    if isinstance(v, (list, dict))
                )
        elif isinstance(node, dict) and level < depth:
            stack.extend(
                (v, (where, k, False), level + 1) for k, v in node.items() if isinstance(v, (list, dict))
            )


#: Where :func:`check_item_counts` found a container: ``"$"``, or (parent, key, whether an index).
_Where = str | tuple[Any, object, bool]


def _where_path(where: _Where) -> str:
    """The JSON path of a :data:`_Where`: ``$.messages[3]``."""
    if isinstance(where, str):
        return where
    parent, key, index = where
    return f"{_where_path(parent)}[{key}]" if index else f"{_where_path(parent)}.{key}"


def join(base: str, key: object) -> str:
    """Return the JSON path of ``key`` under ``base`` (``$`` is the document itself)."""
    return str(key) if base in ("", "$") else f"{base}.{key}"


def idx(base: str, i: int) -> str:
    """Return the JSON path of list element ``i`` under ``base``."""
    return f"[{i}]" if base in ("", "$") else f"{base}[{i}]"


def fail(source: str, path: str, reason: str) -> NoReturn:
    """Raise a :class:`SourceFormatError` for ``path``."""
    raise SourceFormatError(source, path, reason)


def _type_name(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list | tuple):
        return "array"
    if isinstance(value, Mapping):
        return "object"
    return type(value).__name__


def get_dict(source: str, obj: Mapping[str, Any], key: str, path: str) -> Mapping[str, Any]:
    """Return the object at ``obj[key]`` or raise naming ``path.key``."""
    value = obj.get(key)
    if not isinstance(value, Mapping):
        fail(source, join(path, key), f"expected an object, got {_type_name(value)}")
    return value


def get_list(source: str, obj: Mapping[str, Any], key: str, path: str) -> list[Any]:
    """Return the array at ``obj[key]`` or raise naming ``path.key``."""
    value = obj.get(key)
    if not isinstance(value, list):
        fail(source, join(path, key), f"expected an array, got {_type_name(value)}")
    return value


def get_str(source: str, obj: Mapping[str, Any], key: str, path: str, *, allow_int: bool = False) -> str:
    """Return the non-empty string at ``obj[key]`` (ints too when ``allow_int``) or raise."""
    value = opt_str(source, obj, key, path, allow_int=allow_int)
    if value is None or value == "":
        fail(source, join(path, key), "missing or empty")
    return value


def opt_str(
    source: str, obj: Mapping[str, Any], key: str, path: str, *, allow_int: bool = False
) -> str | None:
    """Return the string at ``obj[key]``, ``None`` when absent/null, or raise on another type."""
    value = obj.get(key)
    if value is None:
        return None
    if isinstance(value, str):
        return clean_text(value)
    if allow_int and isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    fail(source, join(path, key), f"expected a string, got {_type_name(value)}")


def opt_int(source: str, obj: Mapping[str, Any], key: str, path: str) -> int | None:
    """Return the integer at ``obj[key]`` (digit strings accepted), ``None`` when absent/null/""."""
    value = obj.get(key)
    if value is None or value == "":
        return None
    if isinstance(value, str) and value.strip().lstrip("-").isdigit() and len(value) <= 20:
        return int(value.strip())
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) < _TS_MAX:
        return value
    if isinstance(value, float) and value.is_integer() and abs(value) < _TS_MAX:
        return int(value)
    fail(source, join(path, key), f"expected an integer, got {_type_name(value)} {_short(value)}")


def timestamp_ms(source: str, value: Any, path: str) -> int:
    """Convert a vendor timestamp (s, ms, µs or ns; number or digit string) to integer ms UTC.

    The unit is decided by magnitude (``convmem_graph._time.to_ms`` for seconds vs ms); values
    of 1e14 and above are micro- or nanoseconds and are divided down.
    """
    if type(value) is int and 0 <= value < _MICRO_THRESHOLD:
        return to_ms(value)  # the common case: an integer in seconds or milliseconds
    number: float | int
    if isinstance(value, str):
        text = value.strip()
        try:
            number = float(text) if len(text) <= 24 else math.nan
        except ValueError:
            fail(source, path, f"expected a timestamp, got string {_short(value)}")
        if number.is_integer() and text.isdigit():
            number = int(text)
    elif isinstance(value, int | float) and not isinstance(value, bool):
        number = value
    else:
        fail(source, path, f"expected a timestamp, got {_type_name(value)}")
    if not math.isfinite(number) or number < 0 or number >= _TS_MAX:
        fail(source, path, f"timestamp out of range: {_short(value)}")
    if number >= _NANO_THRESHOLD:
        number = number // 1_000_000
    elif number >= _MICRO_THRESHOLD:
        number = number // 1_000
    return to_ms(number)


def _short(value: Any, limit: int = 40) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def clean_text(text: str) -> str:
    """Return ``text`` safe to store: lone surrogates replaced, NUL characters removed."""
    if text.isascii():
        return text.replace("\x00", "") if "\x00" in text else text
    return text.encode("utf-8", "replace").decode("utf-8").replace("\x00", "")


def content_hash(text: str) -> str:
    """Return a short stable hash of a text (for ids that must not depend on position alone)."""
    return hashlib.blake2b(text.encode("utf-8", "replace"), digest_size=8).hexdigest()


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def parse_json_text(source: str, text: str | bytes | bytearray, path: str, *, check: bool = True) -> Any:
    """Parse JSON text (UTF-8 bytes or str) within the size and depth limits.

    ``check=False`` leaves the depth and size walk (:func:`check_structure`) to a later reader
    (``read_payload`` checks every parsed payload), so a document is walked once.
    """
    if isinstance(text, bytes | bytearray):
        if len(text) > MAX_DOCUMENT_BYTES:
            fail(source, path, f"document larger than {MAX_DOCUMENT_BYTES} bytes")
        try:
            text = bytes(text).decode("utf-8-sig")
        except UnicodeDecodeError as exc:
            fail(source, path, f"not UTF-8 text (byte {exc.start})")
    if len(text) > MAX_DOCUMENT_BYTES:
        fail(source, path, f"document larger than {MAX_DOCUMENT_BYTES} characters")
    try:
        data = json.loads(text, parse_constant=_reject_constant)
    except json.JSONDecodeError as exc:
        fail(source, path, f"invalid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}")
    except RecursionError:
        fail(source, path, f"JSON nested deeper than {MAX_DEPTH} levels")
    except ValueError as exc:  # NaN/Infinity, integers with too many digits
        fail(source, path, f"invalid JSON: {exc}")
    if check:
        check_structure(source, data, path)
    return data


def check_structure(source: str, data: Any, path: str = "$") -> None:
    """Reject payloads nested deeper than :data:`MAX_DEPTH` or larger than :data:`MAX_NODES`.

    Walks iteratively (never recursion), so a cyclic or absurdly deep Python object fails fast.
    """
    if not _is_container(data):
        return
    stack: list[tuple[Any, int]] = [(data, 0)]
    nodes = 1
    while stack:
        node, depth = stack.pop()
        if depth >= MAX_DEPTH:
            fail(source, path, f"payload nested deeper than {MAX_DEPTH} levels")
        children: Iterable[Any] = node.values() if isinstance(node, Mapping) else node
        # Scalars are only counted; only containers go on the stack (most values are scalars).
        for child in children:
            nodes += 1
            if _is_container(child):
                stack.append((child, depth + 1))
        if nodes > MAX_NODES:
            fail(source, path, f"payload has more than {MAX_NODES} values")


_SCALARS = (str, int, float, bool, type(None))


def _is_container(value: Any) -> bool:
    # Exact-type checks first: the ABC checks below are slow and JSON gives plain dicts and lists.
    kind = type(value)
    if kind is dict or kind is list or kind is tuple:
        return True
    if kind in _SCALARS:
        return False
    return isinstance(value, Mapping | list | tuple)


@dataclass
class ReadContext:
    """Per-read settings and the skipped-items sink of one reader call.

    Attributes:
        source: The source name reported in errors.
        bot_ids: Accounts that are the assistant.
        config: Deployment settings (non-text element rule).
        lenient: Quarantine bad items (``True``) or raise on the first one.
        base_timestamp_ms: Time given to messages whose payload carries none (OpenAI lists).
    """

    source: str
    bot_ids: frozenset[str] = frozenset()
    config: MemoryConfig = field(default_factory=MemoryConfig)
    lenient: bool = True
    base_timestamp_ms: int | None = None
    skipped: list[SkippedItem] = field(default_factory=list)

    def skip(self, reason: str, path: str, detail: str = "") -> None:
        """Record an item that is deliberately not a message."""
        self.skipped.append(SkippedItem(reason=reason, path=path or "$", detail=detail))

    def invalid(self, exc: SourceFormatError) -> None:
        """Quarantine a bad item (lenient) or re-raise its error (strict)."""
        if not self.lenient:
            raise exc
        self.skipped.append(SkippedItem(reason="invalid", path=exc.path, detail=exc.reason))

    def guarded(self, func: Callable[..., _T], *args: Any) -> _T | None:
        """Run one item's parser; a :class:`SourceFormatError` quarantines the item."""
        try:
            return func(*args)
        except SourceFormatError as exc:
            self.invalid(exc)
            return None


def dedupe_by_id(
    ctx: ReadContext, messages: list[Message], prefer: Callable[[Message], int]
) -> list[Message]:
    """Keep one message per id (the one ``prefer`` ranks highest, else the first); report others."""
    best: dict[str, int] = {}
    out: list[Message | None] = []
    for m in messages:
        pos = best.get(m.id)
        if pos is None:
            best[m.id] = len(out)
            out.append(m)
            continue
        kept = out[pos]
        assert kept is not None
        if prefer(m) > prefer(kept):
            out[pos] = m
            m, kept = kept, m
        ctx.skip("duplicate", str(m.metadata.get("path", "$")), f"same id as {kept.id}")
    return [m for m in out if m is not None]
