"""Shared pieces of the English rules: the prepared clause, object checks, third-person rewriting."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from convmem_graph.extractors._facts import Fact, RuleContext
from convmem_graph.text._lazy_re import lazy_compile
from convmem_graph.text.scripts import norm_key
from convmem_graph.text.timeexpr import TimeMatch, render_en

__all__ = [
    "BAD_OBJECT_START",
    "OBJ",
    "PLACE",
    "VAGUE",
    "YOU",
    "EnClause",
    "Rule",
    "article",
    "conj",
    "food_key",
    "ok_object",
    "third_person",
    "transient_fact",
    "trim_object",
]

_PRONOUNS = (
    (lazy_compile(r"\bmyself\b", re.I), "themselves"),
    (lazy_compile(r"\bmy\b", re.I), "their"),
    (lazy_compile(r"\bmine\b", re.I), "theirs"),
    (lazy_compile(r"\bme\b(?!-)"), "them"),  # not "me-time"
    (lazy_compile(r"\bI'm\b"), "they're"),
    (lazy_compile(r"\bI've\b"), "they've"),
    (lazy_compile(r"\bI\b"), "they"),
    (lazy_compile(r"\bour\b", re.I), "their"),
    (lazy_compile(r"\bus\b"), "them"),
    (lazy_compile(r"\bwe\b", re.I), "they"),
)
YOU = lazy_compile(r"\byou\b|\byour\b|\byours\b", re.IGNORECASE)
BAD_OBJECT_START = lazy_compile(
    r"^(?:it|that|this|those|these|them|him|her|how|what|when|where|why|which|"
    r"who|the way|the fact|to hear|to see|"
    r"hearing|seeing|being|having|doing|so|such|too|all of|everything|anything|"
    r"something|nothing|when|if|because|"
    r"the idea|the thought|the feeling|one|ones|yours|a lot|lots|both|each|every|"
    # A time is not an object: "I stopped drinking last year" has no drink after "drinking".
    r"last|next|yesterday|today|tonight|tomorrow|recently|lately|earlier)\b",
    re.IGNORECASE,
)


def third_person(text: str) -> str:
    for rx, repl in _PRONOUNS:
        text = rx.sub(repl, text)
    return text


def article(noun: str) -> str:
    return "an" if noun[:1].lower() in "aeiou" else "a"


_ES = ("s", "sh", "ch", "x", "z", "o")
_IRREGULAR = {"have": "has", "be": "is", "do": "does", "go": "goes", "'m": "is"}


def conj(verb: str) -> str:
    """Third person singular of a base verb (``go`` -> ``goes``, ``study`` -> ``studies``)."""
    low = verb.lower()
    if low in _IRREGULAR:
        return _IRREGULAR[low]
    if low.endswith("y") and len(low) > 1 and low[-2] not in "aeiou":
        return verb[:-1] + "ies"
    if low.endswith(_ES):
        return verb + "es"
    return verb + "s"


@dataclass(slots=True)
class EnClause:
    core: str
    raw: str
    habit_pre: str
    habit_post: str
    temp: str
    when: TimeMatch | None

    def when_text(self) -> str:
        return f" {render_en(self.when.period)}" if self.when else ""

    def temp_text(self) -> str:
        return f" {self.temp.lower()}" if self.temp else ""


Rule = Callable[[EnClause, RuleContext], list[Fact] | None]

OBJ = r"(.{1,80}?)"
PLACE = r"([A-Z][\w.'-]*(?:(?:\s+|,\s*)[A-Z][\w.'-]*){0,3})"


def food_key(obj: str) -> str:
    return f"food:{norm_key(obj)}"


def transient_fact(content: str, key: str, value: str, ctx: RuleContext, category: str = "state") -> Fact:
    return Fact(content, category, key, value, transient=True, expires_at=ctx.ttl_expiry(), confidence=0.7)


VAGUE = lazy_compile(
    r"\b(?:him|her|them|it|its|these|those|he|she|they|this|that|there|here|one|ones)\b", re.IGNORECASE
)
_OBJECT_STOP = lazy_compile(
    r"^(?:but|so|because|cause|which|that|it|they|he|she|we|i|as|since|though|"
    r"although|especially|like|coming|"
    r"just|when|if|and (?:i|it|they|that|this|we|he|she))\b",
    re.IGNORECASE,
)


_TOO_VAGUE = frozenset("few lot bit little couple while few things stuff something more".split())


_CLAUSE_TAIL = lazy_compile(
    # A hedge goes with the reason it hedges: "..., probably because the bed is too hard".
    r"(?:\s*,?\s+(?:probably|maybe|perhaps|possibly|partly|mostly|mainly|likely|just))?"
    # "as" opens a clause, but "such as" opens the list it names ("activities such as hiking, ...").
    r"\s+(?:because|cause|since|as(?<!such as)|when|whenever|but|so that|which|the most|more than anything"
    # A second verb with its own adverb is another statement: "cooking curries and often try ...".
    r"|and (?:often|usually|always|sometimes|also|regularly|frequently|typically|occasionally))\b",
    re.IGNORECASE,
)


def trim_object(obj: str) -> str:
    """Keep a list ("hiking, swimming, and reading") but cut a following clause (", it's so fun")."""
    obj = _CLAUSE_TAIL.split(obj.strip(" ,.;!"), maxsplit=1)[0]
    if "," not in obj and " - " not in obj:
        return obj
    parts = re.split(r"\s*,\s*|\s+-+\s+", obj)
    kept = [parts[0]]
    for part in parts[1:]:
        if not part or len(part.split()) > 3 or _OBJECT_STOP.match(part):
            break
        kept.append(part)
    return ", ".join(kept)


# A time is not an object: "I quit drinking about two years ago".
_TIME_ONLY = lazy_compile(r"^(?:about|around|almost|nearly|over|some)?\s*[\w ]{1,20}\bago$", re.IGNORECASE)


def ok_object(obj: str) -> bool:
    if _TIME_ONLY.match(obj.strip(" ,.;!")):
        return False
    if not obj or len(obj.split()) > 12 or YOU.search(obj) or BAD_OBJECT_START.match(obj):
        return False
    core = re.sub(r"^(?:to|a|an|the)\s+", "", obj, flags=re.IGNORECASE)
    return len(core) > 2 and core.lower() not in _TOO_VAGUE and not VAGUE.search(core)
