"""One relevance score for everything the memory block can hold.

Variables, summary sentences, facts and quoted turns are scored with the same BM25 against the
current query, so they compete for one budget. Terms follow the episodic index: English words
lower-cased, stop words dropped and lightly stemmed (``running``/``runs`` -> ``run``), CJK text as
character bigrams. The IDF of a query term comes from the memory's whole history when the
episodic index was searched (how many of its turns hold the term), else from the candidates
themselves. The newest terms of a long query are kept (see
:func:`convmem_graph.text.terms.search_terms`), and in a multi-line query (a conversation so far) terms
that only earlier lines hold weigh half as much as those of the last line, the current turn.

A question that asks *when* or *how many* (English or Chinese) is answered by a turn that holds a
time or a number: such a found turn gains the weight of one average query term
(:meth:`Scorer.kind_bonus`), as if it held one more of the question's words.
"""

from __future__ import annotations

import functools
import math
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Literal

from convmem_graph._text_caches import holds_text
from convmem_graph.models import EpisodeSearch
from convmem_graph.payloads.relevance import stem
from convmem_graph.text._lazy_re import LazyPattern, lazy_compile
from convmem_graph.text.terms import CJK_RUN, bigrams, search_terms

__all__ = ["PoolCounts", "QuestionKind", "Scorer", "TermStats", "query_tokens", "question_kind", "text_terms"]

_WORD = lazy_compile(r"[^\W_]+")
#: A speaker given as a name: letters (any script) in up to four words.
_NAME = lazy_compile(r"[^\W\d_]+(?:[ .'-][^\W\d_]+){0,3}")
_K1 = 1.2
_MAX_TERMS = 128
_B = 0.75
#: Weight of a query term that only lines before the last one hold (a principled prior, not tuned:
#: 0.5 and 0.7 gave the same recall on MADial).
_EARLIER_LINES = 0.5


#: What a question asks for, when its form says so: a time or a number.
QuestionKind = Literal["when", "count"]
#: Share of the mean query-term weight a turn holding what the question asks for gains: one more
#: term's worth (a prior; 0.5 and 2.0 moved LoCoMo conversations 0-4 by at most 0.4 points).
_KIND_SHARE = 1.0
_KIND_QUESTIONS: tuple[tuple[QuestionKind, LazyPattern], ...] = (
    (
        "when",
        lazy_compile(
            r"^\s*(?:when\b|what (?:year|month|date|day|time)\b|how long ago\b)"
            r"|什么时候|哪天|几号|几点|哪一?年|几月|何时",
            re.IGNORECASE,
        ),
    ),
    (
        "count",
        lazy_compile(
            r"\bhow (?:many|much|often|long|old)\b|多少|几[个次岁年天回只位条本件]|多久|多大", re.IGNORECASE
        ),
    ),
)
_MONTHS = "january february march april may june july august september october november december"
_WEEKDAYS = "monday tuesday wednesday thursday friday saturday sunday"
_CJK_NUMERALS = frozenset("一二三四五六七八九十两百千万")
_CJK_COUNTERS = frozenset("个次岁年天回位只条本件")
# What a turn holds that answers each kind, as the ranker's terms (stems, CJK bigrams): a turn's
# terms are counted for its score anyway, so the test is a few set lookups (a regex over the
# text cost ~50-80 us a turn, milliseconds a call).
_WHEN_TERMS = frozenset(
    stem(w) for w in f"{_MONTHS} {_WEEKDAYS} yesterday today tonight tomorrow weekend ago".split()
) | frozenset(
    # zh: yesterday .. next year, the weekdays and weekend, "上个/下个 (月, 星期)", and a lone
    # 月/号/日/年 (a CJK run of one character: "5月3号" reads 5, 月, 3, 号)
    "昨天 今天 明天 前天 上周 下周 上个 下个 去年 明年 周一 周二 周三 周四 周五 周六 周日 周末 星期 "
    "月 号 日 年".split()
)
#: "last week", "next month": a relative time only with one of these words.
_WHEN_LAST = frozenset({"last", "next"})
_WHEN_UNITS = frozenset(stem(w) for w in ("week", "month", "year", "night"))
_COUNT_WORDS = frozenset(
    stem(w)
    for w in "once twice one two three four five six seven eight nine ten eleven twelve dozen hundred "
    "thousand couple".split()
)


def _holds_time(terms: tuple[str, ...]) -> bool:
    if not _WHEN_TERMS.isdisjoint(terms):
        return True
    if not _WHEN_LAST.isdisjoint(terms) and not _WHEN_UNITS.isdisjoint(terms):
        return True
    # A year: four digits starting 19 or 20.
    return any(len(t) == 4 and t[:2] in ("19", "20") and t.isdigit() for t in terms)


def _holds_number(terms: tuple[str, ...]) -> bool:
    if not _COUNT_WORDS.isdisjoint(terms):
        return True
    for t in terms:
        if any(c.isdigit() for c in t):
            return True
        # zh: a numeral before a numeral or a counter (两只, 十二, 二条).
        if len(t) == 2 and t[0] in _CJK_NUMERALS and (t[1] in _CJK_NUMERALS or t[1] in _CJK_COUNTERS):
            return True
    return False


_KIND_ANSWERS = {"when": _holds_time, "count": _holds_number}


@holds_text
@functools.lru_cache(maxsize=16_384)
def _holds(kind: QuestionKind, text: str) -> bool:
    # Cached: the same stored turns are found again by the next calls' queries.
    return _KIND_ANSWERS[kind](_cached_terms(text))


def question_kind(query: str) -> QuestionKind | None:
    """What the query's current line asks for, when its form says: ``when`` or ``count``.

    Example:
        >>> question_kind("When did you move to Lisbon?"), question_kind("你的猫叫什么名字？")
        ('when', None)
        >>> question_kind("How many kids does she have?"), question_kind("你上周去了多少次健身房？")
        ('count', 'count')
    """
    lines = [line for line in query.splitlines() if line.strip()]
    current = lines[-1] if lines else ""
    for kind, pattern in _KIND_QUESTIONS:
        if pattern.search(current):
            return kind
    return None


def _token(term: str) -> str:
    return term if CJK_RUN.match(term) else stem(term)


def _tokens(terms: Sequence[str]) -> dict[str, str]:
    """Each search term's ranker token -> the first term giving it (the scorer's weight keys)."""
    tokens: dict[str, str] = {}
    for term in terms:
        tokens.setdefault(_token(term), term)
    return tokens


def query_tokens(query: str) -> frozenset[str]:
    """The terms :class:`Scorer` weighs for ``query`` (its ``weights`` keys); empty for a blank query.

    A text scores above 0.0 only if it holds one of them.

    Example:
        >>> sorted(query_tokens("Running in 杭州"))
        ['run', '杭州']
    """
    if not query.strip():
        return frozenset()
    return frozenset(_tokens(search_terms(query, max_terms=_MAX_TERMS)))


@holds_text
@functools.lru_cache(maxsize=16_384)
def _cached_terms(text: str) -> tuple[str, ...]:
    return tuple(text_terms(text))


def text_terms(text: str) -> list[str]:
    """Terms of a text as the ranker compares them (stems and CJK bigrams, repeats kept).

    Example:
        >>> text_terms("User runs in 杭州西湖")
        ['user', 'run', 'in', '杭州', '州西', '西湖']
    """
    low = text.lower()
    out: list[str] = []
    pos = 0
    for m in CJK_RUN.finditer(low):
        out.extend(stem(w) for w in _WORD.findall(low[pos : m.start()]))
        out.extend(bigrams(m.group(0)))
        pos = m.end()
    out.extend(stem(w) for w in _WORD.findall(low[pos:]))
    return out


class TermStats:
    """Each text's term counts (in first-occurrence order) and length, computed once per text.

    A call start scores the same facts, variables and summary sentences against every query;
    kept with the parsed snapshot (:meth:`~convmem_graph.models.MemorySnapshot.derived`), their
    terms are counted once per version of the snapshot instead of once per call. Keyed by the
    exact text, so an entry is right for as long as it is kept.

    Example:
        >>> TermStats().get("User runs, runs in 杭州")
        ({'user': 1, 'run': 2, 'in': 1, '杭州': 1}, 5)
    """

    __slots__ = ("_entries", "_max")

    def __init__(self, max_entries: int = 8_192) -> None:
        self._entries: dict[str, tuple[dict[str, int], int]] = {}
        # Quoted turns pass through too (other ones for every query): start over past the bound
        # rather than grow with the history; the snapshot's own texts come back on the next call.
        self._max = max_entries

    def get(self, text: str) -> tuple[dict[str, int], int]:
        """Term -> count (in the order terms first occur) and the number of terms of ``text``."""
        entry = self._entries.get(text)
        if entry is None:
            bag = _cached_terms(text)
            counts: dict[str, int] = {}
            for term in bag:
                counts[term] = counts.get(term, 0) + 1
            if len(self._entries) >= self._max:
                self._entries.clear()
            entry = self._entries[text] = (counts, len(bag))
        return entry


class PoolCounts:
    """What :class:`Scorer` reads of a fixed list of pool texts: how many, their length, each term's texts.

    A call start's pool is the snapshot's facts (the same at every call) and the turns found for
    the query; counted once per snapshot, the facts cost a few look-ups per query instead of a
    pass over every fact. Scores are the same as with the texts in ``pool`` (the sums are of
    integers).

    Example:
        >>> facts = ["User is allergic to mango.", "User likes tea."]
        >>> base = PoolCounts(facts, TermStats())
        >>> kept, fresh = Scorer("mango", None, [], base=base), Scorer("mango", None, facts)
        >>> kept.score(facts[0]) == fresh.score(facts[0]) > 0.0
        True
    """

    __slots__ = ("count", "holding", "length")

    def __init__(self, texts: Sequence[str], stats: TermStats) -> None:
        #: Number of texts, and their terms in all.
        self.count = len(texts)
        self.length = 0
        #: Term -> how many of the texts hold it.
        self.holding: dict[str, int] = {}
        for text in texts:
            counts, length = stats.get(text)
            self.length += length
            for term in counts:
                self.holding[term] = self.holding.get(term, 0) + 1


class Scorer:
    """BM25 of texts against one query, with IDF from the memory's history when known.

    Args:
        query: The current user input; blank scores everything 0.
        episodes: The episodic search for this query (its per-term document frequencies over
            all of the memory's turns); ``None`` takes document frequencies from ``pool``.
        pool: Texts of every candidate (for the average length, and the IDF without
            ``episodes``).
        stats: Term counts kept from earlier calls (the snapshot's); a fresh one when ``None``.
            Scores are the same either way.
        base: Pool texts given by their counts (:class:`PoolCounts`), before those of ``pool``.

    Example:
        >>> s = Scorer("mango allergy", None, ["User is allergic to mango.", "User likes tea."])
        >>> s.score("User is allergic to mango.") > s.score("User likes tea.") == 0.0
        True
    """

    def __init__(
        self,
        query: str | None,
        episodes: EpisodeSearch | None,
        pool: Sequence[str],
        stats: TermStats | None = None,
        base: PoolCounts | None = None,
    ) -> None:
        # More terms than the index search takes: scoring a term costs nothing per query here.
        terms = search_terms(query, max_terms=_MAX_TERMS) if query and query.strip() else []
        self.weights: dict[str, float] = {}
        #: The term counts the scores are computed from (kept across calls when given).
        self.stats = stats if stats is not None else TermStats()
        self._scores: dict[str, float] = {}
        #: Dates the query names (``@2023-08-19``) -> the IDF of "stored within that span".
        self.span_weights: dict[str, float] = {}
        #: What the question asks for (a time, a number), if its form says.
        self.kind: QuestionKind | None = question_kind(query) if query else None
        if episodes is not None and episodes.total > 0:
            for label in episodes.terms:
                if label.startswith("@"):
                    within = episodes.document_frequency.get(label, 0)
                    total = episodes.total
                    self.span_weights[label] = math.log(1.0 + (total - within + 0.5) / (within + 0.5))
        if not terms:
            self._avg = 1.0
            return
        get = self.stats.get
        entries = [get(t) for t in pool]
        count = len(entries) + (base.count if base is not None else 0)
        length = sum(e[1] for e in entries) + (base.length if base is not None else 0)
        self._avg = max(length / count, 1.0) if count else 8.0
        tokens = _tokens(terms)
        if episodes is not None and episodes.total > 0:
            n = episodes.total
            df = {tok: episodes.document_frequency.get(term, 0) for tok, term in tokens.items()}
        else:
            n = count
            seen: Counter[str] = Counter()
            for counts, _ in entries:
                seen.update(counts.keys() & tokens.keys())
            held = base.holding if base is not None else {}
            df = {tok: seen[tok] + held.get(tok, 0) for tok in tokens}
        for tok, freq in df.items():
            self.weights[tok] = math.log(1.0 + (n - freq + 0.5) / (freq + 0.5))
        lines = [line for line in query.splitlines() if line.strip()] if query else []
        if len(lines) > 1:
            # A multi-line query is a conversation so far: its last line is the current turn.
            # Terms only earlier lines hold still count, at a lower weight.
            current = {_token(t) for t in search_terms(lines[-1], max_terms=_MAX_TERMS)}
            for tok in self.weights:
                if tok not in current:
                    self.weights[tok] *= _EARLIER_LINES

    def span_bonus(self, held: Sequence[str]) -> float:
        """What a stored turn gains for being said within dates the query names.

        ``held`` is the turn's matched search keys (:attr:`EpisodeHit.terms`); a date span
        counts like a query term of the same rarity, so "19 August 2023" outweighs "in 2023".
        """
        return sum(self.span_weights.get(t, 0.0) for t in held)

    def name_bonus(self, speaker: str | None) -> float:
        """What a stored turn gains when the query names the person who said it.

        "What did Caroline paint?" is about Caroline's own turns, which rarely say her name (the
        other speaker's do: "Thanks, Caroline!"). A speaker given as a name (words only, as an
        OpenAI message's ``name``; opaque ids with digits or ``_`` never count) adds the weight
        of each query term it holds, as one occurrence would.

        Example:
            >>> s = Scorer("What did Caroline paint?", None, ["Caroline", "paint", "x"])
            >>> s.name_bonus("Caroline") > 0.0 == s.name_bonus("user_42") == s.name_bonus(None)
            True
        """
        if not speaker or not self.weights or not _NAME.fullmatch(speaker):
            return 0.0
        return sum(self.weights.get(t, 0.0) for t in self.stats.get(speaker)[0])

    def speaker_terms(self, speakers: Iterable[str | None]) -> frozenset[str]:
        """The query's terms that name one of ``speakers`` (given as names, as :meth:`name_bonus` reads them).

        Example:
            >>> s = Scorer("What did Caroline tell Melanie about the race?", None, ["x"])
            >>> sorted(s.speaker_terms(["Caroline", "Melanie", "user_7", None]))
            ['carolin', 'melani']
        """
        if not self.weights:
            return frozenset()
        out: set[str] = set()
        for speaker in set(speakers):
            if speaker and _NAME.fullmatch(speaker):
                out.update(t for t in self.stats.get(speaker)[0] if t in self.weights)
        return frozenset(out)

    def turn_score(self, text: str, names: frozenset[str]) -> float:
        """:meth:`score` of a stored turn, leaving out the query terms that name a speaker.

        Who a turn is about shows in who said it (:meth:`name_bonus`), not in the names it
        says: a name in a turn is mostly the other speaker being addressed ("Thanks,
        Caroline!"), so for "What book did Caroline recommend?" it would lift every turn that
        greets her above her own turn naming the book. ``names`` comes from
        :meth:`speaker_terms`; without one in ``text`` this is :meth:`score` itself.

        Example:
            >>> s = Scorer("What book did Caroline recommend?", None, ["Thanks, Caroline!", "a book"])
            >>> names = s.speaker_terms(["Caroline"])
            >>> s.turn_score("Thanks, Caroline!", names), s.score("Thanks, Caroline!") > 0.0
            (0.0, True)
            >>> s.turn_score("a book", names) == s.score("a book") > 0.0
            True
        """
        counts, length = self.stats.get(text)
        if not self.weights or names.isdisjoint(counts):
            return self.score(text)
        held = [t for t in counts if t in self.weights and t not in names]
        if not held:
            return 0.0
        norm = _K1 * (1.0 - _B + _B * length / self._avg)
        return sum(self.weights[t] * counts[t] * (_K1 + 1.0) / (counts[t] + norm) for t in held)

    def kind_bonus(self, text: str) -> float:
        """What a stored turn gains for holding what the question asks for: a time, a number.

        "When did you go to the support group?" is answered by the turn that says *yesterday*
        or *7 May*, "how many times" by the one with a number, not by a longer turn that repeats
        the question's words. Such a turn gains :data:`_KIND_SHARE` of the mean query-term
        weight (one more term's worth); 0.0 for other questions.

        Example:
            >>> s = Scorer("When did Ann paint the sunset?", None, ["x"])
            >>> s.kind_bonus("I painted it yesterday") > 0.0 == s.kind_bonus("I painted a sunset")
            True
            >>> Scorer("What did Ann paint?", None, ["x"]).kind_bonus("I painted it yesterday")
            0.0
        """
        if self.kind is None or not self.weights or not _holds(self.kind, text):
            return 0.0
        return _KIND_SHARE * sum(self.weights.values()) / len(self.weights)

    def score(self, text: str) -> float:
        """BM25 of ``text`` (0.0 when it holds no query term)."""
        weights = self.weights
        if not weights:
            return 0.0
        known = self._scores.get(text)
        if known is not None:
            return known
        counts, length = self.stats.get(text)
        # A query has a few terms and most texts hold none of them: look those few up. The sum
        # runs in the order the text first holds its terms, as it always has (same float).
        if len(weights) < len(counts):
            held = [t for t in weights if t in counts]
            if len(held) > 1:
                held = [t for t in counts if t in weights]
        else:
            held = [t for t in counts if t in weights]
        total = 0.0
        if held:
            norm = _K1 * (1.0 - _B + _B * length / self._avg)
            total = sum(weights[t] * counts[t] * (_K1 + 1.0) / (counts[t] + norm) for t in held)
        self._scores[text] = total
        return total
