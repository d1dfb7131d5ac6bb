"""A multi-line query searched by meaning line by line: each line's nearest turns, fused by rank.

One vector for a multi-line query (a dialogue's user lines, a call start's recent context) is a
blur of its lines' meanings: the line that names the topic ("I'm going to perform a magic trick
at the party!") is diluted by the ones that do not ("By the way, what should I wear?"). The
whole query keeps its vector, and each of its last :data:`LINE_VECTORS` lines gets one too; each
vector finds its nearest turns, and a turn's dense score is the reciprocal-rank fusion of its
ranks in those lists (:func:`fuse_line_ranks`). A one-line query is searched as before: one
vector, its cosines.

Measured on MADial-Bench's chats load (each past event a dated user message) with the offline
model, the English even half tuned on (``benchmarks/README.md``, issue 23, seventh session):
the whole query and its last 4 lines, fused by RRF, against the whole query alone. Fusing the
lines' raw cosines by their maximum did no better than the whole query; 2 or 8 lines did no
better than 4.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

__all__ = ["LINE_RRF_K", "LINE_VECTORS", "fuse_line_ranks", "query_lines"]

#: Lines of a multi-line query that get a vector of their own (the newest ones).
LINE_VECTORS = 4
#: The reciprocal-rank fusion constant over the vectors' lists (Cormack et al.'s 60).
LINE_RRF_K = 60


def query_lines(query: str, most: int = LINE_VECTORS) -> list[str]:
    r"""The last ``most`` distinct non-empty lines of ``query``, or ``[]`` for a one-line query.

    Whitespace inside a line is collapsed (the vectors are of the words, not the layout).

    Example:
        >>> query_lines("I passed my driving test!\n\n  What should I   do next?")
        ['I passed my driving test!', 'What should I do next?']
        >>> query_lines("just one line")
        []
        >>> query_lines("我的猫生病了\n怎么办？\n怎么办？")
        ['我的猫生病了', '怎么办？']
    """
    lines = list(dict.fromkeys(" ".join(line.split()) for line in query.splitlines()))
    lines = [line for line in lines if line]
    if len(lines) < 2 or most <= 0:
        return []
    return lines[-most:]


def fuse_line_ranks(lists: Sequence[Mapping[int, float]], k: int = LINE_RRF_K) -> dict[int, float]:
    """One dense score per turn: the sum of ``1 / (k + rank)`` over the lists that found it.

    Each list maps a turn's seq to its cosine to one of the query's vectors; rank 0 is the
    nearest in that list (ties by the smaller seq). The scores are comparable across turns only
    (the block's calibrated sum rescales them, as it does cosines); the result does not depend
    on the order of the lists or of their entries.

    Example:
        >>> fused = fuse_line_ranks([{1: 0.9, 2: 0.8}, {2: 0.7, 3: 0.6}])
        >>> sorted(fused, key=fused.get, reverse=True)  # 2 is near both vectors
        [2, 1, 3]
    """
    out: dict[int, float] = {}
    for cosines in lists:
        order = sorted(cosines, key=lambda seq: (-cosines[seq], seq))
        for rank, seq in enumerate(order):
            out[seq] = out.get(seq, 0.0) + 1.0 / (k + rank)
    return out
