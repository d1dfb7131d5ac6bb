"""Reading JSON documents from files: ``.json``, ``.jsonl``/``.ndjson``, and ``.gz`` of either.

JSON Lines files are streamed line by line (never read whole); blank lines are ignored. A file
with another extension is read as one JSON document.

Bounded work on any input (issue 10): only regular files are opened (a FIFO, a device such as a
``.jsonl`` symlinked to ``/dev/zero``, a socket or a directory is refused by name, without
blocking; a symlink loop fails to open with the OS's error), and :class:`ReadLimits` caps the
decompressed bytes read from one file, its lines (blank ones included, so 256 MiB of gzipped
newlines stops at the line cap) and the length of one line or document. Exceeding a limit raises
:class:`SourceFormatError` naming the file, the line and the limit.
"""

from __future__ import annotations

import gzip
import json
import os
import stat
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from convmem_graph.errors import SourceFormatError
from convmem_graph.sources._common import MAX_DOCUMENT_BYTES, parse_json_text

__all__ = ["DEFAULT_LIMITS", "BadLine", "LineBudget", "ReadLimits", "iter_documents", "open_regular"]

_LINE_SUFFIXES = (".jsonl", ".ndjson")


@dataclass(frozen=True)
class ReadLimits:
    """Limits on reading one input file (documented defaults; pass your own to raise them).

    Attributes:
        max_file_bytes: Decompressed bytes read from one file (1 GiB).
        max_lines: Lines of one JSON Lines file, blank lines included (1,000,000).
        max_line_bytes: Bytes of one line or one whole-file document (``MAX_DOCUMENT_BYTES``).
        max_documents: Documents one ``convmem ingest`` or ``normalize`` holds in memory across
            its files (100,000); ``convmem replay`` streams and is not bound by it.
        max_bad_documents: Unreadable documents after which replay abandons a file (10,000).
    """

    max_file_bytes: int = 1 << 30
    max_lines: int = 1_000_000
    max_line_bytes: int = MAX_DOCUMENT_BYTES
    max_documents: int = 100_000
    max_bad_documents: int = 10_000


#: The limits used when none are given.
DEFAULT_LIMITS = ReadLimits()

_KINDS = (
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISDIR, "a directory"),
)


def open_regular(path: str | Path) -> IO[bytes]:
    """Open a regular file for reading (gunzipping ``.gz``), refusing anything else by name.

    The file is opened non-blocking and checked with ``fstat`` on the open descriptor, so a FIFO
    cannot block the reader and a path swapped between check and open is still caught.

    Raises:
        SourceFormatError: ``source="json"``: the path is not a regular file (FIFO, device, ...).
        OSError: The file cannot be opened (missing, permission, symlink loop).
    """
    path = Path(path)
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            kind = next((name for test, name in _KINDS if test(mode)), "not a regular file")
            raise SourceFormatError("json", str(path), f"{kind}, not a regular file: refused")
        if hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)
        raw = os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise
    if path.suffix.lower() == ".gz":
        return gzip.GzipFile(fileobj=raw, mode="rb")  # type: ignore[return-value]  # a binary file object
    return raw


class LineBudget:
    """Counts the lines and bytes read from one file and raises past its :class:`ReadLimits`."""

    def __init__(self, name: str, limits: ReadLimits = DEFAULT_LIMITS) -> None:
        self.name = name
        self.limits = limits
        self.lines = 0
        self.bytes = 0

    def take(self, line: bytes, *, continued: bool = False) -> None:
        """Account for one line just read (call before parsing it).

        Args:
            line: The bytes read.
            continued: The bytes continue the previous line (an overlong line read in pieces).
        """
        self.lines += 0 if continued else 1
        self.bytes += len(line)
        if self.lines > self.limits.max_lines:
            raise SourceFormatError(
                "json", f"{self.name}:{self.lines}", f"more than {self.limits.max_lines} lines (limit)"
            )
        if self.bytes > self.limits.max_file_bytes:
            raise SourceFormatError(
                "json",
                f"{self.name}:{self.lines}",
                f"more than {self.limits.max_file_bytes} bytes after decompression (limit)",
            )


@dataclass(frozen=True)
class BadLine:
    """A JSON Lines line that is not a JSON document, yielded (not raised) with ``skip_bad_lines``."""

    raw: str
    error: SourceFormatError


def iter_documents(
    path: str | Path, limits: ReadLimits = DEFAULT_LIMITS, *, skip_bad_lines: bool = False
) -> Iterator[tuple[str, Any]]:
    r"""Yield ``(locator, document)`` for every JSON document in a file.

    Args:
        path: A ``.json`` file (one document), a ``.jsonl``/``.ndjson`` file (one document per
            line), or a ``.gz`` of either.
        limits: Bounds on what one file may hold.
        skip_bad_lines: Read on past a JSON Lines line that is not JSON or is too long: it is
            yielded as a :class:`BadLine` (replay quarantines it) instead of raising, and its
            depth and size are left to ``read_payload``. A whole-file document still raises.

    Yields:
        ``("file.json", doc)`` for a single-document file, ``("file.jsonl:12", doc)`` per line.

    Raises:
        SourceFormatError: ``source="json"``, ``path="<file>:<line>"``: invalid JSON or UTF-8, a
            truncated gzip stream, a document, line, line count or decompressed size over its
            limit, or a path that is not a regular file.
        OSError: The file cannot be opened.

    Example:
        >>> from pathlib import Path
        >>> import tempfile
        >>> p = Path(tempfile.mkdtemp()) / "chat.jsonl"
        >>> _ = p.write_text('{"role": "user", "content": "hi"}\n\n[1]\n')
        >>> [loc.rsplit("/", 1)[-1] for loc, _ in iter_documents(p)]
        ['chat.jsonl:1', 'chat.jsonl:3']
    """
    path = Path(path)
    name = str(path)
    inner = path.stem if path.suffix.lower() == ".gz" else path.name
    by_line = inner.lower().endswith(_LINE_SUFFIXES)
    with open_regular(path) as handle:
        try:
            if by_line:
                yield from _lines(handle, name, limits, skip_bad_lines)
            else:
                cap = min(limits.max_line_bytes, limits.max_file_bytes)
                data = handle.read(cap + 1)
                if len(data) > cap:
                    raise SourceFormatError("json", f"{name}:1", f"document larger than {cap} bytes")
                yield name, _parse(data, name, 1, relative=True)
        except (EOFError, gzip.BadGzipFile, zlib.error) as exc:
            raise SourceFormatError("json", f"{name}:1", f"corrupt gzip data: {exc}") from None


def _lines(handle: IO[bytes], name: str, limits: ReadLimits, skip_bad: bool) -> Iterator[tuple[str, Any]]:
    """The one JSON Lines reader: raise at the first bad line, or yield it as a :class:`BadLine`."""
    budget = LineBudget(name, limits)
    cap = limits.max_line_bytes
    lineno = 0
    try:
        while line := handle.readline(cap + 1):
            budget.take(line)
            lineno = budget.lines
            locator = f"{name}:{lineno}"
            if len(line) > cap and not line.endswith(b"\n"):
                reason = f"line longer than {cap} bytes"
                if not skip_bad:
                    raise SourceFormatError("json", locator, reason)
                while (rest := handle.readline(cap + 1)) and not rest.endswith(b"\n"):
                    budget.take(rest, continued=True)  # skip the overlong line, within the budget
                yield (
                    locator,
                    BadLine(
                        _clip(line.decode("utf-8", "replace")), SourceFormatError("json", locator, reason)
                    ),
                )
            elif not line.strip():
                continue
            elif not skip_bad:
                yield locator, _parse(line, name, lineno)
            else:
                try:
                    # Depth and size are checked once, by read_payload.
                    yield locator, parse_json_text("json", line, "$", check=False)
                except SourceFormatError as exc:
                    error = SourceFormatError("json", locator, exc.reason)
                    yield locator, BadLine(line.decode("utf-8", "replace").rstrip("\r\n"), error)
    except (EOFError, gzip.BadGzipFile, zlib.error) as exc:
        if not skip_bad:
            raise
        raise SourceFormatError("json", f"{name}:{lineno + 1}", f"corrupt gzip data: {exc}") from None


def _clip(text: str, limit: int = 100_000) -> str:
    """The JSON form of an overlong line, cut to ``limit`` characters (kept as a dead letter)."""
    quoted = json.dumps(text, ensure_ascii=False)
    return quoted if len(quoted) <= limit else quoted[:limit] + "…"


def _parse(data: bytes, name: str, lineno: int, *, relative: bool = False) -> Any:
    try:
        return parse_json_text("json", data, "$")
    except SourceFormatError as exc:
        line = lineno
        reason = exc.reason
        # In a whole-file document the decoder's line number is the file's line number.
        if relative and reason.startswith("invalid JSON at line "):
            try:
                line = lineno - 1 + int(reason.split()[4])
            except (IndexError, ValueError):
                line = lineno
        raise SourceFormatError("json", f"{name}:{line}", reason) from None
