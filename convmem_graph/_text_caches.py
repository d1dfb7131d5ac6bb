"""The process's memos of stored text, emptied when stored text is deleted.

Call start and the lifecycle memoize pure functions of turn and fact texts (token counts, terms,
quoted excerpts, canonical keys, a memory id's bucket). Their answers do not depend on whose text it
is, so one memo serves every memory; the price is that a deleted memory's words would stay in this
process until other texts evict them. ``MemoryStore.delete_memory`` and ``purge_messages`` call
:func:`forget_texts`: a delete is rare, and the memos fill again from the next calls' texts.

A memo whose keys and answers can hold stored text registers itself with :func:`holds_text`;
``tests/unit/test_text_caches.py`` checks that every memo in the package either is registered or is
named there as holding none (so a new memo cannot be forgotten silently).

This module is a leaf: every layer may import it.
"""

from __future__ import annotations

import threading
from typing import Protocol, TypeVar

__all__ = ["forget_texts", "holds_text", "text_caches"]


class Clearable(Protocol):
    """A memo that can be emptied: what ``functools.lru_cache`` and ``functools.cache`` return."""

    def cache_clear(self) -> None:
        """Drop every remembered answer."""


_C = TypeVar("_C", bound=Clearable)

_CACHES: list[Clearable] = []
_LOCK = threading.Lock()


def holds_text(cache: _C) -> _C:
    """Register ``cache`` (an ``lru_cache``-wrapped function) as holding stored text; return it.

    Example:
        >>> import functools
        >>> @holds_text
        ... @functools.lru_cache(maxsize=16)
        ... def shout(text: str) -> str:
        ...     return text.upper()
        >>> shout("hi"), shout.cache_info().currsize
        ('HI', 1)
        >>> forget_texts(); shout.cache_info().currsize
        0
    """
    with _LOCK:
        _CACHES.append(cache)
    return cache


def forget_texts() -> None:
    """Empty every registered memo of stored text in this process."""
    with _LOCK:
        caches = list(_CACHES)
    for cache in caches:
        cache.cache_clear()


def text_caches() -> tuple[Clearable, ...]:
    """The memos registered so far (those of the modules imported so far)."""
    with _LOCK:
        return tuple(_CACHES)
