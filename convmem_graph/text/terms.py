"""Search terms shared by the episodic index and the block's ranker (the language-specific edge).

English and other space-delimited words are lower-cased with stop words dropped; CJK runs become
character bigrams (no segmenter download: see the README for the measurement against jieba).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from typing import cast

from convmem_graph._text_caches import holds_text
from convmem_graph.text.cjk import SCRIPTS

__all__ = ["CJK_RUN", "bigrams", "search_terms", "stem", "stemmed_terms"]

CJK_RUN = re.compile(f"[{SCRIPTS}]+")
_WORD = re.compile(r"[^\W_]+")
_EN_STOP = frozenset(
    """a an the and or but if of to in on at by for with from as is are was were be been being am do does
    did have has had i me my we our you your he him his she her it its they them their this that these
    those what which who whom when where why how not no so than too very can could will would shall
    should may might must just about into over also please tell remember user users there then
    s t don didn doesn isn wasn ll ve re m d""".split()
)
# CJK characters that say nothing alone; a bigram made only of them is noise too.
_CJK_STOP = frozenset("的了是我你他她它们在和也就都而及与着或一个吗呢吧啊这那有要会对把被给让很还又说用户")
_CJK_STOP_BIGRAMS = frozenset({"用户", "一个", "我们", "你们", "他们", "什么", "这个", "那个", "怎么"})
_PARTICLES = frozenset("的了吗呢吧啊呀哦嘛着什么")


def bigrams(run: str) -> list[str]:
    """Character bigrams of a CJK run (a lone character stays itself)."""
    return [run] if len(run) == 1 else [run[i : i + 2] for i in range(len(run) - 1)]


#: The last split (query, max_terms, terms): a call start splits its query for the episodic
#: search, then again for the ranker's weights; the second is this answer (or its newest part).
_LAST: list[tuple[str, int | None, tuple[str, ...]] | None] = [None]


def search_terms(query: str, *, max_terms: int | None = 32) -> list[str]:
    """Split a query into index terms, keeping the *newest* ``max_terms`` of a long query.

    English words are lower-cased with stop words dropped (the index stems them); CJK runs give
    their bigrams, minus those made of function characters or particles. ``max_terms=None``
    keeps every distinct term.

    Example:
        >>> search_terms("Where did Caroline move from? 她以前住在成都吗")
        ['caroline', 'move', '她以', '以前', '前住', '住在', '在成', '成都']
    """
    last = _LAST[0]  # one read: another thread may replace it meanwhile
    if last is not None and last[0] == query:
        _, kept_max, kept = last
        # The kept split answers when it is whole (fewer terms than its cap) or cut at a cap at
        # least this one: the newest ``max_terms`` of the newest ``kept_max`` are the same terms.
        if kept_max is None or len(kept) < kept_max or (max_terms is not None and max_terms <= kept_max):
            return list(kept if max_terms is None or len(kept) <= max_terms else kept[-max_terms:])
    terms = _split(query, max_terms)
    _LAST[0] = (query, max_terms, tuple(terms))
    return terms


def _split(query: str, max_terms: int | None) -> list[str]:
    """:func:`search_terms` computed."""
    found: list[str] = []
    pos = 0
    for m in CJK_RUN.finditer(query):
        found.extend(_latin_terms(query[pos : m.start()]))
        for gram in bigrams(m.group(0)):
            if len(gram) == 1:
                if gram not in _CJK_STOP:
                    found.append(gram)
            elif not (
                (gram[0] in _CJK_STOP and gram[1] in _CJK_STOP)
                or gram[0] in _PARTICLES
                or gram[1] in _PARTICLES
                or gram in _CJK_STOP_BIGRAMS
            ):
                found.append(gram)
        pos = m.end()
    found.extend(_latin_terms(query[pos:]))
    # Newest first when cutting: the end of a long query is the current turn.
    unique: dict[str, None] = {}
    for term in reversed(found):
        unique.setdefault(term, None)
        if max_terms is not None and len(unique) == max_terms:
            break
    return list(reversed(unique))


def _latin_terms(chunk: str) -> list[str]:
    # Numbers stay ("2023", "19", "5k"): a question about a date or an amount names it.
    return [w for w in _WORD.findall(chunk.lower()) if len(w) >= 2 and w not in _EN_STOP]


# Registered: the stemmer keeps its own cache of the words it stemmed; a new one starts empty.
@holds_text
@functools.cache
def _stem_words() -> Callable[[list[str]], list[str]]:
    try:
        import Stemmer  # PyStemmer: Snowball in C, with its own word cache
    except ImportError as exc:  # pragma: no cover - depends on the installed extras
        raise ImportError(
            "the PostgreSQL episodic index stems with PyStemmer: pip install 'convmem-graph[postgres]'"
        ) from exc
    return Stemmer.Stemmer("english").stemWords  # type: ignore[no-any-return]


def stem(terms: list[str]) -> list[str]:
    """Snowball-stem English terms (CJK terms come back unchanged), one result per term."""
    return _stem_words()(terms) if terms else []


def stemmed_terms(text: str, *, max_terms: int | None = None) -> list[str]:
    """:func:`search_terms` with English words Snowball-stemmed (CJK bigrams pass unchanged).

    The PostgreSQL episodic index stores these for a turn and looks up the same for a query, so
    both sides always agree; stemming here keeps that work off the database server.

    Example:
        >>> stemmed_terms("Caroline went running in 成都")
        ['carolin', 'went', 'run', '成都']
    """
    if max_terms is None and CJK_RUN.search(text) is None:
        return _latin_stemmed(text)
    return list(dict.fromkeys(stem(search_terms(text, max_terms=max_terms))))


#: Word (lower-cased) -> its stem, or ``""`` for a word :func:`search_terms` drops (a stop word or a
#: single character). A conversation's words repeat, so nearly every word of a turn is found here.
_STEMS: dict[str, str] = {}
#: Entries kept before the cache starts over: about 6 MB at the cap (~290 bytes an entry); the ten
#: LoCoMo conversations use 5,380 distinct words.
_STEMS_MAX = 20_000
#: ASCII bytes -> themselves lower-cased when alphanumeric, else a space: for an ASCII text,
#: ``text.encode().translate(_ASCII_WORDS).split()`` is ``_WORD.findall(text.lower())`` (a word
#: character that is not ``_`` is exactly an ASCII letter or digit there), at a third of the cost.
_ASCII_WORDS = bytes((ord(chr(c).lower()) if chr(c).isalnum() else 32) if c < 128 else c for c in range(256))


def _latin_stemmed(text: str) -> list[str]:
    """:func:`stemmed_terms` of a text without CJK runs, with ``max_terms=None``: the same list.

    What :func:`search_terms` and :func:`stem` do in three passes over a turn (its words in the
    order of their last occurrence, stop words and single characters dropped, each stemmed, the
    stems' first occurrences kept), done once per distinct word, with each word's stem remembered
    across turns. The PostgreSQL replay stems every stored turn in the client (SQLite's FTS5 does
    that work in C), and those passes were the biggest part of what it costs on the client beyond
    SQLite's replay.
    """
    if text.isascii():
        words = text.encode("ascii").translate(_ASCII_WORDS).decode("ascii").split()
    else:
        words = _WORD.findall(text.lower())
    # A word's last occurrence orders it (search_terms keeps the newest of repeated terms).
    unique = list(dict.fromkeys(reversed(words)))
    unique.reverse()
    stems = _STEMS
    got: list[str | None] = list(map(stems.get, unique))
    if None in got:
        missing = [w for w, g in zip(unique, got, strict=True) if g is None]
        kept = [w for w in missing if len(w) >= 2 and w not in _EN_STOP]
        found = dict.fromkeys(missing, "")
        if kept:
            found.update(zip(kept, stem(kept), strict=True))
        if len(stems) + len(found) > _STEMS_MAX:
            stems.clear()
        stems.update(found)  # one call: a thread reading meanwhile sees each entry whole
        got = [found[w] if g is None else g for w, g in zip(unique, got, strict=True)]
    kept_stems = dict.fromkeys(got)
    kept_stems.pop("", None)  # the dropped words' mark (no None is left: each was found above)
    return cast("list[str]", list(kept_stems))
