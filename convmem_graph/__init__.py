"""convmem_graph: conversational memory for voice and text agents as a LangGraph state machine."""

from __future__ import annotations

import logging

from convmem_graph.config import MemoryConfig
from convmem_graph.errors import (
    ConvMemError,
    ExtractionError,
    MemoryNotFoundError,
    NotFoundError,
    SourceFormatError,
)
from convmem_graph.models import (
    Fragment,
    FragmentCandidate,
    FragmentOp,
    MemorySnapshot,
    Message,
    ReadResult,
    SkippedItem,
    Summary,
    VariableSpec,
    VariableValue,
)
from convmem_graph.tokens import count_tokens

__all__ = [
    "ConvMemError",
    "ExtractionError",
    "Fragment",
    "FragmentCandidate",
    "FragmentOp",
    "MemoryConfig",
    "MemoryNotFoundError",
    "MemorySnapshot",
    "Message",
    "NotFoundError",
    "ReadResult",
    "SkippedItem",
    "SourceFormatError",
    "Summary",
    "VariableSpec",
    "VariableValue",
    "count_tokens",
]

__version__ = "0.1.0"

# A library never configures logging; applications do.
logging.getLogger(__name__).addHandler(logging.NullHandler())
