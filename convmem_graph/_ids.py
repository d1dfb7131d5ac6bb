r"""Stable ids derived from a source's own keys, and the one validation of identifiers.

Identifiers (memory ids, message and fragment ids, variable names, fragment keys and categories)
are checked by :func:`check_identifier` wherever they enter: the CLI, the library, import and
replay grouping. The rules, documented in the README:

* a string of 1 to ``IDENTIFIER_LIMITS[kind]`` characters (255 for ids and keys, 64 for variable
  names, 32 for categories);
* no control, format (zero-width, bidi override), surrogate, private-use or unassigned characters
  (so ``mem_\udc00`` cannot be stored as ``mem_?`` and collide with another id), no line breaks;
* variable names are ASCII ``[A-Za-z_][A-Za-z0-9_]*``.

Invalid identifiers are rejected with :class:`InvalidIdentifierError`, never silently transformed.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from typing import Literal

from convmem_graph.errors import InvalidIdentifierError

__all__ = ["IDENTIFIER_LIMITS", "IdentifierKind", "check_identifier", "identifier_problem", "stable_id"]

IdentifierKind = Literal["memory_id", "id", "variable", "key", "category"]

#: Longest allowed identifier of each kind, in characters.
IDENTIFIER_LIMITS: dict[str, int] = {"memory_id": 255, "id": 255, "variable": 64, "key": 255, "category": 32}

_VARIABLE_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# Cc control, Cf format (zero-width, bidi overrides), Cs lone surrogates, Co private use, Cn unassigned;
# Zl/Zp line and paragraph separators.
_BAD_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"})


def identifier_problem(value: object, kind: IdentifierKind = "id") -> str | None:
    r"""Return why ``value`` is not a valid identifier of ``kind``, or None when it is valid.

    Example:
        >>> identifier_problem("u_10086", "memory_id") is None
        True
        >>> identifier_problem("mem_\udc00", "memory_id")
        "character U+DC00 at position 4 is not allowed (category 'Cs')"
    """
    if not isinstance(value, str):
        return f"must be a string, got {type(value).__name__}"
    limit = IDENTIFIER_LIMITS[kind]
    if not value:
        return "must not be empty"
    if len(value) > limit:
        return f"must be at most {limit} characters, got {len(value)}"
    if kind == "variable" and not _VARIABLE_RE.fullmatch(value):
        return "must match [A-Za-z_][A-Za-z0-9_]*"
    if value.isascii():  # the common case: only control characters can be wrong
        for i, ch in enumerate(value):
            if ch < " " or ch == "\x7f":
                return f"character U+{ord(ch):04X} at position {i} is not allowed (category 'Cc')"
        return None
    for i, ch in enumerate(value):
        category = unicodedata.category(ch)
        if category in _BAD_CATEGORIES:
            return f"character U+{ord(ch):04X} at position {i} is not allowed (category {category!r})"
    return None


def check_identifier(value: object, kind: IdentifierKind = "id", *, field: str | None = None) -> str:
    """Return ``value`` if it is a valid identifier of ``kind``, else raise.

    Args:
        value: The candidate identifier.
        kind: ``memory_id``, ``id`` (message, fragment), ``variable``, ``key`` or ``category``.
        field: Name or JSON path of the field, for the error message (defaults to ``kind``).

    Raises:
        InvalidIdentifierError: Naming the field and what is wrong (the value is shown shortened).

    Example:
        >>> check_identifier("u_10086", "memory_id")
        'u_10086'
    """
    problem = identifier_problem(value, kind)
    if problem is not None:
        shown = repr(value[:40]) + ("..." if len(value) > 40 else "") if isinstance(value, str) else ""
        raise InvalidIdentifierError(field or kind, f"{problem}{': ' + shown if shown else ''}")
    assert isinstance(value, str)
    return value


def stable_id(prefix: str, *parts: object) -> str:
    """Return a short deterministic id ``{prefix}_{hash}`` for the given key parts.

    Args:
        prefix: Short readable prefix naming the kind of object (``im``, ``trtc``, ``ag`` ...).
        *parts: The source's own identifying values; ``None`` and ints are fine.

    Example:
        >>> stable_id("im", "80431_1930021_1767265205") == stable_id("im", "80431_1930021_1767265205")
        True
    """
    joined = "\x1f".join(["" if p is None else str(p) for p in parts])  # a list joins faster
    digest = hashlib.blake2b(joined.encode("utf-8"), digest_size=10).hexdigest()
    return f"{prefix}_{digest}"
