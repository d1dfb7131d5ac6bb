"""Rank memory fragments by relevance to a query, then by recency.

Lexical scoring is BM25 over terms that need no downloaded segmenter: English (and other
space-delimited) words lower-cased, stop words removed and lightly stemmed; a stem matches a
document word made of the stem plus a common inflection (``mango`` finds ``mangoes`` but not
``mangolian``, ``allergy`` finds ``allergic``). CJK text is matched as character bigrams (weight 1)
plus single characters (weight 0.3, common function characters skipped). Fragments with no matching term
keep recency order (``updated_at``, newest first) after the matching ones.

Speed: all fragment contents are joined into one string and each query term is located with
``str.count``/``str.find`` (C loops), so the Python work grows with the number of *matches*, not
with the number of fragments. A term occurring more often than a quarter of the fragments (and at
least 16 times) carries almost no information and is skipped, which bounds that work. The order
of the non-matching rest comes from ``heapq.nlargest`` and only falls back to a full sort when a
caller iterates past it.

With a LangChain :class:`~langchain_core.embeddings.Embeddings`, the ``embed_limit`` best
lexical/recency candidates are re-ranked by cosine similarity plus half the normalized lexical
score. Embeddings are computed on each call (wrap the model in ``CacheBackedEmbeddings`` for
large memories), unless the caller passes the fragments' stored vectors (``ranked_with_cosines(...,
stored=)``: the call start reads those the store keeps, see ``store/_fact_vectors.py``).
"""

from __future__ import annotations

import functools
import heapq
import itertools
import math
import re
import statistics
from bisect import bisect_right
from collections.abc import Iterator, Mapping, Sequence
from operator import attrgetter
from typing import TYPE_CHECKING

from convmem_graph._text_caches import holds_text
from convmem_graph.models import Fragment
from convmem_graph.payloads.fusion import meaning_query
from convmem_graph.text.terms import CJK_RUN as _CJK_RUN

if TYPE_CHECKING:
    from langchain_core.embeddings import Embeddings

__all__ = [
    "FactOrder",
    "FactRanking",
    "LexicalIndex",
    "iter_ranked",
    "lexical_scores",
    "query_terms",
    "rank_fragments",
    "ranked_with_cosines",
    "stem",
]

_WORD = re.compile(r"[^\W_]+")
#: A maximal run of characters ``str.isalnum`` accepts (``\w`` is those and ``_``): one word of
#: a document, as :func:`_word_hit` delimits it.
_ALNUM_RUN = _WORD
_EN_STOP = frozenset(
    """a an the and or but if of to in on at by for with from as is are was were be been being am do does
    did have has had i me my we our you your he him his she her it its they them their this that these
    those what which who whom when where why how not no so than too very can could will would shall
    should may might must just about into over also please tell remember user users""".split()
)
# Single CJK characters too common to say anything; bigrams containing them are still used.
_CJK_STOP = frozenset("的了是我你他她它们在和也就都而及与着或一个吗呢吧啊这那有要会对把被给让很还又说用户")
_CJK_STOP_BIGRAMS = frozenset({"用户", "一个", "我们", "你们", "他们", "什么", "这个", "那个"})
# Sentence particles: a bigram containing one is noise ("过敏吗" -> "敏吗").
_PARTICLES = frozenset("的了吗呢吧啊呀哦嘛着")
_MATCH_BUDGET = 1024
_REFINE_LIMIT = 256
_SUFFIXES = ("ingly", "edly", "ical", "ing", "ies", "ied", "ic", "es", "ed", "ly", "y", "s")
# What may follow a stem inside a matching document word: "mango" finds "mangoes" but not "mangolian".
_TAILS = frozenset(
    {"", "e", "s", "es", "ed", "d", "ing", "er", "ers", "y", "ies", "ied", "ic", "ical", "ly", "ily"}
)
_DOUBLED_TAILS = frozenset({"ing", "ed", "er", "ers"})
_MAX_TERMS = 64
_K1 = 1.2
_B = 0.75
_UNIGRAM_WEIGHT = 0.3
_LEXICAL_WEIGHT_WITH_EMBEDDINGS = 0.5
_UPDATED = attrgetter("updated_at")
_CONTENT = attrgetter("content")


def stem(word: str) -> str:
    """Strip one common English inflection (``running`` -> ``run``, ``allergic`` -> ``allerg``).

    Example:
        >>> stem("running"), stem("mangoes"), stem("played")
        ('run', 'mango', 'play')
    """
    return _stem(word)


@holds_text
@functools.lru_cache(maxsize=65_536)
def _stem(word: str) -> str:
    # Cached: a conversation reuses a small vocabulary, and call start stems every candidate.
    for suffix in _SUFFIXES:
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            stem = word[: -len(suffix)]
            if suffix == "y" and stem[-1] in "aeiou":  # play, day: not a suffix
                continue
            if suffix == "es" and not stem.endswith(("s", "x", "z", "ch", "sh", "o")):
                stem = word[:-1]  # dances -> dance (then -> danc below), not danc-es
            # running -> runn -> run, stopped -> stopp -> stop
            doubled = len(stem) >= 4 and stem[-1] == stem[-2] and stem[-1] not in "aeiou"
            if suffix in ("ing", "ed") and doubled:
                stem = stem[:-1]
            return _drop_e(stem)
    return _drop_e(word)


def _drop_e(stem: str) -> str:
    # dance/dances/danced/dancing all meet at "danc"; a short word keeps its e (the, ice).
    return stem[:-1] if len(stem) >= 4 and stem.endswith("e") and not stem.endswith("ee") else stem


def _word_hit(text: str, pos: int, term: str) -> bool:
    """Whether ``term`` at ``pos`` starts a word whose rest is an inflection of it."""
    if pos > 0 and text[pos - 1].isalnum():
        return False
    end = pos + len(term)
    stop = end
    while stop < len(text) and text[stop].isalnum():
        stop += 1
    tail = text[end:stop]
    return tail in _TAILS or (tail[:1] == term[-1] and tail[1:] in _DOUBLED_TAILS)


def _find_all(text: str, term: str, is_word: bool) -> Iterator[int]:
    pos = text.find(term)
    while pos != -1:
        if not is_word or _word_hit(text, pos, term):
            yield pos
        pos = text.find(term, pos + len(term))


def query_terms(query: str) -> list[tuple[str, float, bool]]:
    """Split a query into weighted search terms.

    Args:
        query: Free text in any mix of Chinese/Japanese/Korean and space-delimited languages.

    Returns:
        The last 64 unique ``(term, weight, is_word)`` tuples in order of appearance; ``is_word``
        terms must start a word where they match.

    Example:
        >>> query_terms("芒果吗 mangoes")
        [('芒果', 1.0, False), ('芒', 0.3, False), ('果', 0.3, False), ('mango', 1.0, True)]
    """
    low = query.lower()
    terms: dict[str, tuple[float, bool]] = {}
    for run in _CJK_RUN.findall(low):
        for i in range(len(run) - 1):
            a, b = run[i], run[i + 1]
            bigram = a + b
            if not (a in _CJK_STOP and b in _CJK_STOP) and a not in _PARTICLES and b not in _PARTICLES:
                if bigram not in _CJK_STOP_BIGRAMS:
                    terms.setdefault(bigram, (1.0, False))
        for ch in run:
            if ch not in _CJK_STOP:
                # a lone CJK character is a full term; inside a run it backs the bigrams up
                terms.setdefault(ch, (1.0 if len(run) == 1 else _UNIGRAM_WEIGHT, False))
    for word in _WORD.findall(_CJK_RUN.sub(" ", low)):
        if len(word) >= 2 and word not in _EN_STOP:
            terms.setdefault(_stem(word), (1.0, True))
    items = list(terms.items())
    # A long query keeps its newest terms: the end of a conversation is the current turn.
    return [(t, w, is_word) for t, (w, is_word) in items[-_MAX_TERMS:]]


def lexical_scores(query: str, contents: Sequence[str]) -> dict[int, float]:
    """BM25 scores of ``contents`` for ``query``; only documents with a positive score are returned.

    Terms are processed rarest first. Terms found more often than ``max(n/4, 16)`` times are
    skipped; once 1024 matches have been scored, more frequent terms only refine the scores of
    documents already matched (at most 256), which bounds the work on large memories.

    Args:
        query: The query text.
        contents: Document texts (fragment contents).

    Returns:
        ``{index in contents: score}``.

    Example:
        >>> lexical_scores("芒果", ["用户喜欢跑步。", "用户对芒果过敏。"])  # doctest: +ELLIPSIS
        {1: ...}
    """
    return LexicalIndex(contents).scores(query)


class _Joined:
    """One form of the documents joined for ``str.count``/``str.find``: the text, lengths, offsets."""

    __slots__ = ("avg_len", "lens", "starts", "text")

    def __init__(self, text: str, lens: list[int]) -> None:
        self.text = text
        self.lens = lens
        self.avg_len = max(sum(lens) / len(lens), 1.0) if lens else 1.0
        self.starts: list[int] | None = None

    @classmethod
    def of(cls, contents: Sequence[str]) -> _Joined:
        return cls("\x00".join(contents), list(map(len, contents)))

    def offsets(self) -> list[int]:
        if self.starts is None:
            self.starts = [0, *itertools.accumulate(map((1).__add__, self.lens[:-1]))]
        return self.starts


def _word_forms(term: str) -> list[str]:
    """Every document word ``term`` (a stem) matches by :func:`_word_hit`: itself plus a tail."""
    return [term + tail for tail in _TAILS] + [term + term[-1] + tail for tail in _DOUBLED_TAILS]


class _WordDocs:
    """Each word of one joined text (a maximal alphanumeric run) -> its documents, once per occurrence.

    Kept with a :class:`LexicalIndex` that scores many queries: a word term's matches are then
    found by a few look-ups of its inflected forms (:func:`_word_forms`) instead of a
    :func:`_find_all` walk over its occurrences. The same matches: a word term is alphanumeric,
    so an occurrence :func:`_word_hit` accepts starts a word and is the whole word but for an
    inflection; documents are split where the joined text is (its separator is no word character).
    """

    __slots__ = ("_docs",)

    def __init__(self, joined: _Joined) -> None:
        self._docs: dict[str, list[int]] = {}
        text, starts = joined.text, joined.offsets()
        for doc, (start, length) in enumerate(zip(starts, joined.lens, strict=True)):
            for word in _ALNUM_RUN.findall(text, start, start + length):
                self._docs.setdefault(word, []).append(doc)

    def hits(self, term: str) -> dict[int, int]:
        """Document -> how many of its words ``term`` matches, documents in ascending order."""
        found: dict[int, int] = {}
        for form in set(_word_forms(term)):
            for doc in self._docs.get(form, ()):
                found[doc] = found.get(doc, 0) + 1
        return dict(sorted(found.items()))


class LexicalIndex:
    """:func:`lexical_scores` over one fixed list of documents, its joined text made once.

    A call start scores the same snapshot's facts against every query: kept with the snapshot,
    the join (and the lower-cased join that word terms search) is made once per version of it.
    Scores are those of :func:`lexical_scores` (which is this class used once). With
    ``index_words`` (an index that scores many queries), the lower-cased join's words are
    indexed on first use too (:class:`_WordDocs`), so a word term costs look-ups, not a walk of
    its occurrences; the scores are the same.

    Example:
        >>> index = LexicalIndex(["用户喜欢跑步。", "User is allergic to mangoes."])
        >>> sorted(index.scores("mango")) == sorted(lexical_scores("mango", index.contents)) == [1]
        True
    """

    __slots__ = ("_index_words", "_lower", "_raw", "_words", "contents")

    def __init__(self, contents: Sequence[str], *, index_words: bool = False) -> None:
        self.contents = list(contents)
        self._raw: _Joined | None = None
        self._lower: _Joined | None = None
        self._index_words = index_words
        self._words: _WordDocs | None = None

    def _joined(self, lower: bool) -> _Joined:
        if self._raw is None:
            self._raw = _Joined.of(self.contents)
        if not lower:
            return self._raw
        if self._lower is None:
            low = self._raw.text.lower()
            if len(low) != len(self._raw.text):
                # a few characters (e.g. U+0130) change length when lower-cased; keep offsets exact
                self._lower = _Joined.of([c.lower() for c in self.contents])
            else:
                self._lower = _Joined(low, self._raw.lens)
        return self._lower

    def scores(self, query: str) -> dict[int, float]:
        """``{index: BM25 score}`` of the documents holding a term of ``query`` (:func:`lexical_scores`)."""
        terms = query_terms(query)
        n = len(self.contents)
        if not terms or n == 0:
            return {}
        joined = self._joined(any(is_word for _, _, is_word in terms))
        text, lens, avg_len = joined.text, joined.lens, joined.avg_len
        words: _WordDocs | None = None
        if self._index_words and joined is self._lower:
            if self._words is None:
                self._words = _WordDocs(joined)
            words = self._words
        limit = max(n // 4, 16)
        starts: list[int] | None = None
        scores: dict[int, float] = {}
        processed = 0
        for count, term, weight, is_word in sorted((text.count(t), t, w, iw) for t, w, iw in terms):
            if count == 0:
                continue
            if count > limit:
                break
            tf: dict[int, int] = {}
            if processed + count > _MATCH_BUDGET and scores:
                if len(scores) > _REFINE_LIMIT:
                    break
                assert starts is not None  # set by the full pass that produced the scores
                known = words.hits(term) if words is not None and is_word else None
                for doc in scores:
                    if known is not None:
                        freq = known.get(doc, 0)
                    else:
                        body = text[starts[doc] : starts[doc] + lens[doc]]
                        freq = sum(1 for _ in _find_all(body, term, is_word)) if is_word else body.count(term)
                    if freq:
                        tf[doc] = freq
                df = count  # occurrences stand in for the document frequency here
            else:
                if starts is None:
                    starts = joined.offsets()
                if words is not None and is_word:
                    tf = words.hits(term)
                else:
                    for pos in _find_all(text, term, is_word):
                        doc = bisect_right(starts, pos) - 1
                        tf[doc] = tf.get(doc, 0) + 1
                processed += count
                df = len(tf)
            if not tf:
                continue
            idf = math.log(1.0 + (n - df + 0.5) / (df + 0.5))
            for doc, freq in tf.items():
                norm = _K1 * (1.0 - _B + _B * lens[doc] / avg_len)
                scores[doc] = scores.get(doc, 0.0) + weight * idf * freq * (_K1 + 1.0) / (freq + norm)
        return scores


class FactOrder:
    """:func:`iter_ranked`'s order (no embeddings) of one fixed list of fragments, by position.

    A call start ranks the same snapshot's facts against every query. Kept with the snapshot,
    what does not depend on the query is done once: the joined texts (:class:`LexicalIndex`)
    and the recency order. :meth:`ranking` then costs the lexical matches, not the fragments:
    it says where any fragment stands and lists the first few, without ordering the rest.

    The fragments must be distinct objects (as parsed from a row); :func:`iter_ranked` tells
    repeats of one object apart by identity.

    Example:
        >>> from convmem_graph.models import Fragment
        >>> fs = [
        ...     Fragment(id="a", memory_id="m", content="用户对芒果过敏。", key="allergy", updated_at=1),
        ...     Fragment(id="b", memory_id="m", content="用户喜欢跑步。", key="hobby", updated_at=2),
        ... ]
        >>> ranking = FactOrder(fs).ranking("芒果")
        >>> [fs[i].id for i in ranking.prefix(2)] == [f.id for f in iter_ranked("芒果", fs, first=2)]
        True
    """

    __slots__ = ("_recency_pos", "fragments", "index", "recency")

    def __init__(self, fragments: Sequence[Fragment]) -> None:
        self.fragments = list(fragments)
        self.index = LexicalIndex(list(map(_CONTENT, self.fragments)), index_words=True)
        # sorted(reverse=True) keeps ties in list order, as _by_recency (and nlargest) does
        self.recency = sorted(
            range(len(self.fragments)), key=lambda i: self.fragments[i].updated_at, reverse=True
        )
        self._recency_pos = [0] * len(self.recency)
        for pos, i in enumerate(self.recency):
            self._recency_pos[i] = pos

    def matches(self, query: str | None) -> bool:
        """Whether :meth:`ranking` of ``query`` has a lexical match (without ordering anything)."""
        return bool(self.index.scores(query)) if query and query.strip() else False

    def ranking(self, query: str | None) -> FactRanking:
        """The order of the fragments for ``query``: lexical matches best first, then newest first."""
        scores = self.index.scores(query) if query and query.strip() else {}
        frags = self.fragments
        matched = sorted(scores, key=lambda i: (-scores[i], -frags[i].updated_at, i))
        return FactRanking(self, matched)


class FactRanking:
    """One query's order of a :class:`FactOrder`'s fragments (indices into its list)."""

    __slots__ = ("_matched_pos", "_order", "_skipped", "matched")

    def __init__(self, order: FactOrder, matched: list[int]) -> None:
        self._order = order
        #: Indices of the fragments holding a query term, best first (the order's head).
        self.matched = matched
        self._matched_pos = {i: r for r, i in enumerate(matched)}
        # Recency positions of the matched fragments: the rest of the order skips them.
        self._skipped = sorted(order._recency_pos[i] for i in matched)

    def rank(self, i: int) -> int:
        """Where fragment ``i`` stands in the order (0 first)."""
        known = self._matched_pos.get(i)
        if known is not None:
            return known
        pos = self._order._recency_pos[i]
        return len(self.matched) + pos - bisect_right(self._skipped, pos)

    def prefix(self, n: int) -> list[int]:
        """The first ``n`` fragments of the order (indices)."""
        out = self.matched[:n]
        if len(out) < n:
            taken = self._matched_pos
            for i in self._order.recency:
                if i not in taken:
                    out.append(i)
                    if len(out) == n:
                        break
        return out


def _cosine(a: Sequence[float], b: Sequence[float]) -> float:
    dot = math.fsum(x * y for x, y in zip(a, b, strict=True))
    na = math.sqrt(math.fsum(x * x for x in a))
    nb = math.sqrt(math.fsum(y * y for y in b))
    return dot / (na * nb) if na and nb else 0.0


def _by_recency(fragments: Sequence[Fragment], first: int) -> Iterator[Fragment]:
    # nlargest(k) equals sorted(reverse=True)[:k] including tie order, so the fallback continues it.
    top = heapq.nlargest(first, fragments, key=_UPDATED) if first < len(fragments) else None
    if top is not None:
        yield from top
        if len(top) == len(fragments):
            return
    ordered = sorted(fragments, key=_UPDATED, reverse=True)
    yield from ordered if top is None else ordered[len(top) :]


def iter_ranked(
    query: str | None,
    fragments: Sequence[Fragment],
    *,
    first: int,
    embeddings: Embeddings | None = None,
    embed_limit: int | None = 256,
) -> Iterator[Fragment]:
    """Yield ``fragments`` best first, cheaply for the first ``first`` and lazily for the rest.

    Args:
        query: Text to rank against; ``None`` or blank ranks by recency only.
        fragments: Candidates (the caller filters expired ones).
        first: How many results the caller expects to need; more can still be iterated.
        embeddings: Optional embeddings model, see the module docstring.
        embed_limit: How many top candidates are embedded; ``None`` embeds all.

    Yields:
        Every fragment exactly once.
    """
    scores = lexical_scores(query, list(map(_CONTENT, fragments))) if query and query.strip() else {}
    ranked = _lexical_order(fragments, scores, first)
    if embeddings is None or not query or not query.strip():
        yield from ranked
        return
    head, _ = _embedded_head(query, fragments, scores, ranked, embeddings, embed_limit)
    yield from head
    yield from ranked


def ranked_with_cosines(
    query: str,
    fragments: Sequence[Fragment],
    embeddings: Embeddings,
    *,
    first: int,
    embed_limit: int | None = 256,
    stored: Mapping[str, Sequence[float]] | None = None,
    index: LexicalIndex | None = None,
) -> tuple[Iterator[Fragment], dict[str, float]]:
    """:func:`iter_ranked`'s order with embeddings, and the query's cosine of each fragment embedded.

    The block fuses these cosines with its own lexical scores (one scale for facts and turns), so
    a fact that shares no word with the query can still be chosen over a weakly matching quote.
    The fragments are embedded when this is called, not when the order is iterated.

    With ``stored`` (fragment id -> its stored vector, as the model gave it) no fragment is
    embedded: only the query is. The order and cosines are those of the per-call path for the
    same vectors. A fragment with no stored vector gets no cosine (the block scores it by its
    words) and, in the order, the median cosine of the others: neither pushed down nor up for
    lacking one.

    Args:
        query: Text to rank against (not blank).
        fragments: Candidates (the caller filters expired ones).
        embeddings: The model.
        first: As for :func:`iter_ranked`.
        embed_limit: How many top lexical/recency candidates are embedded; ``None`` embeds all.
        stored: The fragments' stored vectors, by id (see above).
        index: A :class:`LexicalIndex` of the fragments' contents, in their order, kept by the
            caller (a call start's snapshot): the same scores as :func:`lexical_scores`, without
            joining the texts again.

    Returns:
        The order (every fragment once) and fragment id -> cosine for the embedded ones.

    Raises:
        ValueError: If ``query`` is blank, or the model returns a wrong number of vectors.
    """
    if not query.strip():
        raise ValueError("ranked_with_cosines: the query is blank (rank by recency with iter_ranked)")
    if index is not None:
        scores = index.scores(query)
    else:
        scores = lexical_scores(query, list(map(_CONTENT, fragments)))
    ranked = _lexical_order(fragments, scores, first)
    head, cosines = _embedded_head(query, fragments, scores, ranked, embeddings, embed_limit, stored)
    return itertools.chain(head, ranked), cosines


def _lexical_order(fragments: Sequence[Fragment], scores: dict[int, float], first: int) -> Iterator[Fragment]:
    matched = sorted(scores, key=lambda i: (-scores[i], -fragments[i].updated_at, i))
    matched_frags = [fragments[i] for i in matched]
    seen = {id(f) for f in matched_frags}
    rest = (f for f in _by_recency(fragments, first) if id(f) not in seen)
    return itertools.chain(matched_frags, rest)


def _embedded_head(
    query: str,
    fragments: Sequence[Fragment],
    scores: dict[int, float],
    ranked: Iterator[Fragment],
    embeddings: Embeddings,
    embed_limit: int | None,
    stored: Mapping[str, Sequence[float]] | None = None,
) -> tuple[list[Fragment], dict[str, float]]:
    """The first ``embed_limit`` of ``ranked`` re-ranked by meaning, and their cosines by id.

    The head's vectors come from ``stored`` when given (none is embedded), else from the model.
    """
    limit = len(fragments) if embed_limit is None else embed_limit
    head = list(itertools.islice(ranked, limit))
    if not head:
        return head, {}
    if stored is not None:
        qv = embeddings.embed_query(meaning_query(query)) if any(f.id in stored for f in head) else []
        # A vector of another dimension (a model changed under one name) counts as none.
        have = [f for f in head if f.id in stored and len(stored[f.id]) == len(qv)]
        cosine = dict(zip(map(id, have), _cosines(qv, [stored[f.id] for f in have]), strict=True))
    else:
        vectors = embeddings.embed_documents([f.content for f in head])
        if len(vectors) != len(head):
            raise ValueError(
                f"embeddings.embed_documents returned {len(vectors)} vectors for {len(head)} fragments"
            )
        qv = embeddings.embed_query(meaning_query(query))
        cosine = {id(f): _cosine(qv, v) for f, v in zip(head, vectors, strict=True)}
    if not cosine:
        return head, {}  # nothing embedded yet: the lexical order as it is
    top_lex = max(scores.values(), default=0.0)
    lex = {id(fragments[i]): scores[i] / top_lex for i in scores} if top_lex > 0 else {}
    # A fragment not embedded yet counts as a middling one by meaning (see ranked_with_cosines).
    middle = statistics.median(cosine.values())
    hybrid = {
        id(f): cosine.get(id(f), middle) + _LEXICAL_WEIGHT_WITH_EMBEDDINGS * lex.get(id(f), 0.0) for f in head
    }
    head.sort(key=lambda f: (-hybrid[id(f)], -f.updated_at))
    return head, {f.id: cosine[id(f)] for f in head if id(f) in cosine}


def _cosines(query: Sequence[float], vectors: Sequence[Sequence[float]]) -> list[float]:
    """:func:`_cosine` of ``query`` with each of ``vectors`` at once (numpy, float64 sums).

    Stored vectors are numpy arrays already (the embeddings extra); this is the same cosine in
    one matrix product instead of a Python loop per fragment: equal to ~1e-15, so equal orders.
    """
    if not vectors:
        return []
    import numpy as np

    q = np.asarray(query, dtype=np.float64)
    m = np.asarray(vectors, dtype=np.float64)
    if m.ndim != 2 or m.shape[1] != q.shape[0]:
        # A model whose dimension changed under one name: the stored vectors cannot be compared.
        raise ValueError(f"stored vectors of dimension {m.shape[-1]} for a query of dimension {q.shape[0]}")
    norms = np.linalg.norm(m, axis=1) * float(np.linalg.norm(q))
    dots = m @ q
    out: list[float] = np.divide(dots, norms, out=np.zeros_like(dots), where=norms > 0).tolist()
    return out


def rank_fragments(
    query: str,
    fragments: Sequence[Fragment],
    *,
    embeddings: Embeddings | None = None,
    now_ms: int | None = None,
    embed_limit: int | None = 256,
) -> list[Fragment]:
    """Return ``fragments`` ordered by relevance to ``query``, then recency (newest first).

    Args:
        query: Free text (Chinese, English or mixed); blank means recency only.
        fragments: The fragments to rank.
        embeddings: Optional LangChain embeddings; see the module docstring.
        now_ms: When given, fragments with ``expires_at <= now_ms`` are left out.
        embed_limit: How many top lexical/recency candidates are re-ranked by embeddings
            (``None``: all).

    Returns:
        A new list; the input is not modified.

    Example:
        >>> from convmem_graph.models import Fragment
        >>> fs = [
        ...     Fragment(id="a", memory_id="m", content="用户对芒果过敏。", key="allergy", updated_at=1),
        ...     Fragment(id="b", memory_id="m", content="用户喜欢跑步。", key="hobby", updated_at=2),
        ... ]
        >>> [f.id for f in rank_fragments("芒果", fs)]
        ['a', 'b']
        >>> [f.id for f in rank_fragments("", fs)]
        ['b', 'a']
    """
    live = (
        list(fragments)
        if now_ms is None
        else [f for f in fragments if f.expires_at is None or f.expires_at > now_ms]
    )
    return list(iter_ranked(query, live, first=len(live), embeddings=embeddings, embed_limit=embed_limit))
