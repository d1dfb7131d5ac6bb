"""convmem_graph: conversational memory for voice and text agents as a LangGraph state machine."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from convmem_graph._lazy import lazy_exports
from convmem_graph.config import MemoryConfig
from convmem_graph.errors import (
    ConvMemError,
    ExtractionError,
    MemoryNotFoundError,
    NotFoundError,
    SourceFormatError,
    UnknownVariableError,
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

if TYPE_CHECKING:
    from convmem_graph.graph import build_memory_graph
    from convmem_graph.memory import ConvMemory
    from convmem_graph.runner import Lifecycle, RunResult
    from convmem_graph.state import MemoryContext, MemoryState, RawInput
    from convmem_graph.store import MemoryStore

# The lifecycle pulls in LangGraph and LangChain: import it on first use, not with the package.
_LAZY = {
    "ConvMemory": "convmem_graph.memory",
    "MemoryStore": "convmem_graph.store",
    "build_memory_graph": "convmem_graph.graph",
    "Lifecycle": "convmem_graph.runner",
    "RunResult": "convmem_graph.runner",
    "MemoryContext": "convmem_graph.state",
    "MemoryState": "convmem_graph.state",
    "RawInput": "convmem_graph.state",
}


__getattr__ = lazy_exports(__name__, _LAZY)


__all__ = [
    "ConvMemError",
    "ConvMemory",
    "Lifecycle",
    "MemoryContext",
    "MemoryState",
    "RawInput",
    "RunResult",
    "ExtractionError",
    "Fragment",
    "FragmentCandidate",
    "FragmentOp",
    "MemoryConfig",
    "MemoryNotFoundError",
    "MemoryStore",
    "MemorySnapshot",
    "Message",
    "NotFoundError",
    "ReadResult",
    "SkippedItem",
    "SourceFormatError",
    "Summary",
    "UnknownVariableError",
    "VariableSpec",
    "VariableValue",
    "build_memory_graph",
    "count_tokens",
]

__version__ = "0.1.0"

# A library never configures logging; applications do.
logging.getLogger(__name__).addHandler(logging.NullHandler())
