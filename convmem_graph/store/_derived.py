"""Fragment columns derived from a fragment's key and content, and their column defaults.

``ckey`` (the canonical key), ``norm_hash`` (a 64-bit hash of the normalized content) and ``cjk``
(mainly Chinese text) let the live path read facts by index. Every insert gets them: the writer
sets them, and the column defaults below fill them for inserts that leave them out (an import
of an older export).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any

from convmem_graph.text.keys import canonical_key
from convmem_graph.text.scripts import is_cjk_text, norm_text

__all__ = ["column_default", "derived_columns", "norm_hash"]


def norm_hash(content: str) -> int:
    """Return a signed 64-bit hash of a fact's normalized content (what reconcile compares).

    Example:
        >>> norm_hash("用户喜欢猫。") == norm_hash("用户 喜欢 猫")
        True
    """
    digest = hashlib.blake2b(norm_text(content).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


def derived_columns(key: str, content: str) -> dict[str, Any]:
    """The columns derived from a fragment's key and content: ``ckey``, ``norm_hash``, ``cjk``."""
    return {"ckey": canonical_key(key), "norm_hash": norm_hash(content), "cjk": is_cjk_text(content)}


def column_default(name: str) -> Callable[[Any], Any]:
    """A SQLAlchemy column default computing derived column ``name`` from the inserted row."""

    def default(context: Any) -> Any:
        params = context.get_current_parameters()
        return derived_columns(str(params.get("key") or ""), str(params.get("content") or ""))[name]

    return default
