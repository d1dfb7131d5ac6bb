"""Quoting the part of a stored turn that matches: its best sentence or clause, not the whole turn.

A long turn quoted whole costs as much as three short ones, and the detail a question asks for is
usually one sentence of it ("I've been painting a lot. Last month I finished a lake sunrise for my
mom, she loved it. Anyway, how's work?"). :func:`clause_excerpt` keeps the sentence that holds the
most query weight and grows it with its neighbours (the next one first: an answer tends to follow
its topic) while the quote stays within a small cap; a single sentence over the cap is cut to its
best clause the same way. Every cut is marked with an ellipsis so a reader knows the turn went on.

Both scripts are handled: sentences end at ``。！？；…`` or ``. ! ? ;``, clauses at ``，、：`` or
``, : —`` and an English dash.

:func:`question_clause` gives the question a turn asks (its last sentence ending in ``?``/``？``),
for quoting a found answer together with the question it answers.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from convmem_graph.tokens import TokenCounter

__all__ = ["ELLIPSIS", "clause_excerpt", "question_clause", "split_units"]

ELLIPSIS = "…"
_SENTENCE_END = re.compile(r"[。！？!?；;…]+|\.(?=\s|$)")
_CLAUSE_END = re.compile(r"[，,、：:]|\s[—–-]+\s|—")
_QUESTION = re.compile(r"[?？]\s*$")


def split_units(text: str, pattern: re.Pattern[str] = _SENTENCE_END) -> list[str]:
    """The non-blank pieces of ``text`` cut after each match of ``pattern``, spacing kept.

    Joined back in order they give the text as written (minus blank pieces).

    Example:
        >>> split_units("I ran. Then I swam! 然后休息。")
        ['I ran.', ' Then I swam!', ' 然后休息。']
    """
    out: list[str] = []
    pos = 0
    for m in pattern.finditer(text):
        out.append(text[pos : m.end()])
        pos = m.end()
    out.append(text[pos:])
    return [x for x in out if x.strip()]


def _grow(
    units: list[str], scores: list[float], cap: int, counter: TokenCounter
) -> tuple[int, int, str] | None:
    """The run of units around the best-scoring one that fits ``cap``, or ``None`` if none fits."""
    best = max(range(len(units)), key=lambda i: (scores[i], -i))
    lo = hi = best
    body = units[best].strip()
    if counter(body) + 1 > cap:
        return None
    while True:
        grown = False
        # The next unit first: what follows a matched sentence is usually its detail.
        for j in (hi + 1, lo - 1):
            if 0 <= j < len(units):
                trial = "".join(units[min(lo, j) : max(hi, j) + 1]).strip()
                if counter(trial) + 1 <= cap:
                    lo, hi, body, grown = min(lo, j), max(hi, j), trial, True
        if not grown:
            return lo, hi, body


def clause_excerpt(text: str, score: Callable[[str], float], cap: int, counter: TokenCounter) -> str:
    """The sentences (or clauses) of ``text`` around its best match, within ``cap`` tokens.

    Args:
        text: The turn as said.
        score: Relevance of a piece of text to the query (0.0 when it holds no query term).
        cap: Tokens the excerpt may cost (ellipses included), as counted by ``counter``.
        counter: The block's token counter.

    Returns:
        ``text`` itself when it fits, else the best run of sentences with ``…`` where the turn
        was cut. When no sentence matches, the turn's start: a reply answers in its first words.

    Example:
        >>> from convmem_graph.tokens import count_tokens
        >>> words = {"sunrise"}
        >>> score = lambda t: float(sum(w in t for w in words))
        >>> said = ("Work has been crazy lately, so many meetings every single day. "
        ...         "I painted a lake sunrise last month. My mom loved it so much!")
        >>> clause_excerpt(said, score, 16, count_tokens)
        '…I painted a lake sunrise last month.…'
    """
    if counter(text) <= cap:
        return text
    sentences = split_units(text)
    if not sentences:
        return text
    scores = [score(s) for s in sentences]
    run = _grow(sentences, scores, cap - 1, counter)
    if run is not None:
        lo, hi, body = run
        return (ELLIPSIS if lo > 0 else "") + body + (ELLIPSIS if hi < len(sentences) - 1 else "")
    # The best sentence alone is over the cap: its best clauses.
    best = max(range(len(sentences)), key=lambda i: (scores[i], -i))
    clauses = split_units(sentences[best], _CLAUSE_END)
    clause_scores = [score(c) for c in clauses]
    clause_run = _grow(clauses, clause_scores, cap - 2, counter) if clauses else None
    if clause_run is None:
        # One clause over the cap: the longest start of it that fits.
        top = max(range(len(clauses)), key=lambda i: (clause_scores[i], -i)) if clauses else 0
        whole = (clauses[top] if clauses else sentences[best]).strip()
        lead = ELLIPSIS if best > 0 or top > 0 else ""
        return lead + _head(whole, cap - counter(lead + ELLIPSIS), counter) + ELLIPSIS
    lo, hi, body = clause_run
    first = best == 0 and lo == 0
    last = best == len(sentences) - 1 and hi == len(clauses) - 1
    return ("" if first else ELLIPSIS) + body.rstrip(" ,，、") + ("" if last else ELLIPSIS)


def _head(text: str, cap: int, counter: TokenCounter) -> str:
    """The longest start of ``text`` within ``cap`` tokens, cut after a word where there are spaces."""
    lo, hi = 0, len(text)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if counter(text[:mid]) <= cap:
            lo = mid
        else:
            hi = mid - 1
    head = text[:lo]
    if lo < len(text) and " " in head and not text[lo].isspace():
        head = head.rsplit(" ", 1)[0]
    return head.rstrip(" ,，、")


def question_clause(text: str) -> str | None:
    """The last question ``text`` asks (its last sentence ending in ``?``/``？``), or ``None``.

    Example:
        >>> question_clause("That's great news! Which one is your favourite?")
        'Which one is your favourite?'
        >>> question_clause("你最近在忙什么？我在学画画。") is None
        True
        >>> question_clause("挺好的。你最近在忙什么？")
        '你最近在忙什么？'
    """
    sentences = split_units(text)
    if not sentences or not _QUESTION.search(sentences[-1]):
        return None
    return sentences[-1].strip()
