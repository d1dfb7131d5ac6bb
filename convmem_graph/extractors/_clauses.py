"""Clauses, not sentences: where a turn breaks into statements, and what to drop before reading one.

Two steps run before the rule families of the heuristic extractor:

- :func:`mark_discourse` breaks a turn at discourse markers and conjunctions that start a new
  first-person statement ("…而且我对花生过敏", "…but now I live in Denver"), so a second clause is
  read on its own instead of spoiling the first one's match;
- :func:`normalize_clause` strips what carries no fact at a clause's start (fillers: 嗯, 然后, 其实,
  well, um, so, anyway ...) and the change words that only say a statement is new ("现在", "now"),
  and rewrites a few English turns of phrase to the form the rules know ("I don't eat meat any
  more" -> "I no longer eat meat", "We adopted ..." -> "I adopted ...").

The change itself is not lost: :mod:`convmem_graph.extractors._families` reads the raw clause for
change and negation words (现在吃了, 不再, 戒了, no longer, again) before normalization.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from convmem_graph.extractors._lexicon import EN_RELATIONS, EN_SPECIES
from convmem_graph.extractors._taxonomy import PAST_TIMES_ZH, PET_VERBS_EN, PET_VERBS_ZH, alternation
from convmem_graph.text._lazy_re import LazyPattern, lazy_compile
from convmem_graph.text.cjk import UNIFIED

__all__ = [
    "ZH_LEISURE",
    "mark_discourse",
    "move_lead_time",
    "normalize_clause",
    "strip_fillers",
    "strip_tails",
]

# Chinese markers glued to the previous clause ("我喜欢猫而且我对花生过敏"): a comma before them
# when a first-person statement follows.
_ZH_MARKERS = lazy_compile(
    rf"(?<=[{UNIFIED}])(然后|所以|不过|而且|但是|可是|并且|另外|同时|只是)(?=(?:现在|其实|也|还)?我(?!们))"
)
# English: a new first-person statement after a conjunction, also when "now" / "also" leads it.
# The change word is dropped with the break: the clause splitter breaks before "but I", not "but now I".
_EN_MARKERS = lazy_compile(
    r"(?<=[a-z0-9)]),?\s+(and|but|so|also|plus|though)\s+(?:now|also|then|these days)\s+"
    r"(?=(?:I|I'm|I've|my|we)\b)"
)

_ZH_FILLERS = lazy_compile(
    r"^(?:(?:嗯+|呃+|额+|哦+|噢+|啊+|唉|诶|哎|那个|就是说|然后|所以|不过|而且|但是|可是|另外|其实|对了|话说|反正|总之"
    # Words that frame what follows as said frankly or told to the listener ("说实话", "跟你说"):
    # how it is said, not what. They may run straight into the statement ("说实话我不喝酒").
    r"|说实话|说真的|实话说|实话实说|老实说|老实讲|讲真的?|坦白说|坦白讲|(?:我|偷偷)?(?:跟|和)你(?:说|讲)"
    r"|告诉你|你知道吗|你知道|怎么说呢|说起来|顺便说一?下|顺便说|顺带一提)"
    r"[，,、\s]*)+"
)
# After the subject: words that only mark the statement as new or current.
#: When the user has time, any way of saying it ("业余时间", "空闲的时候", "有空的话"): what they do
#: then is what they like doing, so the rules read the clause without it.
ZH_LEISURE = r"(?:业余|空闲|闲暇|休息|有空|没事|不忙)(?:时间|的时候|时候|时|的时间)?(?:里|的话)?"
_ZH_CHANGE_AFTER_SUBJECT = lazy_compile(
    # "后来" too: "以前住在上海，后来搬去了成都" - what came after is what holds now.
    # "这个人" ("as a person") and hedges on a frequency ("基本上每天…") say how, not what.
    r"^(我?)(?:现在|如今|目前已经|现在已经|这会儿|还是|依然|仍然|依旧|后来|这个人|基本上|基本|差不多|"
    + ZH_LEISURE
    + r")+"
    rf"(?=[{UNIFIED}])"
)
# "我们去年搬到了昆明", "我们一家住在大连": where the household lives is where the user lives.
_ZH_WE_HOME = lazy_compile(
    rf"^我们(?:家|一家|全家|一家人)?(?={PAST_TIMES_ZH}?(?:从[{UNIFIED}]{{2,6}}?)?(?:搬|移居|迁居|住在|定居在))"
)
# "我们上周在小区门口捡了一只猫", "我们从朋友家领养了两只仓鼠", "我们家那只泰迪叫可可": the
# household's pet is the user's too (when and where it was got may come between).
_ZH_WE_PET = lazy_compile(
    rf"^(?P<t>{PAST_TIMES_ZH}*)我们(?=(?:家|家里)?{PAST_TIMES_ZH}*(?:(?:在|从)[{UNIFIED}]{{1,8}}?)?"
    rf"(?:{alternation(PET_VERBS_ZH)}))"
    r"|^(?P<t2>)我们(?=家(?:里)?的?(?:那|这)?(?:只|条|头))"
)
# "我从今年开始不吃红肉了", "我从小就不吃羊肉": since when the user stopped is when, not what.
_ZH_SINCE_NOT = lazy_compile(
    rf"^(我)从[{UNIFIED}]{{1,6}}?(?:就|起|开始|以后|之后)+(?=(?:就|也)?(?:不|再也不|不再)(?:吃|喝))"
)
# "大学毕业以后就一直在杭州生活": since an event of the user's life, what holds is what follows.
_ZH_AFTER_EVENT = lazy_compile(
    rf"^[{UNIFIED}]{{2,8}}?(?:以后|之后|以来)(?:就|都)?(?=(?:一直|还|都)*(?:在|住在|生活在|定居在)[{UNIFIED}]{{2,6}}"
    r"(?:住|生活|定居|工作|上班))"
)
# "叫它团团", "给它起名叫X": the pronoun is the pet just mentioned, not part of its name.
_ZH_CALL_IT = lazy_compile(rf"(叫|叫做|名叫)(?:它|他|她)(?=[{UNIFIED}A-Za-z])")
_EN_FILLERS = lazy_compile(
    r"^(?:(?:well|um+|uh+|erm|hmm+|oh|ah|so|and|but|also|plus|anyway|anyways|actually|honestly|basically|"
    r"like|ok(?:ay)?|yeah|yes|right|you know|by the way|btw|fun fact|guess what|now|these days|nowadays|"
    # Frames of how something is said, not what ("to be honest", "I mean", "just so you know").
    r"to be honest|tbh|truth be told|in all honesty|frankly|I mean|you know what|funny enough|funnily enough|"
    r"just so you know|for the record|for what it's worth|fwiw|side note|"
    r"then)\b[,\s]*)+",
    re.IGNORECASE,
)
_EN_NOT_ANY_MORE = lazy_compile(
    r"^I (?:don't|do not) (eat|drink|smoke|play|live|work|own|have)\b(.*?)\s*,?\s*(?:any ?more|these days)$"
)
# "I have a severe peanut allergy" -> the allergy form the rules read, the severity kept.
_EN_ALLERGY_NOUN = lazy_compile(
    r"^I have (?:a|an)\s+(?:(?P<sev>severe|serious|mild|slight|bad)\s+)?"
    r"(?P<obj>[a-z][a-z -]{1,24}?)\s+allergy$",
    re.IGNORECASE,
)
_EN_SEVERITY = {
    "severe": "severely ",
    "serious": "seriously ",
    "bad": "severely ",
    "mild": "mildly ",
    "slight": "mildly ",
}
# Tails that add no fact: a relative clause on the whole statement, when the user has time.
# Every branch starts at a space or a comma: the leading look-ahead says so, and the scan skips
# the other positions at once instead of trying each branch there (same matches, half the time).
_EN_TAIL = lazy_compile(
    r"(?=[\s,])(?:"
    r"\s*,\s*which (?:is|was|makes|means) .*$|\s*,\s*(?:to be honest|honestly|tbh|though|haha|lol)$"
    # A closing discourse adverb says how the statement relates to the last one, not what it is about.
    r"|\s*,?\s+(?:anyway|anyways|regardless|nonetheless|nevertheless|though|too|as well|by the way|btw)$"
    # A reason given after a comma is why, not what: "I don't eat pork, for religious reasons".
    r"|\s*,\s*(?:for (?:\w+\s+){0,2}reasons?|for my health|for health reasons)$"
    # A second clause with its own subject after ", and" / ", but" is another statement, about
    # someone or something else: "I gave up caffeine, and the headaches were brutal".
    r"|\s*,\s*(?:and|but|so)\s+(?:the|it|it's|that|this|they|he|she|his|her|their|there)\s.*$"
    # ... also with no conjunction when a pronoun opens it: "I don't drink alcohol, it makes me sleepy".
    r"|\s*,\s*(?:it|it's|that|that's|this|they|they're|he|he's|she|she's)\s.*$"
    # A remark after a comma ("..., nothing too serious", "..., no big deal") says how much it matters.
    r"|\s*,\s*(?:nothing|not) (?:too|that|very|really) (?:serious|bad)$|\s*,\s*no big deal$"
    # A narrowing after a comma ("..., mostly blues") keeps the statement it narrows.
    r"|\s*,\s*(?:mostly|mainly|especially|usually)\s+[\w' -]{1,30}$"
    # How long, after a comma: "..., going on twelve years now", "..., for about six years now".
    r"|\s*,\s*(?:going on|coming up on|for (?:about |almost |over |nearly )?)[\w -]{1,20}? (?:years?|months?)"
    r"(?: now)?$"
    # An intensifier closing a negation: "I don't drink alcohol at all".
    r"|\s+at all$"
    r")",
    re.IGNORECASE,
)
# When the user has time: the rules' likes do not expect it ("I like to hike on weekends"); the
# families keep it ("User goes bouldering on weekends"), so only normalize_clause drops it.
_EN_LEISURE_TAIL = lazy_compile(
    r"\s+(?:on my days off|on (?:the )?weekends?|in my (?:free|spare) time|when I (?:have|get) (?:the )?time"
    r"|whenever I can)$",
    re.IGNORECASE,
)
# Adverbs after "I" that the rules' patterns do not expect and that change nothing.
_EN_ADVERB = lazy_compile(r"^I (?:also|still|really|totally|absolutely|definitely) (?=\w)")
# "My wife's really into pottery", "My half-brother's a firefighter": the 's of a relative is "is"
# when a predicate follows, not the possessive ("my wife's car").
_EN_RELATIVE_IS = lazy_compile(
    rf"^([Mm]y (?:{EN_RELATIONS}))'s (?=(?:really |so |very |super |totally |also |still |now |just )*"
    r"(?:into|a|an|from|in|at|allergic|vegan|vegetarian|retired|married|pregnant|[a-z]+ing)\b)"
)
_EN_NOW_TAIL = lazy_compile(r"\s*,?\s+(?:now|these days|nowadays)$")
# A species and its plural ("two dogs"), for "We have two dogs, ...".
_EN_SPECIES_FORMS = EN_SPECIES | {f"{s}s" for s in EN_SPECIES} | {"puppies", "bunnies", "guinea pigs"}
# "We adopted ...", "My daughter and I got ...", "We have two dogs": a pet of the household is the user's too.
_EN_WE_GOT = lazy_compile(
    r"^(?:[Ww]e|[Mm]y [a-z-]+ and I)(?:'ve| have)?\s+"
    rf"(?=(?:just\s+|recently\s+|finally\s+)?(?:{alternation(PET_VERBS_EN)})\b)"
)
# "We moved to Leeds", "We live in Raleigh now": where the household lives is where the user lives.
_EN_WE_LIVE = lazy_compile(
    r"^(?:[Ww]e|[Mm]y [a-z-]+ and I)(?:'ve| have)?\s+"
    r"(?=(?:just\s+|recently\s+|finally\s+|now\s+|still\s+)?(?:moved|relocated|settled|live|lived|are living)"
    r"\s+(?:to|in)\s+[A-Z])"
)
# "our cat Pumpkin ...": the household's pet, named, is the user's.
_EN_OUR_PET = lazy_compile(rf"^[Oo]ur (?=(?:{alternation(EN_SPECIES)}) [A-Z])")
_EN_WE_HAVE = lazy_compile(
    r"^(?:[Ww]e|[Mm]y [a-z-]+ and I)\s+(?:have|'ve got|have got)\s+"
    rf"(?=(?:a|an|one|two|three|four|\d+) (?:\w+ )?(?:{alternation(_EN_SPECIES_FORMS)})\b)"
)
# Who names the pet the household got: the user, the household, or one of it ("the kids named her
# Pickles", "my son calls it Kiwi"); the name is the pet's whoever gave it.
_NAMER = r"(?:we|I|he|she|they|the kids|our kids|the children|(?:my|our) (?:[a-z-]+ )?[a-z-]+)"
# "..., we call him Biscuit", "and I named her Luna": the name of the pet just got, said after it.
_EN_CALL_IT = lazy_compile(
    r"(?P<mid>\s+(?:last \w+|this \w+|recently|in [A-Z]\w+|(?:a|one|two|three|a few|\d+) \w+ ago"
    r"|(?:when|after) [\w' ]{2,40}?))?"
    r",?\s+(?:and\s+)?"
    rf"(?:{_NAMER}\s+(?:call|calls|called|named)\s+(?:him|her|it|them)"
    r"|(?:his|her|its|their) names? (?:is|are))\s+"
    r"(?P<n>[A-Z][\w'-]*(?:\s+and\s+[A-Z][\w'-]*)?)$"
)
# "a husky called Luna who howls at every siren": "called" names it as "named" does, and a relative
# clause after the name is about the pet, not part of the statement that names it.
_EN_CALLED_NAME = lazy_compile(
    rf"\b(?P<sp>{alternation(EN_SPECIES | {f'{s}s' for s in EN_SPECIES})}) (?:called|named) "
    r"(?P<n>[A-Z][\w'-]*)"
    r"(?:\s*,?\s+(?:who|that|which)\b.*)?$"
)
_EN_AND_CALL_IT = lazy_compile(
    rf",?\s+and\s+{_NAMER}\s+(?:call|calls|called|named)\s+(?:him|her|it|them)\s+(?=[A-Z])"
)
# "Last year we rescued a greyhound": the time goes to the end, where the rules read it.
_EN_LEAD_TIME = lazy_compile(
    r"^(?P<t>last (?:year|month|week|summer|winter|spring|fall|autumn|weekend)|this (?:year|month|week)"
    r"|(?:a|one|two|three|four|five|a few|\d+) (?:years?|months?|weeks?|days?) ago|recently|lately"
    r"|these days),?\s+(?=(?:we|I|my)\b)",
    re.IGNORECASE,
)
# "..., Miso and Tofu, last month": the trailing comma before a time word hides the names' end.
_EN_COMMA_WHEN = lazy_compile(r",\s+(?=(?:last|this|a few|two|three|\d+)\s+\w+(?:\s+ago)?$|recently$)")


# Gates (issue 24 item 3): each pattern below tries its leading ``\s*`` at every position of a
# clause, most of which it cannot match. A gate finds a piece that every match of its pattern
# holds (a literal, or the words an end-anchored pattern must end with, with the same flags, so
# the same case folding), and a clause without that piece skips the pattern: the output is the
# same by construction (tests/unit/extractors/test_clause_gates.py checks it on generated and
# real clauses). An end-anchored gate reads the clause's last characters only: ``$`` matches at
# the end or before a final newline, so the words sit within that many characters of the end.
_TAIL_END = lazy_compile(
    r"(?:anyway|anyways|regardless|nonetheless|nevertheless|though|too|as well|by the way|btw|at all)\n?\Z",
    re.IGNORECASE,
)
_LEISURE_END = lazy_compile(r"(?:off|weekends?|time|can)\n?\Z", re.IGNORECASE)
_NOW_END = lazy_compile(r"(?:now|days)\n?\Z")
_BECAUSE_WORD = lazy_compile(r"since|cause", re.IGNORECASE)


#: What ``re.IGNORECASE`` matches to an ASCII letter beyond ``str.lower``'s folds: ``ſ`` (U+017F) to
#: ``s``, ``ı`` and ``İ`` (U+0131, U+0130) to ``i`` (tests/unit/extractors/test_clause_gates.py
#: checks every code point).
_FOLDS = str.maketrans({"\u017f": "s", "\u0131": "i", "\u0130": "i"})


def fold_lower(text: str) -> str:
    """``text`` lower-cased so that a word ``re.IGNORECASE`` finds in it is found by ``in``."""
    return (text if text.isascii() else text.translate(_FOLDS)).lower()


#: The last two letters of ``_TAIL_END``'s and ``_LEISURE_END``'s words, lower case: a clause
#: ending otherwise (before one optional newline) cannot end in one of them, so the search is
#: skipped.
_TAIL_LAST_TWO = frozenset({"ay", "ys", "ss", "gh", "oo", "ll", "tw"})
_LEISURE_LAST_TWO = frozenset({"ff", "nd", "ds", "me", "an"})


def _last_two(text: str) -> str:
    """The two characters before the end or a final newline, folded (:func:`fold_lower`)."""
    return fold_lower(text[-3:-1] if text[-1:] == "\n" else text[-2:])


def _may_tail(text: str) -> bool:
    # Every branch but two needs a comma; those two end in a closing word ("anyway", "at all").
    if "," in text:
        return True
    return _last_two(text) in _TAIL_LAST_TWO and _TAIL_END.search(text[-14:]) is not None


def _may_leisure(text: str) -> bool:
    return _last_two(text) in _LEISURE_LAST_TWO and _LEISURE_END.search(text[-10:]) is not None


def _may_now(text: str) -> bool:
    # ``_NOW_END`` is case-sensitive: its words as written, before one optional newline.
    return text.endswith(_NOW_ENDS)


_NOW_ENDS = ("now", "days", "now\n", "days\n")


def _may_because(text: str) -> bool:
    # ``_BECAUSE_WORD`` ignores case: its words in the folded text.
    low = fold_lower(text)
    return "since" in low or "cause" in low


def _may_call(text: str) -> bool:
    return "call" in text or "name" in text


def _may_called_name(text: str) -> bool:
    return " called " in text or " named " in text


def _may_marker(text: str) -> bool:
    return "now" in text or "also" in text or "then" in text or "these days" in text


def mark_discourse(text: str) -> str:
    """Insert clause breaks before discourse markers that start a new first-person statement.

    Example:
        >>> mark_discourse("我喜欢猫而且我对花生过敏")
        '我喜欢猫，而且我对花生过敏'
        >>> mark_discourse("I used to live in Boston but now I live in Denver")
        'I used to live in Boston, but I live in Denver'
    """
    if "我" in text:
        text = _ZH_MARKERS.sub(r"，\1", text)
    if " " in text:
        if _may_marker(text):
            text = _EN_MARKERS.sub(r", \1 ", text)
        if _may_call(text):
            # "..., and we call her Olive" names the pet just got: kept in its clause, not split off.
            text = _EN_AND_CALL_IT.sub(" named ", text)
    return text


def strip_fillers(text: str, *, zh: bool) -> str:
    """Drop fillers and discourse words at a clause's start (嗯, 然后, well, um, so ...).

    Example:
        >>> strip_fillers("嗯，然后我表妹住在厦门", zh=True)
        '我表妹住在厦门'
        >>> strip_fillers("Um, so I play the cello", zh=False)
        'I play the cello'
    """
    out = (_ZH_FILLERS if zh else _EN_FILLERS).sub("", text).strip()
    return out or text


# A "because ..." after a statement the families read is why, not what: "I've been dairy-free for a
# year because of my skin". The sentence rules keep it (a state's reason is worth keeping: "stressed
# because of my tournament"), so only the families drop it.
_EN_BECAUSE = lazy_compile(
    r"\s*,?\s+(?:(?:maybe|probably|mostly|partly|mainly|just)\s+)?(?:because|since|cause|'cause) (?:of )?"
    r"(?:my|the|a|an|it|I|I'm|I've) [\w' -]{1,40}$",
    re.IGNORECASE,
)


def strip_tails(text: str) -> str:
    """Drop an English clause's closing remark, reason or discourse adverb (see ``_EN_TAIL``).

    Example:
        >>> strip_tails("I have a mild shellfish allergy, nothing too serious")
        'I have a mild shellfish allergy'
        >>> strip_tails("I've been dairy-free for a year because of my skin")
        "I've been dairy-free for a year"
    """
    out = text
    for _ in range(3):  # "..., by the way, it's been three years": one tail after another
        cut = _EN_TAIL.sub("", out) if _may_tail(out) else out
        if cut == out:
            break
        out = cut
    return (_EN_BECAUSE.sub("", out) if _may_because(out) else out) or text


def move_lead_time(text: str) -> str:
    """Move a time that opens an English clause to its end, where the rules read it.

    Example:
        >>> move_lead_time("Lately I've picked up rock climbing")
        "I've picked up rock climbing lately"
    """
    lead = _EN_LEAD_TIME.match(text)
    if lead is None:
        return text
    return f"{text[lead.end() :].rstrip(' .!')} {lead['t'].lower()}"


def normalize_clause(text: str, *, zh: bool) -> str:
    """Strip fillers and change words at a clause's start; rewrite English forms the rules know.

    Example:
        >>> normalize_clause("嗯，然后我现在搬到上海了", zh=True)
        '我搬到上海了'
        >>> normalize_clause("Well, I don't eat meat any more", zh=False)
        'I no longer eat meat'
    """
    if zh:
        out = _ZH_FILLERS.sub("", text)
        out = _ZH_WE_HOME.sub("我", out)
        out = _ZH_WE_PET.sub(lambda m: (m["t"] or "") + "我", out)
        out = _ZH_SINCE_NOT.sub(r"\1", out)
        out = _ZH_AFTER_EVENT.sub("", out)
        out = _ZH_CHANGE_AFTER_SUBJECT.sub(r"\1", out)
        out = _ZH_CALL_IT.sub(r"\1", out)
        return out or text
    out = _EN_FILLERS.sub("", text).strip()
    if not out:
        return text
    m = _EN_NOT_ANY_MORE.match(out.rstrip(" .!"))
    if m:
        out = f"I no longer {m.group(1)}{m.group(2)}"
    if _may_tail(out):  # first, so "a mild X allergy, nothing too serious" reads as an allergy
        out = _EN_TAIL.sub("", out)
    m = _EN_ALLERGY_NOUN.match(out.rstrip("."))
    if m:
        out = f"I'm {_EN_SEVERITY.get((m['sev'] or '').lower(), '')}allergic to {m['obj']}"
    out = move_lead_time(out).rstrip(" .!")
    if _may_call(out):
        out = _EN_CALL_IT.sub(lambda m: f" named {m['n']}{m['mid'] or ''}", out)
    if _may_tail(out):
        out = _EN_TAIL.sub("", out)
    if _may_leisure(out):
        out = _EN_LEISURE_TAIL.sub("", out)
    if _may_called_name(out):
        out = _EN_CALLED_NAME.sub(lambda m: f"{m['sp']} named {m['n']}", out)
    out = _EN_ADVERB.sub("I ", out)
    if out.startswith(("My ", "my ")):  # the pattern's own start (a template sub costs a call)
        out = _EN_RELATIVE_IS.sub(r"\1 is ", out)
    if _may_now(out):
        out = _EN_NOW_TAIL.sub("", out)
    out = _EN_OUR_PET.sub("My ", out)
    out = _EN_WE_GOT.sub("I ", out)
    out = _EN_WE_LIVE.sub("I ", out).replace("I are living", "I'm living")
    out = _EN_WE_HAVE.sub("I have ", out)
    out = _EN_COMMA_WHEN.sub(" ", out)
    if out[:1].islower() and out[:2] in ("i ", "i'", "my"):
        out = out[0].upper() + out[1:]
    return out


#: Each gated pattern and its gate: a text the gate refuses holds no match of the pattern.
GATED: tuple[tuple[LazyPattern, Callable[[str], bool]], ...] = (
    (_EN_TAIL, _may_tail),
    (_EN_LEISURE_TAIL, _may_leisure),
    (_EN_NOW_TAIL, _may_now),
    (_EN_BECAUSE, _may_because),
    (_EN_CALL_IT, _may_call),
    (_EN_CALLED_NAME, _may_called_name),
    (_EN_AND_CALL_IT, _may_call),
    (_EN_MARKERS, _may_marker),
)
