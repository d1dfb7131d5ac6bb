"""English first-person statement rules of the heuristic extractor: clause preparation and dispatch.

A clause must contain a first-person word to be looked at (a cheap gate that keeps the extractor
fast on long English transcripts); it is then cleaned (fillers, "remember that", time, habit and
temporary markers) and matched against the rule groups whose trigger words it contains, the first
match winning. Likes, habits and plans live here; identity, work, health, food, pets and family in
:mod:`convmem_graph.extractors._rules_en_profile`. Output is third person: "User is allergic to
mango.".
"""

from __future__ import annotations

import re

from convmem_graph.extractors._en_base import (
    OBJ,
    VAGUE,
    YOU,
    EnClause,
    Rule,
    article,
    conj,
    food_key,
    ok_object,
    third_person,
    trim_object,
)
from convmem_graph.extractors._facts import Fact, RuleContext
from convmem_graph.extractors._lexicon import EN_FOODS
from convmem_graph.extractors._rules_en_profile import health_food, identity, pets_family, work
from convmem_graph.extractors._taxonomy import SPORT_ACTIVITIES_EN, alternation
from convmem_graph.text._lazy_re import lazy_compile
from convmem_graph.text.scripts import Clause, contains_any, norm_key
from convmem_graph.text.timeexpr import find_en

__all__ = ["CONDITION_CLAUSE", "could_state", "extract_en_clause"]

_FILLERS = lazy_compile(
    r"^(?:(?:by the way|btw|oh|ah|well|actually|also|yeah|yes|yep|so|anyway|hi|hello|hi there|hello there|"
    r"honestly|and|but|haha|lol|hey|um|uh|"
    r"ok|okay|plus|fun fact|to be honest|tbh|you know what|just so you know|wait|oh yeah|right|no|nah|"
    r"(?:please )?(?:remember|note|keep in mind|don't forget)(?: that)?)[,!:.]?\s+)+",
    re.IGNORECASE,
)
_TRAILING = tuple(
    "remember that|just so you know|you know|haha|lol|lmao|though|too|as well|right|now|"
    "anymore|actually|honestly|so much|a lot|very much".split("|")
)
_REQUEST = lazy_compile(
    r"^(?:can|could|would|will) you\b|^(?:please\s+)?(?:remind|tell|help|show|"
    r"give|send|call|let|wake) me\b|^let's\b|^(?:please\s+)?set (?:an? )?(?:alarm|reminder|timer)\b"
    r"|^I (?:need|want|would like|'d like) you to\b|\bany (?:recommendations|suggestions|tips|ideas)\b",
    re.IGNORECASE,
)
_QUESTION_START = lazy_compile(
    r"^(?:do|does|did|can|could|would|will|should|is|are|was|were|have|has|what|why|how|where|when|who|which|"
    r"whose|shall|may|am|isn't|aren't|don't|didn't|wanna)\b",
    re.IGNORECASE,
)
_HABIT_PRE = lazy_compile(
    r"\b(usually|often|always|normally|regularly|typically|generally|frequently|sometimes|mostly)\s+",
    re.IGNORECASE,
)
_HABIT_POST = lazy_compile(
    # A hedge before a count is part of it: "like three times a week", "about twice a month".
    r"\s+(?:(?:like|about|around|roughly|maybe|at least)\s+(?=once|twice|\w+\s+times))?"
    r"(every\s+(?:single\s+|other\s+)?(?:day|morning|evening|night|week|weekend|month|"
    r"year|monday|tuesday|wednesday|"
    # "every morning and evening" is one frequency, and so is "every Saturday morning"
    r"thursday|friday|saturday|sunday)(?: and (?:morning|evening|night|afternoon))?"
    r"(?:(?<=day)\s+(?:morning|afternoon|evening|night))?"
    r"|daily|weekly|on weekends|on the weekends|each (?:day|morning|week)|"
    r"most days|most mornings|most weekends"
    # A count per period is a frequency too: "three times a week", "twice a month".
    r"|(?:(?:once|one|two|three|a couple of) or )?"  # "once or twice a year", "two or three times a week"
    r"(?:once|twice|(?:one|two|three|four|five|six|seven|a few|several|\d+)\s+times)\s+(?:a|per|every)\s+"
    r"(?:day|week|month|year))\b",
    re.IGNORECASE,
)
_TEMP = lazy_compile(
    r",?\s*\b(lately|recently|these days|for now|at the moment|currently|right now|nowadays|this week)\b,?",
    re.IGNORECASE,
)
_CONTRACTION = lazy_compile(
    r"\bI am\b|\b[Ii]'m\b|\bim\b|\bIm\b|\bi\b|\bI have been\b|\bI do not\b"
    r"|\bI cannot\b|\bI can not\b|\bI will\b"
)
_CONTRACTED = {
    "I have been": "I've been",
    "I do not": "I don't",
    "I cannot": "I can't",
    "I can not": "I can't",
    "I will": "I'll",
    "i": "I",
}
# ----------------------------------------------------------------- likes, habits

_LIKE = lazy_compile(
    r"^I (?:really |also |absolutely |just |still |totally |truly |especially |do |genuinely |always |kinda |"
    r"kind of |pretty much |definitely )*(love|like|enjoy|adore|prefer)\s+" + OBJ + "$"
)
_INTO = lazy_compile(
    r"^I'm (?:really |also |very |super |so |totally |pretty |quite |a bit |more |much more |mostly )*(into|"
    r"passionate about|keen on|obsessed with|"
    r"a (?:big |huge )?fan of|crazy about|fond of|interested in)\s+" + OBJ + "$"
)
_FAVORITE = lazy_compile(r"^[Mm]y (?:all[- ]time )?favou?rite\s+([\w ]{2,30}?)\s+is\s+" + OBJ + "$")
_DISLIKE = lazy_compile(
    r"^I (?:really |just |absolutely |honestly |simply |still )?(?:don't|do not|never|can't) "
    r"(?:really |just )?(like|enjoy|love|stand|bear|stomach|tolerate)\s+" + OBJ + "$"
)
# "I can't stand olives" is said as it is: "User can't stand olives.", never "doesn't stand".
_CANT_VERBS = frozenset({"stand", "bear", "stomach", "tolerate"})
_HATE = lazy_compile(
    r"^I (?:really |absolutely |totally )?(hate|dislike|detest|despise|can't stand)\s+" + OBJ + "$"
)
_AFRAID = lazy_compile(r"^I'm (not a (?:big )?fan of|afraid of|scared of|terrified of)\s+" + OBJ + "$")
_PLACE_SPLIT = lazy_compile(r"\s+(?:at|in|on|with|by|along|near|around|before|after)\s+")
_PAST = frozenset(
    "lost went got made took saw came left met ran bought found gave felt had was were did said".split()
)
_DO_SPORT = alternation(SPORT_ACTIVITIES_EN["do"])
_HABIT_CLAUSE = lazy_compile(r"^I\s+([A-Za-z]+)\b(.*)$")
_HABIT_VERB_BAD = lazy_compile(
    r"^(?:'m|am|was|were|feel|felt|think|thought|wonder|know|knew|guess|hope|"
    r"wish|want|need|have to|had|got|get|"
    # "do" alone is no habit ("I always do that"), "do karate" is a sport done (see _DO_SPORT).
    rf"can|could|would|will|should|do(?!\s+(?:{_DO_SPORT})\b)|did|don't|just|really|also|love|like|enjoy|hate|mean|"
    r"say|said|see|saw|"
    r"remember|forget|try|tried|find|found|end up|come|came|make sure|tell|told|"
    r"look|didn|don|doesn|only|never|"
    r"rarely|won|can't|cannot)\b",
    re.IGNORECASE,
)


# A habit under a condition ("I always have a great time whenever I visit", "I sometimes fall when
# I run too fast") holds only then: the rules would cut the condition off and state it as always.
_CONDITION = lazy_compile(r"\b(?:when|whenever|if|every time|each time|unless)\b", re.IGNORECASE)
#: A clause that is only a condition ("When I'm there, I usually bring a book"): the habit that
#: follows it in the same sentence holds only then.
CONDITION_CLAUSE = lazy_compile(r"^(?:when|whenever|if|every time|each time|unless|once)\b", re.IGNORECASE)


# A pronoun after taking someone along is the dog or the child, not someone else's habit:
# "I take her for a run every morning", "I walk him along the canal daily".
_ALONG_VERBS = frozenset({"take", "walk", "bring", "drive"})
_TAKE_ALONG = lazy_compile(
    r"^\s+(?:him|her|them|it)\b(?=\s+(?:for|to|out|along|around|on|through|by)\b)"
    r"(?:\s+(?:out\s+)?for\s+(?:a|an|his|her|their)\s+(?P<what>[a-z]+))?"
)


def _pref(obj: str, lead: str, polarity: int) -> Fact | None:
    """A like/dislike fact: ``lead`` is the content before the object ("User loves")."""
    obj = trim_object(obj)
    if not ok_object(obj):
        return None
    item = re.sub(r"^(?:to\s+|eating\s+|drinking\s+|to eat\s+|to drink\s+)", "", obj, flags=re.IGNORECASE)
    food = (
        obj.lower().startswith(("eating ", "drinking ", "to eat ", "to drink ")) or item.lower() in EN_FOODS
    )
    content = f"{lead} {third_person(obj)}."
    key = food_key(item) if food else f"pref:{norm_key(item)}"
    return Fact(
        content, "diet" if food else "preference", key, third_person(item), polarity=polarity, confidence=0.8
    )


_LIST_SPLIT = lazy_compile(r"\s*,\s*(?:and\s+|or\s+)?|\s+(?:and|or)\s+(?=[^,]*$)")


_CUT_NOUN = lazy_compile(r"\b(?:a|an)\s+[\w-]+$", re.IGNORECASE)


# What a liking names only by pointing at something said or shown before, so the fact would name
# nothing: someone else's thing ("their work", "his music"), "all the ..." of a photo, a quality
# without its owner ("the color and texture", "the energy"), a list owned by "this city", a count
# ("two projects in particular").
_POINTING = lazy_compile(
    r"^(?:their|his|her|its|all (?:the|those|these)|the (?:colou?rs?|texture|energy|vibes?|atmosphere|theme|"
    r"design|style|details?|mood|look|feel|sound|shape|patterns?|lighting|composition)(?=$|,| and ))"
    r"|\bof (?:this|that|these|those|their|his|her|its)\b"
    r"|^(?:two|three|four|five|several|a few|a couple of|\d+) \w+(?: in particular)?$",
    re.IGNORECASE,
)
# A favourite is a thing, not where or when it comes up ("My favorite dish is for dinner tonight").
_NOT_A_VALUE = lazy_compile(
    r"^(?:for|at|in|on|to|from|with|about|when|tonight|today|tomorrow)\b", re.IGNORECASE
)
# An adverb the user put after the verb ("I like also cheese pizza") is not part of the object.
_OBJ_ADVERB = lazy_compile(r"^(?:also|too|really|even|especially|very much)\s+", re.IGNORECASE)


_NARROWING = lazy_compile(r"^(?:particularly|especially|mainly|mostly|specifically|notably)\b", re.IGNORECASE)


def _prefs(obj: str, lead: str, polarity: int) -> list[Fact] | None:
    """One fact per item of a comma list ("hiking, swimming, and reading"), else one fact."""
    obj = _OBJ_ADVERB.sub("", obj)
    if _POINTING.search(obj):
        return None
    full, obj = obj, trim_object(obj)
    first = _LIST_SPLIT.split(obj)[0]
    if "," in full and len(first.split()) > 2 and _CUT_NOUN.search(first):
        return None  # "creating a safe, inviting place": adjectives in a row were cut, the noun lost
    items = [i for i in _LIST_SPLIT.split(obj) if i] if "," in obj else [obj]
    # "..., particularly through music" narrows the item before it; it is no item of its own.
    items = [i for i in items if not _NARROWING.match(i)]
    facts = [f for f in (_pref(i, lead, polarity) for i in items) if f is not None]
    return facts or None


def _likes_habits(c: EnClause, ctx: RuleContext) -> list[Fact] | None:
    s = c.core
    m = _DISLIKE.match(s)
    if m:
        verb = m.group(1)
        lead = f"User can't {verb}" if verb in _CANT_VERBS else f"User doesn't {verb}"
        return _prefs(m.group(2), lead, -1)
    m = _HATE.match(s)
    if m:
        verb = m.group(1) if " " in m.group(1) else conj(m.group(1))
        return _prefs(m.group(2), f"User {verb}", -1)
    m = _AFRAID.match(s)
    if m:
        return _prefs(m.group(2), f"User is {m.group(1)}", -1)
    m = _LIKE.match(s)
    if m:
        adverb = f"{c.habit_pre.lower()} " if c.habit_pre else ""
        return _prefs(m.group(2), f"User {adverb}{conj(m.group(1))}", 1)
    m = _INTO.match(s)
    if m:
        return _prefs(m.group(2), f"User is {m.group(1)}", 1)
    m = _FAVORITE.match(s)
    if m and ok_object(m.group(2)) and not _NOT_A_VALUE.match(m.group(2)):
        thing, value = m.group(1).lower(), third_person(m.group(2))
        content = f"User's favorite {thing} is {value}."
        return [Fact(content, "preference", f"pref:favorite_{norm_key(thing)}", value, single_valued=True)]
    if c.habit_pre or c.habit_post:
        m = _HABIT_CLAUSE.match(s)
        along = _TAKE_ALONG.match(m.group(2)) if m and m.group(1).lower() in _ALONG_VERBS else None
        if (
            m
            and not _HABIT_VERB_BAD.match(s[2:])
            and not m.group(1).lower().endswith("ed")
            and not VAGUE.search(m.group(2)[along.end() :] if along else m.group(2))
            and m.group(1).lower() not in _PAST
            and not YOU.search(s)
            and len(s.split()) <= 16
            and not _CONDITION.search(m.group(2))
        ):
            verb, tail = m.group(1), trim_object(m.group(2))
            rest = f" {third_person(tail)}" if tail else ""
            pre = f"{c.habit_pre.lower()} " if c.habit_pre else ""
            # "every Tuesday" keeps its capital; "Every day" at a clause start does not.
            post = f" {c.habit_post[:1].lower()}{c.habit_post[1:]}" if c.habit_post else ""
            content = f"User {pre}{conj(verb)}{rest}{post}."
            activity = _PLACE_SPLIT.split(f"{verb} {tail}".strip())[0]
            if along:  # "take her for a run" is running, "drive them to school" driving to school
                rest_of = m.group(2)[along.end() :].strip()
                activity = along["what"] or _PLACE_SPLIT.split(f"{verb} {rest_of}".strip())[0]
            return [
                Fact(content, "habit", f"habit:{norm_key(activity)}", third_person(activity), confidence=0.7)
            ]
    return None


# ----------------------------------------------------------------- plans

_PLANS = (
    # (regex, modal): the modal decides the wording and whether a date is required.
    (lazy_compile(r"^I'm\s+(planning|thinking about|thinking of|scheduled)\s+(?:to\s+)?" + OBJ + "$"), ""),
    (lazy_compile(r"^I\s+(plan|intend)\s+(?:to\s+)?" + OBJ + "$"), ""),
    (lazy_compile(r"^I'm\s+(going|about|hoping|supposed|due)\s+to\s+" + OBJ + "$"), ""),
    (lazy_compile(r"^I\s+(want|hope|need|have|would like|am going)\s+to\s+" + OBJ + "$"), ""),
    (lazy_compile(r"^I(?:'ll| will)\s+" + OBJ + "$"), "will"),
    (lazy_compile(r"^I'd like to\s+" + OBJ + "$"), "would like"),
)
_TRAVEL = lazy_compile(
    r"^I'm\s+(flying|traveling|travelling|heading|driving|moving|going back|"
    r"coming back|returning|going)\s+to\s+" + OBJ + "$"
)
_EVENT = lazy_compile(
    r"^I(?:'ve| have)(?: got)?\s+(?:a|an|my|the)\s+(.{0,40}?\b(?:trip|appointment|"
    r"interview|exam|test|meeting|concert|"
    r"wedding|surgery|flight|vacation|holiday|party|date|game|match|recital|"
    r"presentation|deadline|conference|race|"
    r"marathon|competition|show|performance|checkup|check-up)\b.{0,40})$"
)
_PLACE_START = lazy_compile(r"^(?:[A-Z]|(?:a|an|the|my|our|their)\s)")
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
_ING = lazy_compile(r"^I'm\s+(\w+ing)\s+(.{1,60})$")
_ING_BAD = tuple(
    "feeling|thinking|doing|getting|loving|enjoying|hoping|wondering|looking|having|trying|"
    "being|talking|saying|telling|going".split("|")
)
_STRONG = ("planning", "plan", "intend", "scheduled", "thinking about", "thinking of")
#: Long-term goals worth remembering without a date ("I want to lose weight").
_GOAL = lazy_compile(
    r"^(?:lose weight|get fit|get in shape|quit smoking|quit drinking|stop smoking|save (?:up )?money|"
    r"buy a (?:house|home|car|flat|apartment)|find a (?:new |better )?job|change (?:jobs|careers)|"
    r"get married|run a marathon|study abroad|learn (?:to \w+|\w+)(?: \w+)?|become an? \w+(?: \w+)?)$",
    re.IGNORECASE,
)
_CRAVING = lazy_compile(
    r"^(?:eat|drink|grab|order|snack|have (?:a|an|some) (?:coffee|tea|drink|snack|bite|beer|glass|cup|"
    r"meal|lunch|dinner|breakfast|pizza|burger))\b",
    re.IGNORECASE,
)
_WILL_BAD = lazy_compile(
    r"^(?:be\s+)?(?:fine|ok|okay|right|there|back|careful|sure|happy|glad|good|great)\b", re.I
)


# "I signed up for the Bristol Half Marathon in September", "I've booked flights to Lisbon for next
# week": committing to a dated event is a plan for that date (said without a date it is not).
_SIGNED_UP = lazy_compile(
    r"^I(?:'ve| have)?\s*(?:just\s+|finally\s+|already\s+|also\s+|officially\s+)?"
    r"(signed up for|registered for|entered|enrolled in|booked|got tickets (?:for|to)|"
    r"bought tickets (?:for|to)|reserved|RSVP'd to|applied for)\s+" + OBJ + "$"
)


_LEAD_ARTICLE = lazy_compile(r"^(?:a|an|the|my|their)\s+", re.IGNORECASE)


def _signed_up(c: EnClause, ctx: RuleContext) -> list[Fact] | None:
    m = _SIGNED_UP.match(c.core)
    if m is None or c.when is None or c.when.period.end <= ctx.today:
        return None
    thing = trim_object(m.group(2))
    if not ok_object(thing) or len(thing.split()) > 10:
        return None
    thing = third_person(thing)
    key = f"plan:{norm_key(_LEAD_ARTICLE.sub('', thing))}"
    ctx.add_plan(key, f"attend {thing}", "plans")
    content = f"User {m.group(1)} {thing}{c.when_text()}."
    expires = ctx.period_expiry(c.when.period)
    return [Fact(content, "plan", key, thing, transient=True, expires_at=expires, confidence=0.75)]


def _plan_match(s: str) -> tuple[str, str] | None:
    for rx, fixed in _PLANS:
        m = rx.match(s)
        if m:
            return (fixed, m.group(1)) if fixed else (m.group(1), m.group(2))
    return None


def _plans(c: EnClause, ctx: RuleContext) -> list[Fact] | None:
    s = c.core
    if c.when is not None and c.when.period.end <= ctx.today:
        return None  # today's errands and wants ("I'm going to the gym tonight") are momentary
    future = c.when is not None
    expires = ctx.period_expiry(c.when.period) if c.when is not None and future else ctx.ttl_expiry()
    signed = _signed_up(c, ctx)
    if signed:
        return signed
    m = _EVENT.match(s)
    if m and future:
        thing = third_person(m.group(1))
        key = f"plan:{norm_key(thing)}"
        ctx.add_plan(key, f"have {article(thing)} {thing}", "plans")
        content = f"User has {article(thing)} {thing}{c.when_text()}."
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
            and ok_object(m.group(2))
        ):
            thing = third_person(f"{m.group(1)} {m.group(2)}")
            key = f"plan:{norm_key(thing)}"
            ctx.add_plan(key, f"be {thing}", "plans")
            content = f"User is {thing}{c.when_text()}."
            return [Fact(content, "plan", key, thing, transient=True, expires_at=expires, confidence=0.7)]
        return None
    if not ok_object(action) or len(action.split()) > 14:
        return None
    if not future and modal in ("want", "hope", "need", "would like") and _GOAL.match(action):
        action = third_person(action)
        verb = "wants" if modal != "need" else "needs"
        key = f"goal:{norm_key(action)}"
        return [Fact(f"User {verb} to {action}.", "goal", key, action, confidence=0.65)]
    if modal not in _STRONG and (not future or _CRAVING.match(action)):
        return None  # "I want to grab a coffee tomorrow" is a craving, not a plan
    action = third_person(action.strip())
    key = f"plan:{norm_key(action)}"
    if modal.startswith("thinking"):
        content = f"User is {modal} {action}{c.when_text()}."
        ctx.add_plan(key, action, "plans")
    else:
        verb = "wants" if modal in ("want", "hope", "hoping", "would like") else "plans"
        # "I'm planning a trip": a noun phrase is planned, not "plans to a trip".
        to = "" if verb == "plans" and _LEAD_ARTICLE.match(action) else "to "
        content = f"User {verb} {to}{action}{c.when_text()}."
        ctx.add_plan(key, action, verb)
    return [Fact(content, "plan", key, action, transient=True, expires_at=expires, confidence=0.7)]


_FOLLOW = lazy_compile(
    r"^(?:[Tt]he|[Mm]y|[Oo]ur)\s+(\w+(?:\s+\w+)?)\s+(?:is|will be|starts)\s*(?:from|on|in|scheduled for)?\s*$"
)


def _plan_date(c: EnClause, ctx: RuleContext) -> list[Fact] | None:
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


_FOLLOW_GATE = lazy_compile(r"^(?:the|my|our)\s", re.IGNORECASE)

# Each rule group runs only when one of its trigger words occurs in the clause: most clauses of a
# long English transcript reach no rule at all, which keeps extraction fast.
_ID_WORDS = frozenset(
    "name name's call calls called turned turning turn born married single divorced engaged widowed "
    "birthday bday by".split()
)
_WORK_WORDS = frozenset(
    """work works working live lived living based moved relocated settled from grew became a an
    been job""".split()
)
_HEALTH_WORDS = frozenset(
    """allergic allergy allergies eat drink avoid avoiding vegetarian vegan pescatarian trying testing
    experimenting
    sick ill unwell pregnant diet dieting fasting injured recovering training studying preparing
    looking hunting
    sleeping cold fever flu cough headache stomachache toothache ache migraine throat pain hangover
    stomach hurts
    sore killing upset acting staying been asthma diabetes hypertension celiac migraines arthritis
    anemia eczema adhd depression anxiety insomnia condition gout diabetic asthmatic colorblind
    colourblind color colour intolerant anemic epileptic learning practicing practising started began
    went became switched stopped quit gave shift shifts nights leave call vacation holiday break antibiotics
    medication crutches rest
    picked reading watching writing building renovating working saving taking recovering dealing""".split()
)
_FAMILY_WORDS = frozenset("have i've got my adopted rescued bought brought took".split())
_LIKE_WORDS = frozenset(
    """love like enjoy adore prefer into passionate keen obsessed fan crazy fond interested favorite favourite
    hate
    dislike detest despise stand bear stomach tolerate afraid scared terrified""".split()
)
_PLAN_WORDS = frozenset("plan planning intend thinking scheduled want need hope i'd".split())


def _gated_rules(c: EnClause) -> list[Rule]:
    low = c.core.lower()
    words = frozenset(low.replace(",", " ").split())
    rules: list[Rule] = []
    if not _ID_WORDS.isdisjoint(words) or (
        low.startswith("i'm ") and (low[4:5].isdigit() or c.core[4:5].isupper())
    ):
        rules.append(identity)
    if not _WORK_WORDS.isdisjoint(words):
        rules.append(work)
    if not _HEALTH_WORDS.isdisjoint(words):
        rules.append(health_food)
    if not _FAMILY_WORDS.isdisjoint(words):
        rules.append(pets_family)
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


_DANGLING = lazy_compile(r"\s+(?:on|in|at|from|by|for|during|until|till)\s*$", re.IGNORECASE)
_DAYPART = lazy_compile(r"^\s*(?:morning|afternoon|evening|night)\b")
_STARTS = lazy_compile(r"^(?:I\b|I'm\b|I've\b|I'll\b|I'd\b|[Mm]y\b)")
_LEAD_WORDS = tuple(
    "lately|recently|these days|this |next |tomorrow|today|tonight|usually|every|on |in |"
    "at the moment|currently|right now|for now|nowadays|sometimes|often|always|normally|"
    "generally|typically|most |daily|weekly".split("|")
)
_OPENINGS = ("i ", "i'", "im ", "my ", *_LEAD_WORDS)
_HABIT_WORDS = tuple(
    "usually|often|always|normally|regularly|typically|generally|frequently|sometimes|mostly|"
    "every|daily|weekly|weekend|each |most |times a|times per|once a|twice a|once per|twice per".split("|")
)
_TEMP_WORDS = tuple(
    "lately|recently|these days|for now|at the moment|currently|right now|nowadays|this week".split("|")
)


def could_state(sentence: str, ctx: RuleContext) -> bool:
    """Cheap sentence filter: first-person sentences, plan follow-ups, news about a known pet."""
    return (
        _first_person(sentence)
        or bool(ctx.plans and _FOLLOW_GATE.match(sentence))
        or _about_pet(sentence, ctx)
        or "ere in " in sentence
    )


# "I love it here in Bristol", "the weather here in Leeds is awful": where the user is, said in
# passing, unless the sentence says they are only visiting.
_HERE_IN = lazy_compile(r"\b[Hh]ere in ([A-Z][\w.'-]*(?:\s+[A-Z][\w.'-]*){0,2})")
_AWAY = lazy_compile(
    r"\b(?:visit|visiting|vacation|holiday|trip|travel|traveling|travelling|tour|touring|conference|hotel|"
    r"stopover|layover|business|for the (?:week|weekend|day|night)|few days|having (?:me|us)|welcome)\b",
    re.IGNORECASE,
)
_NOT_PLACES = frozenset(
    "january february march april may june july august september october november december monday tuesday "
    "wednesday thursday friday saturday sunday spring summer autumn fall winter i".split()
)


def _here(text: str) -> list[Fact]:
    if "ere in " not in text:
        return []
    m = _HERE_IN.search(text)
    if m is None or YOU.search(text) or _AWAY.search(text) or m.group(1).split()[0].lower() in _NOT_PLACES:
        return []
    place = m.group(1)
    return [
        Fact(
            f"User is based in {place}.", "profile", "profile:city", place, single_valued=True, confidence=0.7
        )
    ]


def _about_pet(text: str, ctx: RuleContext) -> bool:
    return bool(ctx.pets) and text.startswith(tuple(n for n in ctx.pets if n[:1].isupper()))


def extract_en_clause(clause: Clause, ctx: RuleContext) -> list[Fact]:
    """Extract facts from one English clause (empty list when it states nothing personal)."""
    if clause.question:
        return []
    here = _here(clause.text)
    facts = _extract(clause, ctx)
    return here + [f for f in facts if f.key != "profile:city"] if here else facts


def _extract(clause: Clause, ctx: RuleContext) -> list[Fact]:
    text = clause.text
    if ctx.plans and _FOLLOW_GATE.match(text):
        when = find_en(text, ctx.today)
        if when is not None:
            follow = _plan_date(EnClause("", text, "", "", "", when), ctx)
            if follow:
                return follow
    if _about_pet(text, ctx):
        return pets_family(EnClause(text.strip(" .!"), text, "", "", "", None), ctx) or []
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
        # "I love X and often try Y": the adverb of a second verb is that verb's, left where it is.
        if m and " and " not in text[: m.start()]:
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
    c = EnClause(core, raw, habit_pre, habit_post, temp, when)
    for rule in _gated_rules(c):
        out = rule(c, ctx)
        if out:
            return out
    return []
