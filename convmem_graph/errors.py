"""Exceptions raised by convmem_graph.

Every error a user can cause carries enough context to fix the input without reading a traceback:
the source format and the JSON path of the offending field for input errors, the memory id for
lookups.
"""

from __future__ import annotations

__all__ = [
    "ConvMemError",
    "ExtractionError",
    "MemoryNotFoundError",
    "NotFoundError",
    "SourceFormatError",
]


class ConvMemError(Exception):
    """Base class of every error raised on purpose by convmem_graph."""


class SourceFormatError(ConvMemError, ValueError):
    """A payload does not match the source format it was read as.

    Attributes:
        source: The source format name (``agora``, ``tencent_im``, ``trtc``, ``openai`` ...).
        path: JSON path of the bad field, e.g. ``MsgList[3].MsgBody[0].MsgContent.Data``; ``$`` is
            the document itself.
        reason: What is wrong with that field.
    """

    def __init__(self, source: str, path: str, reason: str) -> None:
        self.source = source
        self.path = path or "$"
        self.reason = reason
        super().__init__(f"{source}: {self.path}: {reason}")


class NotFoundError(ConvMemError, KeyError):
    """A requested object (fragment, variable) does not exist in the given memory."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else "not found"


class MemoryNotFoundError(NotFoundError):
    """The memory id is unknown to the store."""


class ExtractionError(ConvMemError):
    """A model-backed extractor or summarizer failed after its retries.

    The batch that was being processed stays stored; the next run retries it.
    """
