"""Normalization, tokenization and the "is it in the context" checks shared by every method.

Answer-in-context follows LoCoMo's own ``normalize_answer`` (``task_eval/evaluation.py``): lowercase,
commas and punctuation removed, the words ``a an the and`` removed, whitespace collapsed. Two
additions, applied to answers and contexts alike so no method is favoured:

- dates are rewritten to one form first (``8 May, 2023``, ``May 8th 2023`` and ``2023-05-08`` all
  become ``8 may 2023``), so a context that writes dates as ISO still matches ``May 2023`` or
  ``8 May 2023``; a relative answer (``the week before 9 June 2023``) only matches when written out;
- Unicode punctuation (``，。’``) is removed like ASCII punctuation, so Chinese text works too.

A normalized answer must occur in the normalized context on word boundaries (``7`` is not found
in ``2017``). Multi-part answers: as LoCoMo's scorer does for category 1 (multi-hop), the gold
answer is split at commas and every part must occur; other categories use the whole answer.
This is the ``strict`` check (:func:`answer_in_context`).

The ``issue`` check (:func:`answer_in_context_issue`) is the protocol issue 23 states for its
figures, written down so they can be compared: the normalized answer occurs as a phrase in the
context, as above, except for a *list* answer (one holding a comma, in any category), which is
found when at least half of its content words (the normalized answer's words minus
:data:`EN_STOPWORDS`) are words of the normalized context, anywhere. It is looser than ``strict``
for list answers only (a context naming one of two listed items, or the words of a list in
another order, counts as a hit); every other answer is judged the same by both.
"""

from __future__ import annotations

import logging
import re
import string
import unicodedata
from collections.abc import Iterable
from functools import lru_cache

__all__ = [
    "EN_STOPWORDS",
    "CHECKS",
    "answer_in_context",
    "answer_in_context_issue",
    "answer_parts",
    "canonical_dates",
    "contains",
    "en_words",
    "normalize",
    "tokenize",
]

_MONTHS = [
    "january", "february", "march", "april", "may", "june",
    "july", "august", "september", "october", "november", "december",
]  # fmt: skip
_MONTH_BY_PREFIX = {m[:3]: m for m in _MONTHS}
_MONTH_RE = (
    r"(jan(?:uary)?|feb(?:ruary)?|mar(?:ch)?|apr(?:il)?|may|june?|july?|aug(?:ust)?"
    r"|sep(?:t(?:ember)?)?|oct(?:ober)?|nov(?:ember)?|dec(?:ember)?)"
)
_DAY_MONTH_YEAR = re.compile(rf"\b(\d{{1,2}})(?:st|nd|rd|th)?\s+{_MONTH_RE}\.?,?\s+(\d{{4}})\b", re.I)
_MONTH_DAY_YEAR = re.compile(rf"\b{_MONTH_RE}\.?\s+(\d{{1,2}})(?:st|nd|rd|th)?,?\s+(\d{{4}})\b", re.I)
_ISO = re.compile(r"\b(\d{4})-(\d{1,2})-(\d{1,2})\b")
_ARTICLES = re.compile(r"\b(a|an|the|and)\b")
_ASCII_PUNCT = frozenset(string.punctuation)
# Boundaries are ASCII letters and digits only, so a CJK needle matches inside CJK text.
_BOUNDARY_BEFORE = r"(?<![a-z0-9])"
_BOUNDARY_AFTER = r"(?![a-z0-9])"

#: English stop words left out of BM25 queries and documents (a common short list).
EN_STOPWORDS = frozenset(
    """a about above after again against all am an and any are as at be because been before being
    below between both but by can could did do does doing down during each few for from further had
    has have having he her here hers herself him himself his how i if in into is it its itself just
    me more most my myself no nor not now of off on once only or other our ours ourselves out over
    own same she should so some such than that the their theirs them themselves then there these
    they this those through to too under until up very was we were what when where which while who
    whom why will with would you your yours yourself yourselves s t d ll m re ve don didn doesn isn
    wasn weren won wouldn couldn shouldn hasn haven hadn aren ain let us also""".split()
)


def _month(name: str) -> str:
    return _MONTH_BY_PREFIX[name[:3].lower()]


def canonical_dates(text: str) -> str:
    """Rewrite the dates in ``text`` to ``<day> <month> <year>`` (``2023-05-08`` -> ``8 may 2023``).

    Example:
        >>> canonical_dates("on 8 May, 2023 and May 9th 2023 and 2023-05-10")
        'on 8 may 2023 and 9 may 2023 and 10 may 2023'
    """

    def iso(m: re.Match[str]) -> str:
        year, month, day = int(m[1]), int(m[2]), int(m[3])
        if not (1 <= month <= 12 and 1 <= day <= 31):
            return m[0]
        return f"{day} {_MONTHS[month - 1]} {year}"

    text = _DAY_MONTH_YEAR.sub(lambda m: f"{int(m[1])} {_month(m[2])} {m[3]}", text)
    text = _MONTH_DAY_YEAR.sub(lambda m: f"{int(m[2])} {_month(m[1])} {m[3]}", text)
    return _ISO.sub(iso, text)


def _strip_punctuation(text: str) -> str:
    return "".join(
        ch for ch in text if ch not in _ASCII_PUNCT and not unicodedata.category(ch).startswith("P")
    )


@lru_cache(maxsize=1024)
def normalize(text: str) -> str:
    """LoCoMo's answer normalization plus date and Unicode-punctuation folding (see the module doc).

    Example:
        >>> normalize("The Sunday before 25 May, 2023!")
        'sunday before 25 may 2023'
        >>> normalize("Bart在圣诞节晚会上跳舞，感觉非常开心。")
        'bart在圣诞节晚会上跳舞感觉非常开心'
    """
    text = canonical_dates(text.replace(",", " ")).lower()
    text = _strip_punctuation(text)
    return " ".join(_ARTICLES.sub(" ", text).split())


def contains(needle: str, haystack: str) -> bool:
    """Whether normalized ``needle`` occurs in normalized ``haystack`` on word boundaries.

    Both arguments must already be normalized; an empty needle is never found.

    Example:
        >>> contains("7", "in 2017"), contains("2017", "in 2017"), contains("跳舞", "用户跳舞了")
        (False, True, True)
    """
    if not needle:
        return False
    return re.search(_BOUNDARY_BEFORE + re.escape(needle) + _BOUNDARY_AFTER, haystack) is not None


def answer_parts(answer: object, category: int) -> list[str]:
    """The normalized parts that must all be in the context: comma parts for category 1, else one.

    Example:
        >>> answer_parts("Horse, sunset, sunrise", 1), answer_parts("Psychology, counseling", 3)
        (['horse', 'sunset', 'sunrise'], ['psychology counseling'])
    """
    text = str(answer)
    pieces: Iterable[str] = text.split(",") if category == 1 else [text]
    return [p for p in (normalize(piece) for piece in pieces) if p]


def answer_in_context(answer: object, category: int, normalized_context: str) -> bool:
    """Whether every part of the gold ``answer`` occurs in the (already normalized) context.

    Example:
        >>> answer_in_context("7 May 2023", 2, normalize("[2023-05-07] Caroline: I went."))
        True
        >>> answer_in_context("Horse, sunset", 1, normalize("a horse painting"))
        False
    """
    parts = answer_parts(answer, category)
    return bool(parts) and all(contains(p, normalized_context) for p in parts)


def answer_in_context_issue(answer: object, category: int, normalized_context: str) -> bool:
    """Issue 23's check: a phrase match, or for a list answer half of its content words.

    ``category`` is accepted so both checks share one signature; this check ignores it (a list
    answer is one holding a comma, whatever its category). Content words are the normalized
    answer's words minus :data:`EN_STOPWORDS`, looked up among the normalized context's words
    (so both sides are folded alike: ``Charlotte's`` is ``charlottes`` on both).

    Example:
        >>> ctx = normalize("[8 May 2023] Maya: I play the violin, not the piano.")
        >>> answer_in_context_issue("clarinet, violin", 1, ctx), answer_in_context("clarinet, violin", 1, ctx)
        (True, False)
        >>> answer_in_context_issue("clarinet, flute, violin", 1, ctx)
        False
        >>> answer_in_context_issue("the violin", 4, ctx), answer_in_context_issue("viol", 4, ctx)
        (True, False)
    """
    text = str(answer)
    if "," not in text:
        needle = normalize(text)
        return bool(needle) and contains(needle, normalized_context)
    words = [w for w in normalize(text).split() if w not in EN_STOPWORDS]
    if not words:
        return False
    present = _context_words(normalized_context)
    return 2 * sum(w in present for w in words) >= len(words)


@lru_cache(maxsize=64)
def _context_words(normalized_context: str) -> frozenset[str]:
    # One context is checked against each of its question's answers in turn: cache its words.
    return frozenset(normalized_context.split())


#: The answer-in-context checks by name (``recall.py --check``): all take
#: ``(answer, category, normalized_context)``.
CHECKS = {"strict": answer_in_context, "issue": answer_in_context_issue}


_WORD = re.compile(r"[a-z0-9]+")


def en_words(text: str) -> list[str]:
    """Lowercase English words minus :data:`EN_STOPWORDS`.

    Example:
        >>> en_words("What did Caroline research?")
        ['caroline', 'research']
    """
    return [w for w in _WORD.findall(text.lower()) if w not in EN_STOPWORDS]


def _has_cjk(text: str) -> bool:
    return any("\u4e00" <= ch <= "\u9fff" or "\u3400" <= ch <= "\u4dbf" for ch in text)


def tokenize(text: str) -> list[str]:
    """BM25 terms: jieba words for text with Chinese characters, else :func:`en_words`.

    Chinese text is cut with jieba (its dictionary ships in the package); punctuation and
    whitespace tokens are dropped, Latin tokens go through :func:`en_words`.
    """
    if not _has_cjk(text):
        return en_words(text)
    import jieba  # type: ignore[import-untyped]

    jieba.setLogLevel(logging.WARNING)  # its dictionary-loading notes are not our output
    terms: list[str] = []
    for token in jieba.lcut(text):
        token = token.strip().lower()
        if not token or all(not ch.isalnum() for ch in token):
            continue
        if _has_cjk(token):
            terms.append(token)
        else:
            terms.extend(en_words(token))
    return terms
