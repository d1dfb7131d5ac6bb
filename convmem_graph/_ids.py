"""Stable ids derived from a source's own keys, so re-reading a payload yields the same ids."""

from __future__ import annotations

import hashlib

__all__ = ["stable_id"]


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
