"""Fusing the lexical and the dense (by meaning) scores of candidate turns onto one scale.

The block ranks facts, variables, summary sentences and quoted turns by one BM25 score. Turns
found by meaning get a second score, a cosine; fusing the two must leave the result on the BM25
scale, so that a quoted turn still competes fairly with a fact scored by BM25 alone:

- ``rrf`` (reciprocal-rank fusion, k = 60, the constant of Cormack et al. that Mem0 and Zep use):
  each turn gets ``1/(k + lexical rank) + 1/(k + dense rank)``; the fused order is then mapped
  onto the BM25 scale by giving the n-th fused turn the n-th best lexical score (so the scores of
  facts and turns stay comparable and the best turn is worth what the best lexical turn was).
- ``sum`` (calibrated sum): BM25 plus the cosine rescaled to [0, 1] over the candidates (0 at the
  median cosine, 1 at the best) times :data:`DENSE_WEIGHT` times the best BM25 score.

Measured on LoCoMo (conv-26, its first 80 questions, with the offline model; a small sample, and
the weight was picked on it among 1.0 and 0.4, so not held out): lexical only 17.5 / 27.5 %
answer-in-context at 300 / 1,000 tokens; RRF 10.0 / 20.0; sum with weight 1.0 12.5 / 22.5; sum
with 0.4 13.8 / 28.8. Meaning helps at the larger budget only, and only as a minor voice. On all
10 conversations (2026-12-06) no turn fusion tried beat lexical by more than noise on the held-out
half, RRF and heavier sums fell below it: meaning rarely finds the evidence words miss there.
With turns embedded in context (the turn before, date and speaker; 2026-12-07) the sum at 0.4
is +1.0 / +1.4 points over lexical at 300 / 1,000 tokens on all 10 (+0.5 / +1.1 on the held-out
half); with date and speaker alone, 0.2 and 0.8 did no better than 0.4 on both halves.

A query of several lines (a conversation's lines: the call start's context query, MADial-Bench's
"all user lines" and "whole context" queries) gives its turns' cosines :data:`DENSE_WEIGHT_LINES`
(1.0) instead (:func:`dense_weight`). Its words are spread over many topics, so many turns match a
few of them and the lexical order is flat; the query's one vector ranks by the whole of it.
Chosen on MADial-Bench's even half among 0.4 / 0.7 / 1.0 / 1.5 (1.5 cost zh 4.6 points), held out
on the odd half (``benchmarks/README.md``, ninth session); a one-line query (a question) keeps
0.4, which LoCoMo's questions preferred to 0.55 / 0.7 / 1.0 at 300 tokens.

A query that is a labelled transcript (every line ``Name: text``, the assistant's lines among
them, as MADial-Bench's "whole context" query) is embedded as its other speakers' lines without
their labels (:func:`meaning_query`); its words are still searched whole. The assistant's
lines answer the user: their vector pulls towards what the assistant said just now, not towards
what the user said weeks ago, which is what a memory holds. Chosen on MADial-Bench's even
halves (en +2.4, zh below), held out on the odd halves (``benchmarks/README.md``, tenth session).

The block's facts are fused by the same calibrated sum with weight 1.0 (``memory_block``): on
MADial-Bench, whose links are by theme rather than words, that lifts recall@300 by 7-12 points
over lexical, held-out half included (``benchmarks/README.md``).
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Mapping
from typing import Literal

__all__ = [
    "ASSISTANT_LABELS",
    "DENSE_WEIGHT",
    "DENSE_WEIGHT_LINES",
    "RRF_K",
    "dense_weight",
    "fuse",
    "meaning_query",
]

RRF_K = 60
#: Share of the best BM25 score the best cosine adds in the calibrated sum.
DENSE_WEIGHT = 0.4
#: The same share for a query of two or more non-blank lines.
DENSE_WEIGHT_LINES = 1.0


def dense_weight(query: str | None) -> float:
    r"""The calibrated sum's weight of the turns' cosines for ``query``.

    Example:
        >>> dense_weight("What did Caroline paint?") == DENSE_WEIGHT
        True
        >>> dense_weight("我下周要去成都。\n\n那边冷吗？") == DENSE_WEIGHT_LINES
        True
    """
    lines = 0
    for line in (query or "").splitlines():
        if line.strip():
            lines += 1
            if lines > 1:
                return DENSE_WEIGHT_LINES
    return DENSE_WEIGHT


#: Speaker labels (lowercased) of the assistant's lines in a transcript query.
ASSISTANT_LABELS = frozenset({"assistant", "ai", "bot", "助手", "助理", "小助手", "智能助手"})
# "Name: text" with a short name (at most three words, no sentence punctuation); both colons.
_LABELLED = re.compile(r"^\s*([^\s:：,.!?，。！？][^:：,.!?，。！？\n]{0,39}?)\s*[:：]\s*(\S.*)$")


def meaning_query(query: str) -> str:
    r"""The text embedded for ``query``: a transcript's lines by the user, else ``query`` itself.

    A transcript is two or more non-blank lines, each ``Name: text`` with a name of at most
    three words, some by the assistant (:data:`ASSISTANT_LABELS`) and some not. Its vector is
    that of the lines not by the assistant, one per line, without their names. Any other query
    (a question, plain lines, a call start's context query) is embedded as it is.

    Example:
        >>> meaning_query("Bart: I do a magic trick on Friday!\nAssistant: Great!\nBart: What to wear?")
        'I do a magic trick on Friday!\nWhat to wear?'
        >>> meaning_query("What did Caroline paint?")
        'What did Caroline paint?'
    """
    if "\n" not in query:
        return query  # one line: never a transcript (the common case, no regex)
    kept: list[str] = []
    assistant = 0
    for line in query.splitlines():
        if not line.strip():
            continue
        m = _LABELLED.match(line)
        if m is None or len(m.group(1).split()) > 3:
            return query
        if m.group(1).strip().lower() in ASSISTANT_LABELS:
            assistant += 1
        else:
            kept.append(m.group(2).strip())
    return "\n".join(kept) if assistant and kept else query


def _ranks(scores: Mapping[int, float]) -> dict[int, int]:
    order = sorted((k for k, v in scores.items() if v > 0), key=lambda k: (-scores[k], -k))
    return {k: i for i, k in enumerate(order)}


def fuse(
    lexical: Mapping[int, float],
    dense: Mapping[int, float],
    *,
    method: Literal["rrf", "sum"] = "rrf",
    weight: float = DENSE_WEIGHT,
) -> dict[int, float]:
    """Fused scores of every candidate in ``lexical`` or ``dense``, on the lexical (BM25) scale.

    Args:
        lexical: Candidate id -> BM25 score (0 when it holds no query term).
        dense: Candidate id -> cosine similarity to the query (the dense candidates only).
        method: ``rrf`` or ``sum``; see the module docstring.
        weight: The calibrated sum's share of the best BM25 score the best cosine adds.

    Returns:
        Candidate id -> fused score (> 0 for every candidate either side found).

    Example:
        >>> fused = fuse({1: 3.0, 2: 1.0}, {3: 0.9, 2: 0.8, 1: 0.1})
        >>> sorted(fused, key=fused.get, reverse=True)  # 1: ranks 0 and 2; 2: ranks 1 and 1
        [1, 2, 3]
    """
    if not dense:
        return dict(lexical)
    top_lex = max((v for v in lexical.values() if v > 0), default=1.0)
    ids = set(lexical) | set(dense)
    if method == "sum":
        cosines = sorted(dense.values())
        floor, best = statistics.median(cosines), cosines[-1]
        span = best - floor
        return {
            i: lexical.get(i, 0.0)
            + (weight * top_lex * max(0.0, (dense[i] - floor) / span) if i in dense and span > 0 else 0.0)
            for i in ids
        }
    lex_rank, dense_rank = _ranks(lexical), _ranks({k: v + 2.0 for k, v in dense.items()})
    rrf = {
        i: (1.0 / (RRF_K + lex_rank[i]) if i in lex_rank else 0.0)
        + (1.0 / (RRF_K + dense_rank[i]) if i in dense_rank else 0.0)
        for i in ids
    }
    order = sorted(ids, key=lambda i: (-rrf[i], -i))
    # The n-th fused turn takes the n-th best lexical score: the BM25 scale, in the fused order.
    levels = sorted((v for v in lexical.values() if v > 0), reverse=True)
    out: dict[int, float] = {}
    for n, i in enumerate(order):
        if rrf[i] <= 0:
            out[i] = 0.0
        elif n < len(levels):
            out[i] = levels[n]
        else:  # more fused candidates than lexical ones: below the weakest, in fused order
            weakest = levels[-1] if levels else top_lex
            out[i] = weakest * (1.0 - (n - len(levels) + 1) / (len(order) + 1))
    return out
