"""The fragment key scheme shared by every extractor, reconciliation and variable inference.

A key is ``<prefix>:<subject>`` (the table of prefixes is in
:mod:`convmem_graph.extractors.heuristic`). The subject is written in the words the user used, in
their language, and normalized by :func:`subject_key`: NFKC, lower case, no edge punctuation or
articles, runs of spaces as one ``_`` (``food:香菜``, ``allergy:mango``, ``habit:go_to_the_gym``).

Two forms are used:

- :func:`normalize_key` on write: what an extractor stores. Only the spelling is normalized, so a
  model's ``Diet:Spicy Food`` is stored as ``diet:spicy_food``.
- :func:`canonical_key` on read: what reconciliation and variable inference compare. It also maps
  the prefixes of older prompts and hand-written keys to the shared ones (``diet:`` -> ``food:``,
  ``hobby:`` and ``preference:`` -> ``pref:``, ``event:`` -> ``plan:``), so stored fragments with
  either spelling relate to new candidates.

Example:
    >>> subject_key("The Piano!"), subject_key("go to  the gym"), subject_key("跑步了")
    ('piano', 'go_to_the_gym', '跑步')
    >>> canonical_key("Diet:Spicy Food"), canonical_key("hobby:running")
    ('food:spicy_food', 'pref:running')
"""

from __future__ import annotations

import re
import unicodedata
from functools import lru_cache

from convmem_graph._text_caches import holds_text
from convmem_graph.text.cjk import IDEOGRAPHS

__all__ = [
    "KEY_PREFIXES",
    "LEGACY_PREFIXES",
    "canonical_key",
    "key_prefix",
    "key_subject",
    "normalize_key",
    "subject_key",
]

#: The prefixes both extractors write.
KEY_PREFIXES = frozenset(
    {"profile", "allergy", "food", "pref", "habit", "health", "state", "pet", "family", "plan", "goal"}
)
#: Prefixes of older prompts and hand-written keys, read as the shared one.
LEGACY_PREFIXES = {"diet": "food", "hobby": "pref", "preference": "pref", "event": "plan"}

_EDGE_CHARS = " \t\r\n\"'“”‘’「」『』《》()（）-–—~～…·.,，。!！?？;；:：\u3000_"
_ARTICLE = re.compile(r"^(?:a|an|the|some|my|their)[\s_]+")
# A lone 哈 ends words ("二哈", a husky); only laughter (哈哈) is a particle to drop.
_ZH_TRAIL = re.compile(r"(?:了|的|啦|呀|啊|吧|哦|哈哈+|呢|嘛|喔|噢|哟)+$")
_CJK = re.compile(f"[{IDEOGRAPHS}]")
_SPACES = re.compile(r"[\s_]+")
_MAX_SUBJECT = 60


def subject_key(text: str) -> str:
    """Normalize the subject part of a key (``The Piano!`` -> ``piano``, ``跑步了`` -> ``跑步``).

    NFKC, lower case, edge punctuation and a leading article removed, Chinese sentence particles
    removed, spaces between words as one ``_``; at most 60 characters, cut at a word boundary.
    """
    text = unicodedata.normalize("NFKC", text).lower().strip(_EDGE_CHARS)
    text = _ARTICLE.sub("", text)
    if _CJK.search(text):
        # Spaces carry no meaning next to Chinese characters ("跑 步" from segmented text).
        joined = re.sub(r"(?<=[\u3400-\u9fff])\s+|\s+(?=[\u3400-\u9fff])", "", text)
        # A subject made only of particles ("哈哈", "啦") stays as it is rather than vanishing.
        text = _ZH_TRAIL.sub("", joined) or joined
    text = _SPACES.sub("_", text.strip(_EDGE_CHARS))
    if len(text) > _MAX_SUBJECT:
        cut = text[:_MAX_SUBJECT]
        text = cut.rsplit("_", 1)[0] if "_" in cut else cut
    return text


def normalize_key(key: str, default_prefix: str = "") -> str:
    """Normalize a key's spelling: lower-case prefix, each ``:``-part through :func:`subject_key`.

    A key without ``:`` gets ``default_prefix`` (when given). Returns ``""`` when the prefix or the
    subject is empty (``":"``, ``"food:"``).

    Example:
        >>> normalize_key("Profile:Birth Year"), normalize_key("spicy food", "diet"), normalize_key("food: ")
        ('profile:birth_year', 'diet:spicy_food', '')
    """
    key = unicodedata.normalize("NFKC", key).strip()
    if ":" not in key:
        subject = subject_key(key)
        prefix = subject_key(default_prefix)
        return f"{prefix}:{subject}" if prefix and subject else subject
    prefix, rest = key.split(":", 1)
    parts = [subject_key(p) for p in rest.split(":")]
    if not subject_key(prefix) or not parts[0]:
        return ""
    return ":".join([subject_key(prefix), *(p for p in parts if p)])


@holds_text
@lru_cache(maxsize=8192)
def canonical_key(key: str) -> str:
    """Return the key as compared on read: :func:`normalize_key` plus legacy prefixes mapped.

    Cached: reconciliation and inference call it for every stored fragment.

    Example:
        >>> canonical_key("diet:coriander"), canonical_key("pref:favorite color")
        ('food:coriander', 'pref:favorite_color')
    """
    key = normalize_key(key)
    prefix, sep, rest = key.partition(":")
    prefix = LEGACY_PREFIXES.get(prefix, prefix)
    if prefix == "pref" and rest.startswith("favorite") and _CJK.search(rest):
        # The Chinese favourite slot of earlier versions ("pref:favorite 颜色").
        rest = "最喜欢的" + rest.removeprefix("favorite").lstrip("_")
    return f"{prefix}{sep}{rest}" if sep else key


def key_prefix(key: str) -> str:
    """Return the canonical prefix of a key (``Diet:x`` -> ``food``)."""
    return canonical_key(key).partition(":")[0]


def key_subject(key: str) -> str:
    """Return a key's subject for display: ``food:spicy_food`` -> ``spicy food``."""
    return canonical_key(key).partition(":")[2].replace("_", " ").strip()
