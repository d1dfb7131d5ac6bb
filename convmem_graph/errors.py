"""Exceptions raised by convmem_graph.

Every error a user can cause carries enough context to fix the input without reading a traceback:
the source format and the JSON path of the offending field for input errors, the memory id for
lookups.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "ConvMemError",
    "DeltaChannelPruneError",
    "ExtractionError",
    "InvalidIdentifierError",
    "MemoryExistsError",
    "MemoryNotFoundError",
    "NotFoundError",
    "SourceFormatError",
    "UnknownVariableError",
    "describe_validation_error",
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


class InvalidIdentifierError(ConvMemError, ValueError):
    """An identifier (memory id, message or fragment id, variable name, key, category) is invalid.

    Attributes:
        field: The field or JSON path holding the identifier.
        reason: What is wrong with it (the rules are in ``convmem_graph._ids``).
    """

    def __init__(self, field: str, reason: str) -> None:
        self.field = field
        self.reason = reason
        super().__init__(f"{field}: {reason}")


class UnknownVariableError(ConvMemError, ValueError):
    """A variable name is not in the memory's schema (the schema is the list of fields).

    Attributes:
        memory_id: The memory.
        name: The name asked for.
        fields: The names the schema has, in order.
    """

    def __init__(self, memory_id: str, name: str, fields: list[str]) -> None:
        self.memory_id = memory_id
        self.name = name
        self.fields = fields
        super().__init__(
            f"variable {name!r} is not in the schema of memory {memory_id!r} "
            f"(fields: {', '.join(fields)}); define it first (define_variables / `convmem variables define`)"
        )


class NotFoundError(ConvMemError, KeyError):
    """A requested object (fragment, variable) does not exist in the given memory."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else "not found"


class MemoryNotFoundError(NotFoundError):
    """The memory id is unknown to the store."""


class MemoryExistsError(ConvMemError):
    """A memory of that id exists where a new one was to be written (an import without ``replace``).

    Attributes:
        memory_id: The id that is taken.
    """

    def __init__(self, memory_id: str, hint: str = "pass replace=True to overwrite it") -> None:
        self.memory_id = memory_id
        super().__init__(f"memory {memory_id!r} exists; {hint}")


class ExtractionError(ConvMemError):
    """A model-backed extractor or summarizer failed after its retries.

    The batch that was being processed stays stored; the next run retries it.
    """


class DeltaChannelPruneError(ConvMemError, NotImplementedError):
    """A checkpoint thread uses a LangGraph ``DeltaChannel``, so its older checkpoints cannot be pruned.

    A delta channel stores each step as a change to the checkpoints before it: deleting those would
    corrupt the thread. This is a deliberate refusal, not missing code; the thread keeps its history
    (``convmem delete`` still drops it whole).
    """

    def __init__(self, thread_id: str) -> None:
        self.thread_id = thread_id
        super().__init__(f"thread {thread_id!r} uses a DeltaChannel: its history cannot be pruned")


def describe_validation_error(exc: Any, prefix: str = "") -> str:
    """Return a one-line account of a pydantic ``ValidationError`` naming field paths only.

    pydantic's own text echoes the offending input (``input_value={'APIKey': 'sk-...'}``), which
    can be a secret; this names each field path and pydantic's reason, never a value.

    Args:
        exc: A ``pydantic.ValidationError``.
        prefix: Prepended to each field path (e.g. ``llm``).

    Example:
        >>> from pydantic import BaseModel
        >>> class Opts(BaseModel):
        ...     temperature: float
        >>> try:
        ...     Opts(temperature="sk-secret")
        ... except ValueError as exc:
        ...     describe_validation_error(exc, "options")
        'options.temperature: Input should be a valid number, unable to parse string as a number'
    """
    parts = []
    for error in exc.errors(include_input=False, include_url=False, include_context=False):
        loc = ".".join(str(p) for p in error.get("loc", ()))
        path = ".".join(p for p in (prefix, loc) if p) or "$"
        parts.append(f"{path}: {error.get('msg', 'invalid')}")
    return "; ".join(parts[:5]) + (f"; and {len(parts) - 5} more" if len(parts) > 5 else "")
