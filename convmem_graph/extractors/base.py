"""Interfaces of fact extractors and summarizers; implementations live beside this module."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol, runtime_checkable

from convmem_graph.models import (
    ExtractionResult,
    Fragment,
    Message,
    Summary,
    VariableSpec,
    VariableValue,
)
from convmem_graph.tokens import TokenCounter

__all__ = ["Extractor", "Summarizer"]


@runtime_checkable
class Extractor(Protocol):
    """Turns a batch of new messages into fragment candidates (and optionally variable values).

    Implementations must be deterministic for the same input where they can be, must never return
    facts from assistant turns, and must raise :class:`convmem_graph.errors.ExtractionError` (never
    lose the batch) when they cannot produce a result.
    """

    name: str

    def extract(
        self,
        messages: Sequence[Message],
        existing: Sequence[Fragment],
        specs: Sequence[VariableSpec],
        *,
        now_ms: int,
    ) -> ExtractionResult:
        """Extract candidates from ``messages`` (both roles, in time order; context matters)."""
        ...


@runtime_checkable
class Summarizer(Protocol):
    """Folds a previous summary and new messages into a new summary within a token budget."""

    name: str

    def summarize(
        self,
        previous: Summary | None,
        messages: Sequence[Message],
        variables: Mapping[str, VariableValue],
        fragments: Sequence[Fragment],
        *,
        budget_tokens: int,
        counter: TokenCounter,
        now_ms: int,
    ) -> str:
        """Return the new summary text; its ``counter`` count must not exceed ``budget_tokens``."""
        ...
