"""A plain BM25 (Okapi, k1 = 1.5, b = 0.75) and greedy packing of ranked items into a token budget."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Sequence

from convmem_graph.tokens import count_tokens

__all__ = ["BM25", "pack"]


class BM25:
    """Okapi BM25 over pre-tokenized documents.

    IDF is ``ln(1 + (N - df + 0.5) / (df + 0.5))`` (never negative); a query term repeated in the
    query counts once.

    Example:
        >>> index = BM25([["red", "apple"], ["green", "pear"], ["red", "car", "red"]])
        >>> index.top(["red", "apple"], 2)
        [0, 2]
    """

    def __init__(self, documents: Sequence[Sequence[str]], *, k1: float = 1.5, b: float = 0.75) -> None:
        self.k1 = k1
        self.b = b
        self.size = len(documents)
        self._lengths = [len(d) for d in documents]
        self._avg = (sum(self._lengths) / self.size) if self.size else 0.0
        # term -> [(doc index, term frequency)]
        self._postings: dict[str, list[tuple[int, int]]] = {}
        for i, doc in enumerate(documents):
            for term, tf in Counter(doc).items():
                self._postings.setdefault(term, []).append((i, tf))

    def idf(self, term: str) -> float:
        """Inverse document frequency of ``term`` (0 for an unknown term)."""
        df = len(self._postings.get(term, ()))
        if not df:
            return 0.0
        return math.log(1.0 + (self.size - df + 0.5) / (df + 0.5))

    def scores(self, query: Sequence[str]) -> dict[int, float]:
        """Scores of the documents sharing at least one term with ``query``."""
        out: dict[int, float] = {}
        avg = self._avg or 1.0
        for term in dict.fromkeys(query):
            postings = self._postings.get(term)
            if not postings:
                continue
            idf = self.idf(term)
            for i, tf in postings:
                norm = self.k1 * (1.0 - self.b + self.b * self._lengths[i] / avg)
                out[i] = out.get(i, 0.0) + idf * tf * (self.k1 + 1.0) / (tf + norm)
        return out

    def top(self, query: Sequence[str], n: int | None = None) -> list[int]:
        """Indices of matching documents, best first (ties: earlier document first)."""
        ranked = sorted(self.scores(query).items(), key=lambda kv: (-kv[1], kv[0]))
        return [i for i, _ in (ranked if n is None else ranked[:n])]


def pack(
    items: Sequence[str],
    order: Sequence[int],
    budget: int,
    *,
    counter: Callable[[str], int] = count_tokens,
    chronological: bool = True,
) -> tuple[str, list[int]]:
    """Join items taken in ``order`` while the joined text stays within ``budget`` tokens.

    First fit: an item that does not fit is skipped and the next one is tried, so one long item
    does not end the packing. Items are joined by newlines, in index order when ``chronological``
    (the reading order of a conversation), else in ``order``. The whole text is counted again at
    the end, and the last item taken is dropped while it exceeds the budget (joining newlines and
    a non-additive counter can add tokens).

    Returns:
        The text and the chosen indices (in the order they are joined).

    Example:
        >>> pack(["one two", "three", "four five six"], [2, 0, 1], 5, counter=lambda s: len(s.split()))
        ('one two\\nfour five six', [0, 2])
    """
    chosen: list[int] = []
    used = 0
    for i in order:
        cost = counter(items[i])
        if used + cost <= budget:
            chosen.append(i)
            used += cost
    while True:
        ordered = sorted(chosen) if chronological else list(chosen)
        text = "\n".join(items[i] for i in ordered)
        if not chosen or counter(text) <= budget:
            return text, ordered
        chosen.pop()
