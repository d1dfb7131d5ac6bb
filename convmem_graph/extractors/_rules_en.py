"""English first-person statement rules of the heuristic extractor.

A clause must contain a first-person word to be looked at (a cheap gate that keeps the extractor
fast on long English transcripts); it is then cleaned (fillers, "remember that", time, habit and
temporary markers) and matched against the rules below in order, the first match winning. Output is
third person: "User is allergic to mango.".
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from convmem_graph.extractors._facts import Fact, RuleContext
from convmem_graph.extractors._lexicon import EN_FOODS, EN_JOB_NOUNS, EN_RELATIONS, EN_SPECIES, en_relation
from convmem_graph.extractors._text import Clause, contains_any, norm_key
from convmem_graph.extractors._timeexpr import TimeMatch, find_en, render_en

__all__ = ["could_state", "extract_en_clause"]

_FILLERS = re.compile(
    r"^(?:(?:by the way|btw|oh|ah|well|actually|also|yeah|yes|yep|so|anyway|"
    r"honestly|and|but|haha|lol|hey|um|uh|"
    r"ok|okay|plus|fun fact|to be honest|tbh|you know what|just so you know|wait|oh yeah|right|no|nah|"
    r"(?:please )?(?:remember|note|keep in mind|don't forget)(?: that)?)[,!:.]?\s+)+",
    re.IGNORECASE,
)
_TRAILING = (
    "remember that",
    "just so you know",
    "you know",
    "haha",
    "lol",
    "lmao",
    "though",
    "too",
    "as well",
    "right",
    "now",
    "anymore",
    "actually",
    "honestly",
    "so much",
    "a lot",
    "very much",
)
_REQUEST = re.compile(
    r"^(?:can|could|would|will) you\b|^(?:please\s+)?(?:remind|tell|help|show|"
    r"give|send|call|let) me\b|^let's\b",
    re.IGNORECASE,
)
_QUESTION_START = re.compile(
    r"^(?:do|does|did|can|could|would|will|should|is|are|was|were|have|has|what|why|how|where|when|who|which|"
    r"whose|shall|may|am|isn't|aren't|don't|didn't|wanna)\b",
    re.IGNORECASE,
)
_HABIT_PRE = re.compile(
    r"\b(usually|often|always|normally|regularly|typically|generally|frequently|sometimes|mostly)\s+",
    re.IGNORECASE,
)
_HABIT_POST = re.compile(
    r"\s+(every\s+(?:single\s+)?(?:day|morning|evening|night|week|weekend|month|"
    r"year|monday|tuesday|wednesday|"
    r"thursday|friday|saturday|sunday)|daily|weekly|on weekends|on the weekends|each (?:day|morning|week)|"
    r"most days|most mornings|most weekends)\b",
    re.IGNORECASE,
)
_TEMP = re.compile(
    r",?\s*\b(lately|recently|these days|for now|at the moment|currently|right now|nowadays|this week)\b,?",
    re.IGNORECASE,
)
_CONTRACTION = re.compile(
    r"\bI am\b|\b[Ii]'m\b|\bim\b|\bIm\b|\bi\b|\bI have been\b|\bI do not\b|\bI "
    r"cannot\b|\bI can not\b|\bI will\b"
)
_CONTRACTED = {
    "I have been": "I've been",
    "I do not": "I don't",
    "I cannot": "I can't",
    "I can not": "I can't",
    "I will": "I'll",
    "i": "I",
}
_PRONOUNS = (
    (re.compile(r"\bmyself\b", re.I), "themselves"),
    (re.compile(r"\bmy\b", re.I), "their"),
    (re.compile(r"\bmine\b", re.I), "theirs"),
    (re.compile(r"\bme\b"), "them"),
    (re.compile(r"\bI'm\b"), "they're"),
    (re.compile(r"\bI've\b"), "they've"),
    (re.compile(r"\bI\b"), "they"),
    (re.compile(r"\bour\b", re.I), "their"),
    (re.compile(r"\bus\b"), "them"),
    (re.compile(r"\bwe\b", re.I), "they"),
)
_YOU = re.compile(r"\byou\b|\byour\b|\byours\b", re.IGNORECASE)
_BAD_OBJECT_START = re.compile(
    r"^(?:it|that|this|those|these|them|him|her|how|what|when|where|why|which|"
    r"who|the way|the fact|to hear|to see|"
    r"hearing|seeing|being|having|doing|so|such|too|all of|everything|anything|"
    r"something|nothing|when|if|because|"
    r"the idea|the thought|the feeling|one|ones|yours|a lot|lots|both|each|every)\b",
    re.IGNORECASE,
)


def _third(text: str) -> str:
    for rx, repl in _PRONOUNS:
        text = rx.sub(repl, text)
    return text


def _article(noun: str) -> str:
    return "an" if noun[:1].lower() in "aeiou" else "a"


_ES = ("s", "sh", "ch", "x", "z", "o")
_IRREGULAR = {"have": "has", "be": "is", "do": "does", "go": "goes", "'m": "is"}


def _conj(verb: str) -> str:
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
class _Clause:
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


Rule = Callable[[_Clause, RuleContext], list[Fact] | None]

_OBJ = r"(.{1,80}?)"
_PLACE = r"([A-Z][\w.'-]*(?:(?:\s+|,\s*)[A-Z][\w.'-]*){0,3})"

# ----------------------------------------------------------------- identity

_NAME = re.compile(
    r"^(?:[Mm]y name is|[Mm]y name's|I'm called|[Cc]all me|[Pp]eople call me|[Ee]veryone calls me)\s+"
    r"([A-Z][\w'-]*(?:\s+[A-Z][\w'-]*){0,2})$"
)
_AGE = re.compile(r"^I'm\s+(\d{1,3})(?:\s*(?:years?|yrs?)(?:[\s-]*old)?)?(?:\s+(?:now|already|today))?$")
_TURNED = re.compile(r"^I (?:just )?turned\s+(\d{1,3})$")
_BORN = re.compile(r"^I was born in\s+(?:(\d{4})|" + _PLACE + r")$")
_MARITAL = re.compile(r"^I'm\s+(?:happily\s+|recently\s+|now\s+)?(married|single|divorced|engaged|widowed)$")


def _identity(c: _Clause, ctx: RuleContext) -> list[Fact] | None:
    s = c.core
    m = _NAME.match(s)
    if m:
        name = m.group(1)
        return [
            Fact(
                f"User's name is {name}.", "profile", "profile:name", name, single_valued=True, confidence=0.9
            )
        ]
    m = _AGE.match(s) or _TURNED.match(s)
    if m:
        age = int(m.group(1))
        if 3 <= age <= 110:
            year = ctx.today.year - age
            content = f"User was born in {year} (age {age} in {ctx.today.year})."
            return [
                Fact(content, "profile", "profile:birth_year", str(year), single_valued=True, confidence=0.85)
            ]
    m = _BORN.match(s)
    if m:
        if m.group(1):
            year = int(m.group(1))
            if 1900 <= year <= ctx.today.year:
                content = f"User was born in {year}."
                return [
                    Fact(
                        content,
                        "profile",
                        "profile:birth_year",
                        str(year),
                        single_valued=True,
                        confidence=0.9,
                    )
                ]
            return None
        place = m.group(2)
        content = f"User was born in {place}."
        return [Fact(content, "profile", "profile:hometown", place, single_valued=True, confidence=0.8)]
    m = _MARITAL.match(s)
    if m:
        value = m.group(1)
        return [
            Fact(f"User is {value}.", "profile", "profile:marital", value, single_valued=True, confidence=0.8)
        ]
    return None


# ----------------------------------------------------------------- place and work

_JOB = re.compile(
    r"^(?:I'm|I work as|I'm working as|I've been working as|I'm now|I became)\s+(?:a|an)\s+"
    r"((?:[\w-]+\s+){0,3}?[\w-]+?)(?:\s+(in|at|for)\s+(.{2,60}))?$"
)
_WORK_AT = re.compile(
    r"^I(?:'ve been)? work(?:ing)? (?:at|for)\s+(.{2,60})$|^I'm working (?:at|for)\s+(.{2,60})$"
)
_WORK_IN = re.compile(r"^I work in\s+(.{2,60})$")
_LIVE = re.compile(
    r"^I(?:'m| have| 've|'ve)?\s*(live|living|been living|based|moved|just moved|"
    r"recently moved|relocated|settled)"
    r"\s+(?:in|to)\s+" + _PLACE + r"(?:\s+(?:now|recently|last \w+|with .{1,40}|a while ago|\w+ years ago))?$"
)
_FROM = re.compile(r"^I'm (?:originally )?from\s+" + _PLACE + r"$|^I grew up in\s+" + _PLACE + r"$")


def _work(c: _Clause, ctx: RuleContext) -> list[Fact] | None:
    s = c.core
    m = _JOB.match(s)
    if m and m.group(1).split()[-1].lower() in EN_JOB_NOUNS:
        job = m.group(1)
        facts = [
            Fact(
                f"User works as {_article(job)} {job}.",
                "profile",
                "profile:occupation",
                job,
                single_valued=True,
                confidence=0.85,
            )
        ]
        where = m.group(3)
        if where and m.group(2) == "in" and where[:1].isupper():
            facts.append(
                Fact(
                    f"User works in {where}.",
                    "profile",
                    "profile:city",
                    where,
                    single_valued=True,
                    confidence=0.8,
                )
            )
        elif where and not _YOU.search(where):
            where = _third(where)
            facts.append(
                Fact(
                    f"User works at {where}.",
                    "profile",
                    "profile:workplace",
                    where,
                    single_valued=True,
                    confidence=0.75,
                )
            )
        return facts
    m = _WORK_AT.match(s)
    if m:
        where = _third(m.group(1) or m.group(2))
        if _YOU.search(where) or len(where.split()) > 6:
            return None
        return [
            Fact(
                f"User works at {where}.",
                "profile",
                "profile:workplace",
                where,
                single_valued=True,
                confidence=0.75,
            )
        ]
    m = _WORK_IN.match(s)
    if m and not _YOU.search(m.group(1)) and len(m.group(1).split()) <= 6:
        where = _third(m.group(1))
        key = "profile:city" if where[:1].isupper() else "profile:workplace"
        return [Fact(f"User works in {where}.", "profile", key, where, single_valued=True, confidence=0.75)]
    m = _LIVE.match(s)
    if m:
        verb, place = m.group(1), m.group(2)
        content = (
            f"User moved to {place}." if "moved" in verb or "relocated" in verb else f"User lives in {place}."
        )
        return [Fact(content, "profile", "profile:city", place, single_valued=True, confidence=0.85)]
    m = _FROM.match(s)
    if m:
        place = m.group(1) or m.group(2)
        return [
            Fact(
                f"User is from {place}.",
                "profile",
                "profile:hometown",
                place,
                single_valued=True,
                confidence=0.8,
            )
        ]
    return None


# ----------------------------------------------------------------- health, food

_ALLERGY = re.compile(
    r"^I'm\s+(not\s+)?(?:also\s+|severely\s+|very\s+|really\s+|super\s+|deathly\s+)?allergic to\s+"
    + _OBJ
    + "$"
)
_ALLERGY_HAVE = re.compile(r"^I(?:'ve| have)(?: got)?\s+(?:a|an)\s+(.{1,30}?)\s+allergy$")
_NO_EAT = re.compile(
    r"^I (?:don't|never|can't|no longer|won't|do not|try not to)\s+(eat|drink)\s+" + _OBJ + "$"
)
_NOT_EATING = re.compile(r"^I'm\s+(?:not eating|not drinking|avoiding|staying away from)\s+" + _OBJ + "$")
_AVOID = re.compile(r"^I (?:avoid|stay away from)\s+" + _OBJ + "$")
_VEG = re.compile(r"^I'm\s+(?:a\s+|now\s+|strictly\s+)?(vegetarian|vegan|pescatarian)$")
_TRYING = re.compile(r"^I'm\s+(?:trying|trying out|experimenting with|testing out)\s+" + _OBJ + "$")
_BEEN = re.compile(r"^I've been\s+" + _OBJ + "$")
_STATE = re.compile(
    r"^I'm\s+(?:feeling\s+)?(sick|ill|unwell|pregnant|on a diet|dieting|fasting|"
    r"injured|recovering from .{2,40}|"
    r"training for .{2,40}|studying for .{2,40}|preparing for .{2,40}|looking for a (?:new )?job|job hunting|"
    r"sleeping badly|not sleeping well)$"
)
_AILMENT = re.compile(
    r"^I(?:'ve| have)(?: got)?\s+((?:a\s+|an\s+|the\s+)?"
    r"(?:cold|fever|flu|cough|headache|stomach ?ache|migraine|"
    r"sore throat|back pain|toothache|hangover|stomach (?:problems|issues|trouble)))$"
)
_BODY_HURTS = re.compile(
    r"^[Mm]y (stomach|back|head|knee|throat|tooth|leg|arm|shoulder|neck|wrist|ankle)\s+"
    r"(hurts|is (?:killing me|bad|upset|sore|acting up))$"
)


def _food_key(obj: str) -> str:
    return f"food:{norm_key(obj)}"


def _transient_fact(content: str, key: str, value: str, ctx: RuleContext, category: str = "state") -> Fact:
    return Fact(content, category, key, value, transient=True, expires_at=ctx.ttl_expiry(), confidence=0.7)


def _health_food(c: _Clause, ctx: RuleContext) -> list[Fact] | None:
    s = c.core
    m = _ALLERGY.match(s) or _ALLERGY_HAVE.match(s)
    if m:
        neg = m.re is _ALLERGY and bool(m.group(1))
        item = (m.group(2) if m.re is _ALLERGY else m.group(1)).strip()
        if _YOU.search(item) or _BAD_OBJECT_START.match(item) or len(item.split()) > 6:
            return None
        item = _third(item)
        content = f"User is {'not ' if neg else ''}allergic to {item}."
        return [
            Fact(
                content,
                "health",
                f"allergy:{norm_key(item)}",
                item,
                polarity=-1 if neg else 1,
                confidence=0.9,
            )
        ]
    m = _VEG.match(s)
    if m:
        return [Fact(f"User is {m.group(1)}.", "diet", f"food:{m.group(1)}", m.group(1), confidence=0.85)]
    m = _NO_EAT.match(s)
    if m and _ok_object(m.group(2)):
        item = _third(m.group(2))
        content = f"User doesn't {m.group(1)} {item}{c.temp_text()}."
        fact = Fact(content, "diet", _food_key(item), item, polarity=-1, confidence=0.8)
        if c.temp:
            fact.transient, fact.expires_at = True, ctx.ttl_expiry()
        return [fact]
    m = _NOT_EATING.match(s)
    if m and _ok_object(m.group(1)):
        item = _third(m.group(1))
        fact = _transient_fact(f"User is avoiding {item}{c.temp_text()}.", _food_key(item), item, ctx, "diet")
        fact.polarity = -1
        return [fact]
    m = _AVOID.match(s)
    if m and _ok_object(m.group(1)):
        item = _third(m.group(1))
        food = item.lower() in EN_FOODS
        key = _food_key(item) if food else f"pref:{norm_key(item)}"
        return [
            Fact(
                f"User avoids {item}.",
                "diet" if food else "preference",
                key,
                item,
                polarity=-1,
                confidence=0.75,
            )
        ]
    m = _TRYING.match(s)
    if m and _ok_object(m.group(1)):
        item = _third(m.group(1))
        return [
            _transient_fact(f"User is trying {item}{c.temp_text()}.", f"state:{norm_key(item)}", item, ctx)
        ]
    m = _STATE.match(s)
    if m:
        item = _third(m.group(1))
        return [_transient_fact(f"User is {item}{c.temp_text()}.", f"state:{norm_key(item)}", item, ctx)]
    m = _AILMENT.match(s)
    if m:
        item = m.group(1)
        return [_transient_fact(f"User has {item}{c.temp_text()}.", f"state:{norm_key(item)}", item, ctx)]
    m = _BODY_HURTS.match(s)
    if m:
        content = f"User's {m.group(1)} {m.group(2).replace('is ', 'is ', 1)}{c.temp_text()}."
        return [_transient_fact(content, f"state:{m.group(1)}", m.group(1), ctx)]
    if c.temp:
        m = _BEEN.match(s)
        if (
            m
            and _ok_object(m.group(1))
            and not m.group(1).startswith(("to ", "there", "here", "so ", "a bit", "busy"))
        ):
            item = _third(m.group(1))
            return [
                _transient_fact(f"User has been {item}{c.temp_text()}.", f"state:{norm_key(item)}", item, ctx)
            ]
    return None


_VAGUE = re.compile(
    r"\b(?:him|her|them|it|its|these|those|he|she|they|this|that|there|here|one|ones)\b", re.IGNORECASE
)
_OBJECT_STOP = re.compile(
    r"^(?:but|so|because|cause|which|that|it|they|he|she|we|i|as|since|though|"
    r"although|especially|like|coming|"
    r"just|when|if|and (?:i|it|they|that|this|we|he|she))\b",
    re.IGNORECASE,
)


_TOO_VAGUE = frozenset("few lot bit little couple while few things stuff something more".split())


_CLAUSE_TAIL = re.compile(
    r"\s+(?:because|cause|since|as|when|whenever|but|so that|which|the most|more than anything)\b",
    re.IGNORECASE,
)


def _trim_object(obj: str) -> str:
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


def _ok_object(obj: str) -> bool:
    if not obj or len(obj.split()) > 12 or _YOU.search(obj) or _BAD_OBJECT_START.match(obj):
        return False
    core = re.sub(r"^(?:to|a|an|the)\s+", "", obj, flags=re.IGNORECASE)
    return len(core) > 2 and core.lower() not in _TOO_VAGUE and not _VAGUE.search(core)


# ----------------------------------------------------------------- pets, family

_NUM = r"(a|an|one|two|three|four|five|\d+)"
_SPECIES = "|".join(sorted(EN_SPECIES, key=len, reverse=True))
_PET_HAVE = re.compile(
    rf"^I(?:'ve| have)(?: got)?\s+{_NUM}\s+((?:[\w-]+\s+){{0,2}}?)({_SPECIES})(?:\s+(?:named|"
    rf"called)\s+([A-Z][\w'-]*))?$",
    re.IGNORECASE,
)
_PET_NAMED = re.compile(rf"^[Mm]y ({_SPECIES})(?:'s name is| is named| is called)\s+([A-Z][\w'-]*)$")
_PET_AGE = re.compile(
    r"^(?:[Mm]y (\w+)\s+)?([A-Z][\w'-]*)?\s*(?:is|just turned)\s+(\d+|one|two|"
    r"three|four|five|six|seven|eight|nine|ten)\s+(years?|months?)(?: old)?$"
)
_FAMILY_HAVE = re.compile(
    rf"^I(?:'ve| have)(?: got)?\s+{_NUM}\s+(?:(?:little|younger|older|big|baby|"
    rf"twin|grown|adult|teenage|wonderful|"
    rf"amazing|beautiful|lovely|great)\s+)?({EN_RELATIONS})$",
    re.IGNORECASE,
)
_FAMILY_POSS = re.compile(
    rf"^[Mm]y ({EN_RELATIONS})(?:'s| is| works| lives|'s name is| is named)\s*(.{{2,60}})$", re.IGNORECASE
)


def _pets_family(c: _Clause, ctx: RuleContext) -> list[Fact] | None:
    s = c.core
    m = _PET_HAVE.match(s)
    if m:
        num, adj, species, name = m.group(1), m.group(2).strip(), m.group(3).lower(), m.group(4)
        label = f"{adj} {species}".strip()
        if name:
            ctx.pets[name] = species
            content = f"User has {num.lower()} {label} named {name}."
            return [Fact(content, "relation", f"pet:{name.lower()}", species, confidence=0.85)]
        ctx.pets.setdefault(species, species)
        return [Fact(f"User has {num.lower()} {label}.", "relation", f"pet:{species.rstrip('s')}", species)]
    m = _PET_NAMED.match(s)
    if m:
        species, name = m.group(1).lower(), m.group(2)
        ctx.pets[name] = species
        return [
            Fact(
                f"User's {species} is named {name}.",
                "relation",
                f"pet:{name.lower()}",
                species,
                confidence=0.85,
            )
        ]
    m = _PET_AGE.match(s)
    if m and (ctx.pets or (m.group(1) or "").lower() in EN_SPECIES):
        name = m.group(2) or ""
        species = (m.group(1) or "").lower()
        if not name and species:
            name = next((n for n, sp in reversed(ctx.pets.items()) if sp == species), "")
        elif name and species in EN_SPECIES:
            ctx.pets.setdefault(name, species)
        if name in ctx.pets:
            said = f"{m.group(3)} {m.group(4)}"
            label = ctx.pets[name] if ctx.pets[name] != name else "pet"
            content = (
                f"User's {label} {name} is {said} old (as of {ctx.today.strftime('%B')} {ctx.today.year})."
            )
            return [
                Fact(content, "relation", f"pet:{name.lower()}:age", said, single_valued=True, confidence=0.8)
            ]
    m = _FAMILY_HAVE.match(s)
    if m:
        rel = m.group(2).lower()
        content = f"User has {m.group(1).lower()} {rel}."
        return [Fact(content, "relation", f"family:{en_relation(rel)}", rel, confidence=0.8)]
    m = _FAMILY_POSS.match(s)
    if m and not _YOU.search(m.group(2)):
        rel = m.group(1).lower()
        rest = _third(s[len("my ") + len(rel) :].strip())
        if rest.startswith("'s "):
            return None
        return [Fact(f"User's {rel} {rest}.", "relation", f"family:{en_relation(rel)}", rel, confidence=0.7)]
    return None


# ----------------------------------------------------------------- likes, habits

_LIKE = re.compile(
    r"^I (?:really |also |absolutely |just |still |totally |truly |especially |do |genuinely |always |kinda |"
    r"kind of |pretty much |definitely )*(love|like|enjoy|adore|prefer)\s+" + _OBJ + "$"
)
_INTO = re.compile(
    r"^I'm (?:really |also |very |super |so |totally |pretty |quite |a bit )*(into|"
    r"passionate about|keen on|obsessed with|"
    r"a (?:big |huge )?fan of|crazy about|fond of|interested in)\s+" + _OBJ + "$"
)
_FAVORITE = re.compile(r"^[Mm]y (?:all[- ]time )?favou?rite\s+([\w ]{2,30}?)\s+is\s+" + _OBJ + "$")
_DISLIKE = re.compile(
    r"^I (?:really |just |absolutely |honestly )?(?:don't|do not|never|can't) "
    r"(?:really )?(like|enjoy|love|stand)\s+" + _OBJ + "$"
)
_HATE = re.compile(
    r"^I (?:really |absolutely |totally )?(hate|dislike|detest|despise|can't stand)\s+" + _OBJ + "$"
)
_AFRAID = re.compile(r"^I'm (not a (?:big )?fan of|afraid of|scared of|terrified of)\s+" + _OBJ + "$")
_PLACE_SPLIT = re.compile(r"\s+(?:at|in|on|with|by|along|near|around|before|after)\s+")
_PAST = frozenset(
    "lost went got made took saw came left met ran bought found gave felt had was were did said".split()
)
_HABIT_CLAUSE = re.compile(r"^I\s+([A-Za-z]+)\b(.*)$")
_HABIT_VERB_BAD = re.compile(
    r"^(?:'m|am|was|were|feel|felt|think|thought|wonder|know|knew|guess|hope|"
    r"wish|want|need|have to|had|got|get|"
    r"can|could|would|will|should|do|did|don't|just|really|also|love|like|enjoy|hate|mean|say|said|see|saw|"
    r"remember|forget|try|tried|find|found|end up|come|came|make sure|tell|told|"
    r"look|didn|don|doesn|only|never|"
    r"rarely|won|can't|cannot)\b",
    re.IGNORECASE,
)


def _pref(obj: str, lead: str, polarity: int) -> Fact | None:
    """A like/dislike fact: ``lead`` is the content before the object ("User loves")."""
    obj = _trim_object(obj)
    if not _ok_object(obj):
        return None
    item = re.sub(r"^(?:to\s+|eating\s+|drinking\s+|to eat\s+|to drink\s+)", "", obj, flags=re.IGNORECASE)
    food = (
        obj.lower().startswith(("eating ", "drinking ", "to eat ", "to drink ")) or item.lower() in EN_FOODS
    )
    content = f"{lead} {_third(obj)}."
    key = _food_key(item) if food else f"pref:{norm_key(item)}"
    return Fact(
        content, "diet" if food else "preference", key, _third(item), polarity=polarity, confidence=0.8
    )


_LIST_SPLIT = re.compile(r"\s*,\s*(?:and\s+|or\s+)?|\s+(?:and|or)\s+(?=[^,]*$)")


def _prefs(obj: str, lead: str, polarity: int) -> list[Fact] | None:
    """One fact per item of a comma list ("hiking, swimming, and reading"), else one fact."""
    obj = _trim_object(obj)
    items = [i for i in _LIST_SPLIT.split(obj) if i] if "," in obj else [obj]
    facts = [f for f in (_pref(i, lead, polarity) for i in items) if f is not None]
    return facts or None


def _likes_habits(c: _Clause, ctx: RuleContext) -> list[Fact] | None:
    s = c.core
    m = _DISLIKE.match(s)
    if m:
        return _prefs(m.group(2), f"User doesn't {m.group(1)}", -1)
    m = _HATE.match(s)
    if m:
        verb = m.group(1) if " " in m.group(1) else _conj(m.group(1))
        return _prefs(m.group(2), f"User {verb}", -1)
    m = _AFRAID.match(s)
    if m:
        return _prefs(m.group(2), f"User is {m.group(1)}", -1)
    m = _LIKE.match(s)
    if m:
        adverb = f"{c.habit_pre.lower()} " if c.habit_pre else ""
        return _prefs(m.group(2), f"User {adverb}{_conj(m.group(1))}", 1)
    m = _INTO.match(s)
    if m:
        return _prefs(m.group(2), f"User is {m.group(1)}", 1)
    m = _FAVORITE.match(s)
    if m and _ok_object(m.group(2)):
        thing, value = m.group(1).lower(), _third(m.group(2))
        content = f"User's favorite {thing} is {value}."
        return [Fact(content, "preference", f"pref:favorite {norm_key(thing)}", value, single_valued=True)]
    if c.habit_pre or c.habit_post:
        m = _HABIT_CLAUSE.match(s)
        if (
            m
            and not _HABIT_VERB_BAD.match(s[2:])
            and not m.group(1).lower().endswith("ed")
            and not _VAGUE.search(m.group(2))
            and m.group(1).lower() not in _PAST
            and not _YOU.search(s)
            and len(s.split()) <= 16
        ):
            verb, tail = m.group(1), _trim_object(m.group(2))
            rest = f" {_third(tail)}" if tail else ""
            pre = f"{c.habit_pre.lower()} " if c.habit_pre else ""
            post = f" {c.habit_post.lower()}" if c.habit_post else ""
            content = f"User {pre}{_conj(verb)}{rest}{post}."
            activity = _PLACE_SPLIT.split(f"{verb} {tail}".strip())[0]
            return [Fact(content, "habit", f"habit:{norm_key(activity)}", _third(activity), confidence=0.7)]
    return None


# ----------------------------------------------------------------- plans

_PLANS = (
    # (regex, modal): the modal decides the wording and whether a date is required.
    (re.compile(r"^I'm\s+(planning|thinking about|thinking of|scheduled)\s+(?:to\s+)?" + _OBJ + "$"), ""),
    (re.compile(r"^I\s+(plan|intend)\s+(?:to\s+)?" + _OBJ + "$"), ""),
    (re.compile(r"^I'm\s+(going|about|hoping|supposed|due)\s+to\s+" + _OBJ + "$"), ""),
    (re.compile(r"^I\s+(want|hope|need|have|would like|am going)\s+to\s+" + _OBJ + "$"), ""),
    (re.compile(r"^I(?:'ll| will)\s+" + _OBJ + "$"), "will"),
    (re.compile(r"^I'd like to\s+" + _OBJ + "$"), "would like"),
)
_TRAVEL = re.compile(
    r"^I'm\s+(flying|traveling|travelling|heading|driving|moving|going back|"
    r"coming back|returning|going)\s+to\s+" + _OBJ + "$"
)
_EVENT = re.compile(
    r"^I(?:'ve| have)(?: got)?\s+(?:a|an|my|the)\s+(.{0,40}?\b(?:trip|appointment|"
    r"interview|exam|test|meeting|concert|"
    r"wedding|surgery|flight|vacation|holiday|party|date|game|match|recital|"
    r"presentation|deadline|conference|race|"
    r"marathon|competition|show|performance|checkup|check-up)\b.{0,40})$"
)
_PLACE_START = re.compile(r"^(?:[A-Z]|(?:a|an|the|my|our|their)\s)")
_TRAVEL_VERBS = {
    "flying": "fly",
    "traveling": "travel",
    "travelling": "travel",
    "heading": "go",
    "driving": "drive",
    "moving": "move",
    "going back": "go back",
    "coming back": "come back",
    "returning": "return",
    "going": "go",
}
_ING = re.compile(r"^I'm\s+(\w+ing)\s+(.{1,60})$")
_ING_BAD = (
    "feeling",
    "thinking",
    "doing",
    "getting",
    "loving",
    "enjoying",
    "hoping",
    "wondering",
    "looking",
    "having",
    "trying",
    "being",
    "talking",
    "saying",
    "telling",
    "going",
)
_STRONG = ("planning", "plan", "intend", "scheduled", "thinking about", "thinking of")
_WILL_BAD = re.compile(
    r"^(?:be\s+)?(?:fine|ok|okay|right|there|back|careful|sure|happy|glad|good|great)\b", re.I
)


def _plan_match(s: str) -> tuple[str, str] | None:
    for rx, fixed in _PLANS:
        m = rx.match(s)
        if m:
            return (fixed, m.group(1)) if fixed else (m.group(1), m.group(2))
    return None


def _plans(c: _Clause, ctx: RuleContext) -> list[Fact] | None:
    s = c.core
    future = c.when is not None and c.when.period.end >= ctx.today
    expires = ctx.period_expiry(c.when.period) if c.when is not None and future else ctx.ttl_expiry()
    m = _EVENT.match(s)
    if m and future:
        thing = _third(m.group(1))
        key = f"plan:{norm_key(thing)}"
        ctx.add_plan(key, f"have {_article(thing)} {thing}", "plans")
        content = f"User has {_article(thing)} {thing}{c.when_text()}."
        return [Fact(content, "plan", key, thing, transient=True, expires_at=expires, confidence=0.7)]
    action = modal = ""
    m = _TRAVEL.match(s)
    if m and future and (m.group(1) != "going" or _PLACE_START.match(m.group(2))):
        action, modal = f"{_TRAVEL_VERBS[m.group(1)]} to {m.group(2)}", "plan"
    if not action:
        found = _plan_match(s)
        if found:
            modal, action = found
            if modal == "will" and _WILL_BAD.match(action):
                return None
            if modal == "going" and _PLACE_START.match(action):
                action = f"go to {action}"
    if not action:
        m = _ING.match(s)
        if (
            m
            and c.when is not None
            and c.when.period.start > ctx.today
            and m.group(1).lower() not in _ING_BAD
            and _ok_object(m.group(2))
        ):
            thing = _third(f"{m.group(1)} {m.group(2)}")
            key = f"plan:{norm_key(thing)}"
            ctx.add_plan(key, f"be {thing}", "plans")
            content = f"User is {thing}{c.when_text()}."
            return [Fact(content, "plan", key, thing, transient=True, expires_at=expires, confidence=0.7)]
        return None
    if not _ok_object(action) or len(action.split()) > 14:
        return None
    if modal not in _STRONG and not future:
        return None
    action = _third(action.strip())
    key = f"plan:{norm_key(action)}"
    if modal.startswith("thinking"):
        content = f"User is {modal} {action}{c.when_text()}."
        ctx.add_plan(key, action, "plans")
    else:
        verb = "wants" if modal in ("want", "hope", "hoping", "would like") else "plans"
        content = f"User {verb} to {action}{c.when_text()}."
        ctx.add_plan(key, action, verb)
    return [Fact(content, "plan", key, action, transient=True, expires_at=expires, confidence=0.7)]


_FOLLOW = re.compile(
    r"^(?:[Tt]he|[Mm]y|[Oo]ur)\s+(\w+(?:\s+\w+)?)\s+(?:is|will be|starts)\s*(?:from|on|in|scheduled for)?\s*$"
)


def _plan_date(c: _Clause, ctx: RuleContext) -> list[Fact] | None:
    if not ctx.plans or c.when is None:
        return None
    tail = c.raw[c.when.end :].strip(" .!")
    if len(tail.split()) > 2:
        return None
    m = _FOLLOW.match(c.raw[: c.when.start].strip())
    if not m:
        return None
    plan = ctx.find_plan(m.group(1).split()[-1])
    if plan is None:
        return None
    content = f"User {plan.modal} to {plan.action}{c.when_text()}."
    expires = ctx.period_expiry(c.when.period)
    return [Fact(content, "plan", plan.key, plan.action, transient=True, expires_at=expires, confidence=0.7)]


_FOLLOW_GATE = re.compile(r"^(?:the|my|our)\s", re.IGNORECASE)

# Each rule group runs only when one of its trigger words occurs in the clause: most clauses of a
# long English transcript reach no rule at all, which keeps extraction fast.
_ID_WORDS = frozenset(
    "name name's call calls called turned born married single divorced engaged widowed".split()
)
_WORK_WORDS = frozenset(
    "work works working live living based moved relocated settled from grew became a an".split()
)
_HEALTH_WORDS = frozenset(
    """allergic allergy allergies eat drink avoid avoiding vegetarian vegan pescatarian trying testing
    experimenting
    sick ill unwell pregnant diet dieting fasting injured recovering training studying preparing
    looking hunting
    sleeping cold fever flu cough headache stomachache toothache ache migraine throat pain hangover
    stomach hurts
    sore killing upset acting staying been""".split()
)
_FAMILY_WORDS = frozenset("have i've got my".split())
_LIKE_WORDS = frozenset(
    """love like enjoy adore prefer into passionate keen obsessed fan crazy fond interested favorite favourite
    hate
    dislike detest despise stand afraid scared terrified""".split()
)
_PLAN_WORDS = frozenset("plan planning intend thinking scheduled".split())


def _gated_rules(c: _Clause) -> list[Rule]:
    low = c.core.lower()
    words = frozenset(low.replace(",", " ").split())
    rules: list[Rule] = []
    if not _ID_WORDS.isdisjoint(words) or (low.startswith("i'm ") and low[4:5].isdigit()):
        rules.append(_identity)
    if not _WORK_WORDS.isdisjoint(words):
        rules.append(_work)
    if not _HEALTH_WORDS.isdisjoint(words):
        rules.append(_health_food)
    if not _FAMILY_WORDS.isdisjoint(words):
        rules.append(_pets_family)
    if c.habit_pre or c.habit_post or not _LIKE_WORDS.isdisjoint(words):
        rules.append(_likes_habits)
    if c.when is not None or not _PLAN_WORDS.isdisjoint(words):
        rules.append(_plans)
    return rules


def _normalize(text: str) -> str:
    low = text.lower()
    if (
        "i am" in low
        or "i'm" in low
        or "im" in low
        or "i " in low[:2]
        or " i " in low
        or "i can" in low
        or ("i do not" in low or "i will" in low or "i have been" in low)
    ):
        return _CONTRACTION.sub(lambda m: _CONTRACTED.get(m.group(0), "I'm"), text)
    return text


def _first_person(text: str) -> bool:
    """Cheap gate: could ``text`` hold a clause starting with I / I'm / my (the rules' subjects)?"""
    if "I" in text and (text.startswith(("I ", "I'")) or " I " in text or " I'" in text):
        return True
    if "my " in text or "My " in text:
        return True
    low = text.lower()
    return low.startswith(("i ", "im ", "i'm")) or " i " in low or " im " in low or " i'm" in low


def _strip_trailing(text: str) -> str:
    """Drop trailing tags such as ", remember that" or "haha"."""
    if not text.lower().endswith(_TRAILING):
        return text
    changed = True
    while changed and text:
        changed = False
        low = text.lower()
        for tail in _TRAILING:
            if low.endswith(tail) and (len(low) == len(tail) or not low[-len(tail) - 1].isalnum()):
                text = text[: -len(tail)].rstrip(" ,.;!")
                changed = True
                break
    return text


_DANGLING = re.compile(r"\s+(?:on|in|at|from|by|for|during|until|till)\s*$", re.IGNORECASE)
_DAYPART = re.compile(r"^\s*(?:morning|afternoon|evening|night)\b")
_STARTS = re.compile(r"^(?:I\b|I'm\b|I've\b|I'll\b|I'd\b|[Mm]y\b)")
_LEAD_WORDS = (
    "lately",
    "recently",
    "these days",
    "this ",
    "next ",
    "tomorrow",
    "today",
    "tonight",
    "usually",
    "every",
    "on ",
    "in ",
    "at the moment",
    "currently",
    "right now",
    "for now",
    "nowadays",
    "sometimes",
    "often",
    "always",
    "normally",
    "generally",
    "typically",
    "most ",
    "daily",
    "weekly",
)
_OPENINGS = ("i ", "i'", "im ", "my ", *_LEAD_WORDS)
_HABIT_WORDS = (
    "usually",
    "often",
    "always",
    "normally",
    "regularly",
    "typically",
    "generally",
    "frequently",
    "sometimes",
    "mostly",
    "every",
    "daily",
    "weekly",
    "weekend",
    "each ",
    "most ",
)
_TEMP_WORDS = (
    "lately",
    "recently",
    "these days",
    "for now",
    "at the moment",
    "currently",
    "right now",
    "nowadays",
    "this week",
)


def could_state(sentence: str, ctx: RuleContext) -> bool:
    """Cheap sentence filter: first-person sentences, plan follow-ups, news about a known pet."""
    return (
        _first_person(sentence)
        or bool(ctx.plans and _FOLLOW_GATE.match(sentence))
        or _about_pet(sentence, ctx)
    )


def _about_pet(text: str, ctx: RuleContext) -> bool:
    return bool(ctx.pets) and text.startswith(tuple(n for n in ctx.pets if n[:1].isupper()))


def extract_en_clause(clause: Clause, ctx: RuleContext) -> list[Fact]:
    """Extract facts from one English clause (empty list when it states nothing personal)."""
    text = clause.text
    if clause.question:
        return []
    if ctx.plans and _FOLLOW_GATE.match(text):
        when = find_en(text, ctx.today)
        if when is not None:
            follow = _plan_date(_Clause("", text, "", "", "", when), ctx)
            if follow:
                return follow
    if _about_pet(text, ctx):
        return _pets_family(_Clause(text.strip(" .!"), text, "", "", "", None), ctx) or []
    if not _first_person(text):
        return []
    if not text.startswith(("I ", "I'", "My ", "my ")):  # those cannot open with a filler
        text = _FILLERS.sub("", text)
    # Every rule reads a clause that opens with its subject (I, my) or a time/habit word.
    if not text[:16].lower().startswith(_OPENINGS):
        return []
    text = _normalize(text)
    if _REQUEST.match(text) or _QUESTION_START.match(text):
        return []
    low = text.lower()
    habit_pre = habit_post = temp = ""
    if contains_any(low, _HABIT_WORDS):
        m = _HABIT_PRE.search(text)
        if m:
            habit_pre = m.group(1)
            text = text[: m.start()] + text[m.end() :]
        m = _HABIT_POST.search(text)
        if m:
            habit_post = m.group(1)
            text = text[: m.start()] + text[m.end() :]
    if contains_any(low, _TEMP_WORDS):
        m = _TEMP.search(text)
        if m:
            temp = m.group(1)
            text = text[: m.start()] + " " + text[m.end() :]
    when = find_en(text, ctx.today)
    raw = text
    if when is not None:
        text = _DANGLING.sub("", text[: when.start]) + " " + _DAYPART.sub("", text[when.end :], count=1)
    core = _strip_trailing(" ".join(_FILLERS.sub("", text.strip(" ,.;!")).split()).strip(" ,.;!"))
    if not core or not _STARTS.match(core):
        return []
    c = _Clause(core, raw, habit_pre, habit_post, temp, when)
    for rule in _gated_rules(c):
        out = rule(c, ctx)
        if out:
            return out
    return []
