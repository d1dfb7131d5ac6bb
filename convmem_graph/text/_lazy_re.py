r"""Regular expressions compiled on first use, not at import.

The heuristic extractor's rule modules hold a few hundred module-level patterns; compiling them
all at import is a fixed 0.1-0.3 CPU-s per process, and a replay of one language's archive never
runs a good part of them (a LoCoMo replay leaves the Chinese families unused). A rule module
writes :func:`lazy_compile` where it wrote :func:`re.compile`; the pattern is compiled by
:func:`re.compile` when one of its methods is first called. Then every global name of the module
that made it and still holds it is rebound to the compiled :class:`re.Pattern` itself, so the
rules' calls cost what they did with patterns compiled at import (a method found on an instance's
``__dict__`` cost the extractor ~5 % more, measured on 10k LoCoMo messages). A reference kept
elsewhere (a tuple of patterns, a name imported into another module) keeps the stand-in, which
from then on holds the compiled pattern's own bound methods.

Plain Python: no private ``re`` or ``_sre`` API (the making module's globals come from
``sys._getframe(1)``, documented in :mod:`sys` as CPython's; a pattern the rules make inside a
function would find no name of its own to rebind, and none is made there). ``pattern`` (the
source) is there before any compile, so one pattern's source can be built into another's.

Example:
    >>> rx = lazy_compile(r"(?P<n>\d+) cats?")
    >>> rx.compiled
    False
    >>> rx.search("I have 2 cats").group("n")
    '2'
    >>> type(rx).__name__  # the name now holds the compiled pattern
    'Pattern'
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Iterator
from typing import Any

__all__ = ["LazyPattern", "lazy_compile"]

#: The methods a compile binds onto the instance (they then shadow the class's first-call ones).
_BOUND = ("search", "match", "fullmatch", "sub", "subn", "split", "findall", "finditer")


class LazyPattern:
    """A :class:`re.Pattern` stand-in that compiles itself when first used.

    Only the methods and attributes below exist; a use of anything else is an
    :class:`AttributeError` at once (and a mypy error before that), never a silent difference.
    Identity is not kept across the compile: ``match.re`` is the compiled pattern, never the
    stand-in, and a module global that held the stand-in holds the compiled pattern afterwards.
    """

    def __init__(
        self, pattern: str, flags: int | re.RegexFlag = 0, home: dict[str, Any] | None = None
    ) -> None:
        self.pattern = pattern
        self._flags = flags
        #: The globals of the module that made it (its names are rebound at the compile).
        self._home = home

    @property
    def compiled(self) -> bool:
        """Whether the pattern has been compiled (one of its methods was called)."""
        return "search" in self.__dict__

    def compile(self) -> re.Pattern[str]:
        """The compiled pattern (compiled now if it was not); binds its methods onto this instance."""
        compiled = re.compile(self.pattern, self._flags)
        for name in _BOUND:
            setattr(self, name, getattr(compiled, name))
        home = self._home
        if home is not None:
            self._home = None
            for key, value in list(home.items()):
                if value is self:
                    home[key] = compiled
        return compiled

    @property
    def flags(self) -> int:
        """The compiled pattern's flags (as :attr:`re.Pattern.flags`: implicit ``re.UNICODE`` included)."""
        return self.compile().flags

    @property
    def groupindex(self) -> dict[str, int]:
        """The compiled pattern's named groups."""
        return dict(self.compile().groupindex)

    def search(self, string: str, pos: int = 0, endpos: int = sys.maxsize) -> re.Match[str] | None:
        """:meth:`re.Pattern.search`."""
        return self.compile().search(string, pos, endpos)

    def match(self, string: str, pos: int = 0, endpos: int = sys.maxsize) -> re.Match[str] | None:
        """:meth:`re.Pattern.match`."""
        return self.compile().match(string, pos, endpos)

    def fullmatch(self, string: str, pos: int = 0, endpos: int = sys.maxsize) -> re.Match[str] | None:
        """:meth:`re.Pattern.fullmatch`."""
        return self.compile().fullmatch(string, pos, endpos)

    def sub(self, repl: str | Callable[[re.Match[str]], str], string: str, count: int = 0) -> str:
        """:meth:`re.Pattern.sub`."""
        return self.compile().sub(repl, string, count)

    def subn(
        self, repl: str | Callable[[re.Match[str]], str], string: str, count: int = 0
    ) -> tuple[str, int]:
        """:meth:`re.Pattern.subn`."""
        return self.compile().subn(repl, string, count)

    def split(self, string: str, maxsplit: int = 0) -> list[str | Any]:
        """:meth:`re.Pattern.split`."""
        return self.compile().split(string, maxsplit)

    def findall(self, string: str, pos: int = 0, endpos: int = sys.maxsize) -> list[Any]:
        """:meth:`re.Pattern.findall`."""
        return self.compile().findall(string, pos, endpos)

    def finditer(self, string: str, pos: int = 0, endpos: int = sys.maxsize) -> Iterator[re.Match[str]]:
        """:meth:`re.Pattern.finditer`."""
        return self.compile().finditer(string, pos, endpos)

    def __repr__(self) -> str:
        return f"lazy_compile({self.pattern!r}, {self._flags!r})"


def lazy_compile(pattern: str, flags: int | re.RegexFlag = 0) -> LazyPattern:
    """A pattern that :func:`re.compile` compiles on its first use (see :class:`LazyPattern`).

    Called at a module's top level: at the compile, the module's global names that hold the
    stand-in are rebound to the compiled pattern.
    """
    return LazyPattern(pattern, flags, sys._getframe(1).f_globals)
