"""Rows of the store's tables as models, with no SQLAlchemy import (the call-start reader uses them too)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from convmem_graph.models import Message

__all__ = ["MESSAGE_COLUMN_NAMES", "row_to_message"]

#: The ``cm_messages`` columns read back into a Message (everything but the internal hash).
MESSAGE_COLUMN_NAMES = (
    "seq",
    "memory_id",
    "id",
    "role",
    "content",
    "channel",
    "source",
    "timestamp_ms",
    "turn_id",
    "round_id",
    "speaker_id",
    "partial",
    "interrupted",
    "original",
    "metadata",
)


def row_to_message(row: Sequence[Any]) -> Message:
    """Build a Message from a row selected with :data:`MESSAGE_COLUMN_NAMES` (the seq is ignored)."""
    # Positional unpacking: attribute access on Row objects dominated bulk reads.
    (
        _,
        memory_id,
        mid,
        role,
        content,
        channel,
        source,
        ts,
        turn_id,
        round_id,
        speaker_id,
        partial,
        interrupted,
        original,
        metadata,
    ) = row
    # Validated construction: pydantic-core's validator is faster than model_construct's
    # Python-level path (measured with pydantic 2.13), and a bad row fails here, not later.
    return Message(
        id=mid,
        memory_id=memory_id,
        role=role,
        content=content,
        channel=channel,
        source=source,
        timestamp_ms=ts,
        turn_id=turn_id,
        round_id=round_id,
        speaker_id=speaker_id,
        partial=bool(partial),
        interrupted=bool(interrupted),
        original=original,
        metadata=metadata or {},
    )
