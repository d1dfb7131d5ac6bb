"""Text helpers shared by the deterministic extractors: cleaning, splitting, script and keys."""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable
from typing import NamedTuple

from convmem_graph.text._lazy_re import lazy_compile
from convmem_graph.text.cjk import IDEOGRAPHS
from convmem_graph.text.keys import subject_key

__all__ = [
    "Clause",
    "clean_text",
    "contains_any",
    "has_cjk",
    "is_cjk_text",
    "norm_key",
    "norm_text",
    "split_clauses",
]

_CJK = lazy_compile(f"[{IDEOGRAPHS}]")
_LATIN = lazy_compile(r"[A-Za-z]")
# Spaces next to a CJK character carry no meaning (ASR output, pre-segmented corpora).
_CJK_SPACE = lazy_compile(
    r"(?<=[\u3000-\u303f\u3400-\u9fff\uff00-\uffef])[ \t\u3000]+"
    r"(?=[\u3000-\u303f\u3400-\u9fff\uff00-\uffef\d])"
    r"|(?<=[\d])[ \t\u3000]+(?=[\u3400-\u9fff])"
)
# Bracketed tags: "[app] ...", "[think API injected] ...", "[image]", IM face placeholders "[得意]".
_TAG = lazy_compile(r"\[[^\[\]\n]{1,40}\]")
_LEADING_ANNOTATION = lazy_compile(r"^\s*[（(](?:文字|语音|text|voice|typed)[）)]\s*", re.IGNORECASE)
_SENTENCE = lazy_compile(r"[^。！？!?；;\n]+[。！？!?；;]*")
# Not after a title or a saint's abbreviation: "St. Mary's hospital", "Dr. Lee" are one sentence.
# The period first, the titles looked behind from after it: the same matches, and the scan only
# stops at periods (with the look-behinds first, all eight ran at every character).
_EN_PERIOD = lazy_compile(
    r"\.(?<!\bSt\.)(?<!\bMt\.)(?<!\bDr\.)(?<!\bMr\.)(?<!\bMs\.)(?<!\bMrs\.)(?<!\bJr\.)(?<!\bSr\.)"
    r"(?<=[A-Za-z0-9)\"']\.)(?:\s+|(?=[\u4e00-\u9fff]))(?=[A-Z\"'\u4e00-\u9fff])"
)
# A colon between digits is a clock time ("6:30"), not a clause break.
_ZH_CLAUSE = lazy_compile(r"[，,]|(?<!\d)[：:]|[：:](?!\d)")
# Split English only where a new first-person clause (or a trailing "remember that") starts, a
# sentence adverb allowed between the conjunction and "I" ("and honestly I", "but sometimes I"), or
# where a comma and a conjunction start a clause about someone else or a consequence ("..., and he
# named it Nibbles", "..., so no red meat for me", "..., so please ..."): that clause is not part
# of the first one's object. A list ("hiking, swimming and reading") has no such start.
_EN_ADVERBS = r"(?:(?:also|honestly|actually|sometimes|usually|still|now|then|really|frankly|luckily) )?"
_EN_CLAUSE = lazy_compile(
    rf"[,:;] *(?=(?:and |but |so |because |cause |plus |also )?{_EN_ADVERBS}(?:I|my|My|remember|you know|haha"
    r"|lol)\b)"
    rf"|[,;] *(?=(?:and|but|so) {_EN_ADVERBS}(?:he|she|they|we|it|his|her|their|our|please|no)\b)"
    # ", but cheese doesn't bother me": what follows "but" qualifies, it is not the first clause's object.
    r"|, *(?=but \w)"
    r"|[,;] *(?=(?:he|she|they)(?:'s|'re| is| are| was| were)\b)"
    r"|, *(?=so (?!much|many|far|long|that|good|well|glad|happy|much)\w)"
    rf"| (?:and|but|so|because|cause|plus) (?={_EN_ADVERBS}(?:I|my)\b)"
    r"| (?=(?:and|but) (?:he|she|they)\b)| -+ "
)
#: A piece every match of ``_EN_CLAUSE`` holds (it is case-sensitive): a punctuation mark of its
#: comma branches, a conjunction between spaces or a dash after a space. Four English sentences in
#: ten hold none, and the split scans every space of them (7.6 us a LoCoMo sentence, issue 24).
_EN_CLAUSE_PIECES = (",", ";", ":", " and ", " but ", " so ", " because ", " cause ", " plus ", " -")
_SPACES = lazy_compile(r"[ \t]{2,}")
_EDGE_CHARS = " \t\r\n\"'“”‘’「」『』《》()（）-–—~～…·.,，。!！?？;；:：\u3000"
_KEY_DROP = lazy_compile(r"[\s\"'“”‘’「」『』《》()（）\-–—~～…·.,，。!！?？;；:：、]+")


def contains_any(text: str, words: tuple[str, ...] | str) -> bool:
    """Return whether any of ``words`` occurs in ``text`` (a plain loop: faster than ``any()``)."""
    for w in words:
        if w in text:
            return True
    return False


def has_cjk(text: str) -> bool:
    """Return whether ``text`` contains at least one CJK ideograph."""
    # The ideographs lie above ASCII: an ASCII text holds none, known without a scan.
    return not text.isascii() and _CJK.search(text) is not None


def is_cjk_text(text: str) -> bool:
    """Return whether ``text`` is mainly Chinese (more CJK characters than Latin letters)."""
    cjk = len(_CJK.findall(text))
    if cjk == 0:
        return False
    return cjk >= len(_LATIN.findall(text)) / 4


def clean_text(text: str) -> str:
    """NFKC-normalize, unify quotes, drop spaces around CJK, and drop bracketed tags."""
    text = unicodedata.normalize("NFKC", text)
    if "’" in text or "‘" in text:
        text = text.replace("’", "'").replace("‘", "'")
    if "(" in text or "（" in text:
        text = _LEADING_ANNOTATION.sub("", text)
    if "[" in text:
        text = _TAG.sub(" ", text)
    if has_cjk(text):
        text = _CJK_SPACE.sub("", text)
    if "  " in text or "\t" in text:
        text = _SPACES.sub(" ", text)
    return text.strip()


class Clause(NamedTuple):
    """One clause of a user message, with the script it is written in.

    Attributes:
        text: The clause without its trailing punctuation.
        zh: Whether the clause is Chinese.
        question: Whether the clause ends a sentence closed by a question mark.
        sentence: Index of the sentence the clause belongs to (clauses of one sentence share context).
    """

    text: str
    zh: bool
    question: bool
    sentence: int


def split_clauses(
    text: str, keep_en: Callable[[str], bool] | None = None, *, cjk: bool | None = None
) -> list[Clause]:
    """Split cleaned text into sentences, then clauses, each tagged with its script.

    Chinese sentences split at commas (the subject of later clauses is usually omitted and
    inherited); English sentences split only where a new first-person clause starts, so lists
    ("hiking, swimming and reading") stay whole.

    Args:
        text: Cleaned text (see :func:`clean_text`).
        keep_en: Optional cheap filter; English sentences for which it returns False are dropped
            before clause splitting (they cannot state anything the rules read).
        cjk: Whether ``text`` contains CJK, when the caller already knows.
    """
    clauses: list[Clause] = []
    index = 0
    any_cjk = has_cjk(text) if cjk is None else cjk
    for m in _SENTENCE.finditer(text):
        raw = m.group(0)
        for sentence in _EN_PERIOD.split(raw) if "." in raw else (raw,):
            body = sentence.strip(_EDGE_CHARS)
            if not body:
                continue
            asks = sentence.rstrip().endswith(("?", "？"))
            zh = any_cjk and has_cjk(body)
            if not zh and keep_en is not None and not keep_en(body):
                index += 1
                continue
            if zh:
                parts = _ZH_CLAUSE.split(body)
            else:
                parts = _EN_CLAUSE.split(body) if contains_any(body, _EN_CLAUSE_PIECES) else [body]
            last = len(parts) - 1
            for i, part in enumerate(parts):
                part = part.strip(_EDGE_CHARS)
                if part:
                    clauses.append(Clause(part, zh and has_cjk(part), asks and i == last, index))
            index += 1
    return clauses


def norm_text(text: str) -> str:
    """Normalize text for duplicate detection: NFKC, lower case, no spaces or punctuation."""
    return _KEY_DROP.sub("", unicodedata.normalize("NFKC", text).lower())


def norm_key(text: str) -> str:
    """Normalize the subject part of a fragment key (``The Piano!`` -> ``piano``, ``跑步了`` -> ``跑步``).

    The one key spelling of :mod:`convmem_graph.text.keys` (see :func:`subject_key`):
    spaces become ``_`` (``go to gym`` -> ``go_to_gym``).
    """
    return subject_key(text)
