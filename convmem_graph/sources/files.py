"""Reading JSON documents from files: ``.json``, ``.jsonl``/``.ndjson``, and ``.gz`` of either.

JSON Lines files are streamed line by line (never read whole); blank lines are ignored. A file
with another extension is read as one JSON document.
"""

from __future__ import annotations

import gzip
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from convmem_graph.errors import SourceFormatError
from convmem_graph.sources._common import MAX_DOCUMENT_BYTES, parse_json_text

__all__ = ["iter_documents"]

_LINE_SUFFIXES = (".jsonl", ".ndjson")


def _open(path: Path) -> IO[bytes]:
    if path.suffix.lower() == ".gz":
        return gzip.GzipFile(path, "rb")  # type: ignore[return-value]  # a binary file object
    return path.open("rb")


def iter_documents(path: str | Path) -> Iterator[tuple[str, Any]]:
    r"""Yield ``(locator, document)`` for every JSON document in a file.

    Args:
        path: A ``.json`` file (one document), a ``.jsonl``/``.ndjson`` file (one document per
            line), or a ``.gz`` of either.

    Yields:
        ``("file.json", doc)`` for a single-document file, ``("file.jsonl:12", doc)`` per line.

    Raises:
        SourceFormatError: ``source="json"``, ``path="<file>:<line>"``: invalid JSON or UTF-8, a
            truncated gzip stream, or a document larger than the size limit.
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
    with _open(path) as handle:
        try:
            if by_line:
                yield from _lines(handle, name)
            else:
                data = handle.read(MAX_DOCUMENT_BYTES + 1)
                if len(data) > MAX_DOCUMENT_BYTES:
                    raise SourceFormatError(
                        "json", f"{name}:1", f"document larger than {MAX_DOCUMENT_BYTES} bytes"
                    )
                yield name, _parse(data, name, 1, relative=True)
        except (EOFError, gzip.BadGzipFile, zlib.error) as exc:
            raise SourceFormatError("json", f"{name}:1", f"corrupt gzip data: {exc}") from None


def _lines(handle: IO[bytes], name: str) -> Iterator[tuple[str, Any]]:
    lineno = 0
    while True:
        line = handle.readline(MAX_DOCUMENT_BYTES + 1)
        if not line:
            return
        lineno += 1
        if len(line) > MAX_DOCUMENT_BYTES and not line.endswith(b"\n"):
            raise SourceFormatError(
                "json", f"{name}:{lineno}", f"line longer than {MAX_DOCUMENT_BYTES} bytes"
            )
        if not line.strip():
            continue
        yield f"{name}:{lineno}", _parse(line, name, lineno)


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
