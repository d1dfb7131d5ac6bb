"""English rules about who the user is: identity, place and work, health and food, pets and family."""

from __future__ import annotations

import re

from convmem_graph.extractors._en_base import (
    BAD_OBJECT_START,
    OBJ,
    PLACE,
    VAGUE,
    YOU,
    EnClause,
    article,
    food_key,
    ok_object,
    third_person,
    transient_fact,
)
from convmem_graph.extractors._facts import Fact, RuleContext
from convmem_graph.extractors._lexicon import EN_FOODS, EN_JOB_NOUNS, EN_RELATIONS, EN_SPECIES, en_relation
from convmem_graph.text._lazy_re import lazy_compile
from convmem_graph.text.scripts import norm_key
from convmem_graph.text.timeexpr import past_date_en

__all__ = ["health_food", "identity", "pets_family", "work"]

# ----------------------------------------------------------------- identity

_NAME = lazy_compile(
    r"^(?:[Mm]y name is|[Mm]y name's|I'm called|[Cc]all me|[Pp]eople call me|[Ee]veryone calls me)\s+"
    r"([A-Z][\w'-]*(?:\s+[A-Z][\w'-]*){0,2})$"
)
# "I'm Priya", "Hi, I'm Dev Patel, nice to meet you": a self-introduction when the word after I'm is
# a capitalized name (not a nationality, a feeling said in Title Case, or an -ing word).
_NAME_WORD = r"[A-Z][a-z]+(?:[-'][A-Z]?[a-z]+)?"
_SELF_NAME = lazy_compile(
    rf"^(?:I'm|I go by|[Nn]ame's)\s+({_NAME_WORD}(?:\s+{_NAME_WORD})?)"
    r"(?:\s*,?\s+(?:nice|pleased|glad|good|great|lovely) to (?:meet|e-meet|chat with) you\b.*)?$"
)
_NOT_NAMES = frozenset(
    """
    sorry fine good great okay ok well back home here there done ready happy sad tired busy sure glad
    excited new not so just also still really afraid alone hungry late early free single married sick
    american canadian british english irish scottish welsh australian chinese japanese korean indian
    mexican german french italian spanish russian brazilian dutch swedish norwegian danish finnish polish
    vietnamese filipino thai nigerian kenyan african asian european latino latina hispanic muslim jewish
    catholic christian buddhist hindu atheist vegan vegetarian gay straight bi trans aries taurus gemini
    cancer leo virgo libra scorpio sagittarius capricorn aquarius pisces mom dad the a an in at on from
    with into over off out up down retired pregnant proud grateful thankful blessed lucky honored
    bored sleepy cold hot full lost stuck broke exhausted confused curious nervous scared worried stressed
    thirsty serious jealous angry upset alright awake sure positive certain old young amazed impressed
    obsessed addicted allergic done finished retired unemployed employed single shy quiet loud famous
    rich poor vegan back totally literally definitely probably still always never almost kinda
    """.split()
)
_AGE = lazy_compile(r"^I'm\s+(\d{1,3})(?:\s*(?:years?|yrs?)(?:[\s-]*old)?)?(?:\s+(?:now|already|today))?$")
_NUMBER_WORDS = {
    w: i
    for i, w in enumerate(
        "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen "
        "sixteen seventeen eighteen nineteen".split()
    )
} | {
    w: 10 * i
    for i, w in enumerate("_ _ twenty thirty forty fifty sixty seventy eighty ninety".split())
    if i > 1
}
_AGE_WORD = (
    r"\d{1,3}|(?:twenty|thirty|forty|fifty|sixty|seventy|eighty|ninety)"
    r"(?:[- ](?:one|two|three|four|five|six|seven|eight|nine))?|[a-z]+teen|ten|eleven|twelve"
)
# "I turned 27 last month", "I'm turning 30 next week" (the time word already read as the clause's).
_TURNED = lazy_compile(
    r"^I(?:'m| will| 'll|'ll)? (?:just |recently |finally |only |actually )?(?:turned|turning|turn)\s+"
    rf"({_AGE_WORD})"
    r"(?:\s+years? old)?(?:\s+(?P<tail>.{2,40}))?$"
)
_BORN = lazy_compile(r"^I was born in\s+(?:(\d{4})|" + PLACE + r")$")
_BIRTHDAY = lazy_compile(r"^[Mm]y (?:birthday|bday|b-day)(?:'s| is)?(?: coming up)?$")
_MARITAL = lazy_compile(
    r"^I'm\s+(?:happily\s+|recently\s+|now\s+)?(married|single|divorced|engaged|widowed)$"
)


def _age_number(word: str) -> int | None:
    if word.isdigit():
        return int(word)
    parts = re.split(r"[- ]", word.lower())
    if not all(p in _NUMBER_WORDS for p in parts):
        return None
    return sum(_NUMBER_WORDS[p] for p in parts)


def _turned(m: re.Match[str], c: EnClause, ctx: RuleContext) -> list[Fact] | None:
    """The birth year from an age reached on a birthday, dated by the clause's own time words."""
    age = _age_number(m.group(1))
    if age is None or not 3 <= age <= 110:
        return None
    tail = m["tail"]
    when = past_date_en(tail, ctx.today) if tail else None
    if tail and when is None:
        return None
    if when is None and c.when is not None:
        when = c.when.period.start
        if m.group(0).startswith("I turned") and when > ctx.today:  # "turned 40 in March" said in May
            when = when.replace(year=when.year - 1)
    when = when or ctx.today
    year = when.year - age
    verb = "turns" if when > ctx.today else "turned"
    said = f"{verb} {age} in {when.strftime('%B')} {when.year}" if when != ctx.today else f"{verb} {age}"
    content = f"User was born in {year} ({said})."
    return [Fact(content, "profile", "profile:birth_year", str(year), single_valued=True, confidence=0.85)]


def identity(c: EnClause, ctx: RuleContext) -> list[Fact] | None:
    s = c.core
    m = _NAME.match(s) or _SELF_NAME.match(s)
    if m:
        name = m.group(1)
        if any(w.lower() in _NOT_NAMES or w.lower().endswith("ing") for w in name.split()):
            return None
        return [
            Fact(
                f"User's name is {name}.", "profile", "profile:name", name, single_valued=True, confidence=0.9
            )
        ]
    m = _TURNED.match(s)
    if m:
        return _turned(m, c, ctx)
    m = _AGE.match(s)
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
    if c.when is not None and c.when.period.kind == "day" and _BIRTHDAY.match(s):
        day = c.when.period.start
        content = f"User's birthday is on {day.day} {day.strftime('%B')}."
        value = f"{day.month:02d}-{day.day:02d}"
        return [Fact(content, "profile", "profile:birthday", value, single_valued=True, confidence=0.85)]
    m = _MARITAL.match(s)
    if m:
        value = m.group(1)
        return [
            Fact(f"User is {value}.", "profile", "profile:marital", value, single_valued=True, confidence=0.8)
        ]
    return None


# ----------------------------------------------------------------- place and work

_JOB = lazy_compile(
    r"^(?:I'm|I work as|I'm working as|I've been working as|I'm now|I became"
    # A job started or got is the job: "I started a new job as a nurse", "I got a job as a cook".
    r"|I(?:'ve| have)? (?:just |recently )?(?:started|got|took|landed) (?:a |my )?(?:new )?job as)"
    r"\s+(?:a|an)\s+"
    r"((?:[\w-]+\s+){0,3}?[\w-]+?)(?:\s+(in|at|for)\s+(.{2,60}?))?"
    r"(?:\s+(?:last \w+|this \w+|recently|(?:a|one|two|three|a few|\d+) \w+ ago))?$"
)
_WORK_AT = lazy_compile(
    r"^I(?:'ve been)? work(?:ing)? (?:at|for)\s+(.{2,60})$|^I'm working (?:at|for)\s+(.{2,60})$"
)
_WORK_IN = lazy_compile(r"^I work in\s+(.{2,60})$")
_LIVE = lazy_compile(
    r"^I(?:'m| have| 've|'ve)?\s*(live|living|been living|based|moved|just moved|"
    r"recently moved|relocated|settled|moved back|moved back home)"
    r"\s+(?:in|to)\s+"
    + PLACE
    + r"(?:\s+(?:now|recently|last \w+|with .{1,40}|a while ago|\w+ years ago|in \d{4}|in"
    r"|after (?:college|school|graduation|university|grad school|the divorce|retirement|my \w+)))?$"
)
# "I've been in London for ten years": a place the user has been in that long is where they live.
_BEEN_IN = lazy_compile(
    r"^I(?:'ve| have) (?:been (?:living |based )?in|lived in)\s+"
    + PLACE
    + r"\s+for\s+(?:about |almost |over |nearly )?"
    r"(?:\w+|\d+|a few|a couple of) (?:years?|months?)(?: now)?$"
)
_FROM = lazy_compile(r"^I'm (?:originally )?from\s+" + PLACE + r"$|^I grew up in\s+" + PLACE + r"$")


# "for the team and our season opener is ...": a second statement run on after the workplace.
_NEXT_CLAUSE = lazy_compile(r"\s(?:and|but|so)\s+(?:our|my|the|it|we|I|they|he|she|his|her|their)\b")
# Who the user is at a place without working there: "a member at the gym", "a regular at the bar".
_NOT_A_JOB = lazy_compile(
    r"\b(?:member|regular|guest|customer|client|patient|visitor|fan|friend|mom|dad|parent|newbie|beginner"
    r"|person|fool|mess|wreck|pro|natural|big|huge|part)$",
    re.IGNORECASE,
)
# "I work as a team", "as a whole": how, not what the user works as.
_NOT_A_ROLE = lazy_compile(r"\b(?:team|group|whole|unit|pair|family|result|part|way)$", re.IGNORECASE)


def work(c: EnClause, ctx: RuleContext) -> list[Fact] | None:
    s = c.core
    m = _JOB.match(s)
    # "I work as a dispatcher": the verb says it is a job, whatever the noun; "I'm a X" needs a job noun.
    # "I'm a forklift operator at a warehouse": a role said with where it is done is a job too.
    at_work = m is not None and m.group(2) in ("at", "for") and not _NOT_A_JOB.search(m.group(1))
    works_as = (
        s.startswith(("I work as", "I'm working as", "I've been working as")) or " job as " in s or at_work
    ) and not (m is not None and _NOT_A_ROLE.search(m.group(1)))
    if m and (works_as and not YOU.search(m.group(1)) or m.group(1).split()[-1].lower() in EN_JOB_NOUNS):
        job = m.group(1)
        facts = [
            Fact(
                f"User works as {article(job)} {job}.",
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
        elif (
            where
            and not YOU.search(where)
            and not _NOT_WORKPLACE.match(where)
            and not _NEXT_CLAUSE.search(where)
        ):
            where = third_person(where)
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
        where = third_person(m.group(1) or m.group(2))
        if YOU.search(where) or len(where.split()) > 6 or _NOT_WORKPLACE.match(where):
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
    if (
        m
        and not YOU.search(m.group(1))
        and len(m.group(1).split()) <= 6
        and not _NOT_WORKPLACE.match(m.group(1))
    ):
        where = third_person(m.group(1))
        key = "profile:city" if where[:1].isupper() else "profile:workplace"
        return [Fact(f"User works in {where}.", "profile", key, where, single_valued=True, confidence=0.75)]
    m = _LIVE.match(s)
    if m:
        verb, place = m.group(1), m.group(2)
        content = (
            f"User moved to {place}." if "moved" in verb or "relocated" in verb else f"User lives in {place}."
        )
        return [Fact(content, "profile", "profile:city", place, single_valued=True, confidence=0.85)]
    m = _BEEN_IN.match(s)
    if m:
        place = m.group(1)
        return [
            Fact(
                f"User lives in {place}.",
                "profile",
                "profile:city",
                place,
                single_valued=True,
                confidence=0.8,
            )
        ]
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

_ALLERGY = lazy_compile(
    r"^I'm\s+(not\s+)?(?:also\s+|severely\s+|very\s+|really\s+|super\s+|deathly\s+)?allergic to\s+"
    + OBJ
    + "$"
)
_ALLERGY_HAVE = lazy_compile(r"^I(?:'ve| have)(?: got)?\s+(?:a|an)\s+(.{1,30}?)\s+allergy$")
_NO_EAT = lazy_compile(
    r"^I (?:don't|never|can't|no longer|won't|do not|try not to)\s+(eat|drink)\s+" + OBJ + "$"
)
_ALCOHOL = frozenset({"alcohol", "booze", "liquor", "any alcohol"})
_NOT_EATING = lazy_compile(r"^I'm\s+(?:not eating|not drinking|avoiding|staying away from)\s+" + OBJ + "$")
_AVOID = lazy_compile(r"^I (?:avoid|stay away from)\s+" + OBJ + "$")
# "I'm vegan", "I've been vegetarian since 2019", "I went vegan two years ago": since when is kept.
_VEG = lazy_compile(
    r"^I(?:'m|'ve been| have been| went| became| turned| switched to being)\s+"
    r"(?:a\s+|now\s+|strictly\s+|fully\s+|completely\s+)?(vegetarian|vegan|pescatarian)"
    r"(?:\s+(?P<since>since\s+.{2,30}|for\s+(?:the\s+(?:last|past)\s+)?.{1,20}?(?:years?|months?|weeks?)"
    r"|(?:.{1,15}?)(?:years?|months?) ago|in \d{4}|last (?:year|month)))?$"
)
# "I stopped eating meat in 2019": a food given up.
_STOPPED = lazy_compile(
    r"^I (?:stopped|quit|gave up) (eating|drinking)\s+"
    + OBJ
    + r"(?:\s+(since .{2,30}|in \d{4}|.{1,15} ago))?$"
)
_APPROX = frozenset(
    {"about", "around", "almost", "nearly", "over", "roughly", "cold turkey", "for good", "completely"}
)
_TRYING = lazy_compile(r"^I'm\s+(?:trying|trying out|experimenting with|testing out)\s+" + OBJ + "$")
_BEEN = lazy_compile(r"^I've been\s+" + OBJ + "$")
# Learning is a state even without "lately"; other activities in progress only with a time word
# ("I'm reading Dune these days"): a bare "I'm watching TV" is what the user does right now.
_LEARNING = r"learning|studying|practicing|practising|training in|taking"
_ONGOING = lazy_compile(
    rf"^I'm\s+(?:(?:also|still|now|currently)\s+)?({_LEARNING}|reading|watching|writing|building|"
    r"renovating|working on|getting into|preparing|planning|saving|looking after|taking care of|"
    r"recovering from|dealing with)\s+" + OBJ + "$"
)
_LEARNING_RE = lazy_compile(rf"^(?:{_LEARNING})\b")
_LESSONS = lazy_compile(r"\b(?:lessons|classes|class|course|courses)$")
# "studying real hard", "learning a ton": how much, not what.
_NO_WHAT = lazy_compile(r"^(?:real(?:ly)?|so|very|hard|a lot|lots|a ton|tons|too|quite|a bit|more|fast)\b")


def _learning(verb_and_object: str) -> bool:
    """Whether ``learning X`` / ``taking X lessons`` names something being learned."""
    verb, _, obj = verb_and_object.partition(" ")
    if verb == "training":
        verb, _, obj = obj.partition(" ")
    if not _LEARNING_RE.match(verb_and_object) or _NO_WHAT.match(obj):
        return False
    return verb != "taking" or _LESSONS.search(obj) is not None


_STARTED = lazy_compile(
    rf"^I(?:'ve)? (?:just |recently |finally )?(?:started|began|picked up)\s+({_LEARNING}|to learn)\s+"
    + OBJ
    + r"(?:\s+(?:last \w+|(?:a few|\w+) (?:days|weeks|months|years) ago|a while ago|recently))?$"
)
_STATE = lazy_compile(
    r"^I'm\s+(?:feeling\s+)?(sick|ill|unwell|pregnant|on a diet|dieting|fasting|"
    r"injured|recovering from .{2,40}|"
    r"training for .{2,40}|studying for .{2,40}|preparing for .{2,40}|looking for a (?:new )?job|job hunting|"
    r"sleeping badly|not sleeping well)$"
)
# Working hours, leave and treatment bound to a period: "I'm on night shifts this week", "I'm on
# leave until Friday". Temporary even without a time word (nobody is on holiday for good).
_ON_STATE = lazy_compile(
    r"^I'm\s+(?:currently\s+|still\s+|now\s+|back\s+)?("
    r"(?:working\s+)?on\s+(?:the\s+)?(?:night|late|early|day|double|weekend|morning|evening|graveyard)\s+shifts?"
    r"|on nights|on call|on (?:annual |sick |parental |maternity |paternity |medical |study )?leave"
    r"|on (?:a |my )?(?:vacation|holiday|break|sabbatical|staycation)"
    r"|on (?:a course of )?(?:antibiotics|medication|steroids)|on crutches|on bed rest"
    r"|working (?:nights|late|double shifts|overtime|from home)|off work)"
    r"(?:\s+(?:until|till) \w+)?$"
)
_AILMENT = lazy_compile(
    r"^I(?:'ve| have)(?: got)?\s+((?:a\s+|an\s+|the\s+)?"
    r"(?:cold|fever|flu|cough|headache|stomach ?ache|migraine|"
    r"sore throat|back pain|toothache|hangover|stomach (?:problems|issues|trouble)))$"
)
#: Lasting conditions: "I have asthma", "I'm lactose intolerant" -> health:<condition>.
_CHRONIC = lazy_compile(
    r"^I(?:'ve| have)(?: got)?\s+(asthma|diabetes|high blood pressure|hypertension|celiac disease|"
    r"migraines|arthritis|anemia|eczema|adhd|depression|anxiety|insomnia|a heart condition|gout)$"
    r"|^I'm\s+(diabetic|asthmatic|colou?r ?blind|lactose intolerant|gluten intolerant|anemic|epileptic)$",
    re.IGNORECASE,
)
_BODY_HURTS = lazy_compile(
    r"^[Mm]y (stomach|back|head|knee|throat|tooth|leg|arm|shoulder|neck|wrist|ankle)\s+"
    r"(hurts|is (?:killing me|bad|upset|sore|acting up)"
    r"|has been (?:hurting|killing me|bad|upset|sore|acting up))$"
)


def health_food(c: EnClause, ctx: RuleContext) -> list[Fact] | None:
    s = c.core
    m = _ALLERGY.match(s)
    said_allergic = m is not None  # "I'm (not) allergic to X" rather than "I have a X allergy"
    m = m or _ALLERGY_HAVE.match(s)
    if m:
        neg = said_allergic and bool(m.group(1))
        item = (m.group(2) if said_allergic else m.group(1)).strip()
        if YOU.search(item) or BAD_OBJECT_START.match(item) or len(item.split()) > 6:
            return None
        item = third_person(item)
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
        diet, since = m.group(1), m["since"]
        if since and YOU.search(since):
            return None
        content = f"User is {diet}."
        if since and since.startswith(("since", "in ")):
            content = f"User has been {diet} {since}." if since[0] == "s" else f"User went {diet} {since}."
        elif since and since.startswith("for "):
            content = f"User has been {diet} {since} (as of {ctx.today.strftime('%B')} {ctx.today.year})."
        elif since:
            when = past_date_en(since, ctx.today)
            content = f"User went {diet} in {when.year}." if when else content
        return [Fact(content, "diet", f"food:{diet}", diet, confidence=0.85)]
    m = _STOPPED.match(s)
    # "I quit drinking about two years ago": "about" starts the time, not a drink.
    if m and ok_object(m.group(2)) and not YOU.search(s) and m.group(2).lower() not in _APPROX:
        item = third_person(m.group(2))
        tail = f" {m.group(3)}" if m.group(3) else ""
        content = f"User stopped {m.group(1)} {item}{tail}."
        return [Fact(content, "diet", food_key(item), item, polarity=-1, confidence=0.8)]
    m = _NO_EAT.match(s)
    if m and ok_object(m.group(2)):
        item = third_person(m.group(2))
        content = f"User doesn't {m.group(1)} {item}{c.temp_text()}."
        # Not drinking alcohol is the drinking habit's "no" (the key "I quit drinking" gives).
        drinks = m.group(1) == "drink" and item.lower() in _ALCOHOL
        key = "habit:drink" if drinks else food_key(item)
        fact = Fact(content, "habit" if drinks else "diet", key, item, polarity=-1, confidence=0.8)
        if c.temp:
            fact.transient, fact.expires_at = True, ctx.ttl_expiry()
        return [fact]
    m = _NOT_EATING.match(s)
    if m and ok_object(m.group(1)):
        item = third_person(m.group(1))
        fact = transient_fact(f"User is avoiding {item}{c.temp_text()}.", food_key(item), item, ctx, "diet")
        fact.polarity = -1
        return [fact]
    m = _AVOID.match(s)
    if m and ok_object(m.group(1)):
        item = third_person(m.group(1))
        food = item.lower() in EN_FOODS
        key = food_key(item) if food else f"pref:{norm_key(item)}"
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
    if m and ok_object(m.group(1)):
        item = third_person(m.group(1))
        return [
            transient_fact(f"User is trying {item}{c.temp_text()}.", f"state:{norm_key(item)}", item, ctx)
        ]
    m = _ON_STATE.match(s)
    if m:
        item = third_person(m.group(1))
        tail = s[m.end(1) :].strip()
        said = f"{c.temp_text()}{c.when_text()}{' ' + tail if tail else ''}"
        fact = transient_fact(f"User is {item}{said}.", f"state:{norm_key(item)}", item, ctx)
        if c.when is not None:
            if c.when.period.end < ctx.today:
                return None
            fact.expires_at = ctx.period_expiry(c.when.period)
        return [fact]
    m = _STATE.match(s)
    if m:
        item = third_person(m.group(1))
        return [transient_fact(f"User is {item}{c.temp_text()}.", f"state:{norm_key(item)}", item, ctx)]
    m = _CHRONIC.match(s)
    if m:
        condition = m.group(1) or m.group(2)
        verb = "has" if m.group(1) else "is"
        content = f"User {verb} {condition}."
        return [Fact(content, "health", f"health:{norm_key(condition)}", condition, confidence=0.8)]
    m = _AILMENT.match(s)
    if m:
        item = m.group(1)
        return [transient_fact(f"User has {item}{c.temp_text()}.", f"state:{norm_key(item)}", item, ctx)]
    m = _BODY_HURTS.match(s)
    if m:
        content = f"User's {m.group(1)} {m.group(2).replace('is ', 'is ', 1)}{c.temp_text()}."
        return [transient_fact(content, f"state:{norm_key(m.group(1))}", m.group(1), ctx)]
    m = _BEEN.match(s)
    if (
        m
        and (c.temp or _learning(m.group(1)))
        and ok_object(m.group(1))
        and not m.group(1).startswith(("to ", "there", "here", "so ", "a bit", "busy"))
    ):
        item = third_person(m.group(1))
        return [transient_fact(f"User has been {item}{c.temp_text()}.", f"state:{norm_key(item)}", item, ctx)]
    return _ongoing(c, ctx)


def _ongoing(c: EnClause, ctx: RuleContext) -> list[Fact] | None:
    """``I'm learning piano these days`` / ``I started taking guitar lessons``: a transient state."""
    s = c.core
    m = _ONGOING.match(s)
    if (
        m
        and (c.temp or _learning(f"{m.group(1)} {m.group(2)}"))
        and ok_object(m.group(2))
        and not _NO_WHAT.match(m.group(2))
    ):
        if c.when is not None and c.when.period.kind == "day":
            return None
        item = third_person(f"{m.group(1)} {m.group(2)}")
        return [transient_fact(f"User is {item}{c.temp_text()}.", f"state:{norm_key(item)}", item, ctx)]
    m = _STARTED.match(s)
    if m and ok_object(m.group(2)) and (m.group(1) == "to learn" or _learning(f"{m.group(1)} {m.group(2)}")):
        verb = "learning" if m.group(1) == "to learn" else m.group(1)
        item = third_person(f"{verb} {m.group(2)}")
        content = f"User started {item}{c.temp_text()}."
        return [transient_fact(content, f"state:{norm_key(item)}", item, ctx)]
    return None


# ----------------------------------------------------------------- pets, family

_NUM = r"(a|an|one|two|three|four|five|\d+)"
# "took in my neighbor's old beagle": a pet that was someone's, now the user's.
_NUM_OR_WHOSE = r"(a pair of|a couple of|a|an|one|two|three|four|five|\d+|(?:my|our|a) [a-z-]+'s)"
_SPECIES = "|".join(sorted(EN_SPECIES, key=len, reverse=True))
_PLURAL_SPECIES = {
    (
        sp[:-1] + "ies"
        if sp.endswith("y") and sp[-2] not in "aeiou"
        else sp + ("es" if sp.endswith(("sh", "ch", "x")) else "s")
    ): sp
    for sp in EN_SPECIES
    if not sp.endswith("s") and sp != "fish"
}
_ANY_SPECIES = "|".join(sorted({*EN_SPECIES, *_PLURAL_SPECIES}, key=len, reverse=True))
_NAMES = rf"{_NAME_WORD}(?:(?:\s*,\s*|\s+and\s+|\s*&\s*|\s*,\s*and\s+){_NAME_WORD})*"
# "I adopted two rabbits, Pepper and Salt", "we got a puppy named Biscuit": pets got, with their names.
_PET_GOT = lazy_compile(
    r"^I(?:'ve| have)?\s*(?:just\s+|recently\s+|finally\s+|also\s+)?"
    rf"(adopted|rescued|got|bought|brought home|took in|have|'ve got)\s+{_NUM_OR_WHOSE}\s+"
    # "a terrier mix": a cross of a breed is of that species.
    rf"((?:[\w-]+\s+){{0,2}}?)((?:{_ANY_SPECIES})(?:\s+mix)?)(?:\s+for\s+(?:the|my|our)\s+(?:\w+'s\s+)?\w+)?"
    # "... from the shelter last year, Ginger and Pip": where and when before the names.
    r"(?:\s+(?:from|at) (?:the|a|an) [\w ]{1,20}?)?(?:\s+(?:last \w+|recently|this \w+|.{1,20} ago))?"
    rf"(?:\s*,\s*|\s+(?:named|called)\s+)({_NAMES})"
    r"(?:\s+(?:last \w+|recently|this \w+|.{1,20} ago|in [A-Z]\w+|in \d{4}|(?:when|after) [\w' ]{2,40}))?"
    # "..., Clover and Hazel, from a rescue in town": where they came from, after the names.
    r"(?:\s*,?\s+(?:from|at) (?:a|an|the|my|our) [\w ]{1,30})?"
    r"(?:\s*,?\s+and\s+(?:a|an|one|two|three)\s+[\w ]{1,30})?$"
)
# "I adopted two rabbits": adopting (not buying or getting: "got a fish") is a pet without names.
_PET_ADOPTED = lazy_compile(
    r"^I(?:'ve| have)?\s*(?:just\s+|recently\s+|finally\s+|also\s+)?(adopted|rescued|brought home|took in)"
    rf"\s+{_NUM}\s+((?:[\w-]+\s+){{0,2}}?)({_ANY_SPECIES})"
    r"(?:\s+(?:last \w+|recently|this \w+|.{1,12} ago))?$"
)
# "My brother Dev lives in Toronto", "my older sister, Ana, is a nurse": a named relative and who they are.
_FAMILY_NAMED = lazy_compile(
    rf"^[Mm]y (?:(?:little|younger|older|big|baby|twin|elder|kid|step|half)[\s-]+)?({EN_RELATIONS})\s*,?\s+"
    rf"({_NAME_WORD})\s*,?\s+((?:also |just |recently |still |now |currently )*"
    r"(?:lives|moved|works|is|'s|studies|teaches|runs|owns|got|has|started|plays|loves|likes|hates|goes"
    r"|opened|bought|joined|retired|graduated|married|became|left)\b.{2,80})$"
)
# "I have a brother, Dev, who lives in Toronto" / "I have a sister named Mia".
_FAMILY_HAVE_NAMED = lazy_compile(
    r"^I(?:'ve| have)(?: got)?\s+(?:a|an|one)\s+(?:(?:little|younger|older|big|baby|twin|elder)\s+)?"
    rf"({EN_RELATIONS})"
    rf"\s*,?\s+(?:named\s+|called\s+)?({_NAME_WORD})(?:\s*,?\s+(?:who|and (?:he|she))\s+(.{{2,80}}))?$"
)
_PET_HAVE = lazy_compile(
    rf"^I(?:'ve| have)(?: got)?\s+{_NUM}\s+((?:[\w-]+\s+){{0,2}}?)({_SPECIES})(?:\s+(?:named|"
    rf"called)\s+([A-Z][\w'-]*))?$",
    re.IGNORECASE,
)
_PET_NAMED = lazy_compile(rf"^[Mm]y ({_SPECIES})(?:'s name is| is named| is called)\s+([A-Z][\w'-]*)$")
# "our cat Pumpkin just turned twelve", "my dog Rex hates the rain": a pet named where it is mentioned.
_PET_APPOSITIVE = lazy_compile(rf"^(?:[Mm]y|[Oo]ur) ((?:{_SPECIES}))\s+([A-Z][\w'-]*)\b(?!')")
_PET_AGE = lazy_compile(
    r"^(?:[Mm]y (\w+)\s+)?([A-Z][\w'-]*)?\s*(?:is|just turned)\s+(\d+|one|two|"
    r"three|four|five|six|seven|eight|nine|ten)\s+(years?|months?)(?: old)?$"
)
_FAMILY_HAVE = lazy_compile(
    rf"^I(?:'ve| have)(?: got)?\s+{_NUM}\s+(?:(?:little|younger|older|big|baby|"
    rf"twin|grown|adult|teenage|wonderful|"
    rf"amazing|beautiful|lovely|great)\s+)?({EN_RELATIONS})$",
    re.IGNORECASE,
)
_FAMILY_ATTR = lazy_compile(
    rf"^[Mm]y ({EN_RELATIONS})\s+((?:also |really |absolutely |just )*(?:loves|likes|enjoys|adores|hates|"
    r"dislikes|doesn't like|doesn't eat|can't eat|can't stand|is allergic to|is into|"
    r"is a (?:big |huge )?fan of|is afraid of|is learning|plays|collects))\s+" + OBJ + "$",
    re.IGNORECASE,
)
# A group the user belongs to is not an employer: "a coach in my group", "works in a team".
_NOT_WORKPLACE = lazy_compile(
    r"^(?:my|our|their|the|a|an)\s+(?:own\s+)?(?:group|team|class|community|area|field|neighbou?rhood|family|"
    r"free time|spare time|life|way|home)$",
    re.IGNORECASE,
)
# Who a relative is, what they do, where they live or come from, what they got: "My grandpa grew
# up in Naples", "My nephew got a hamster", "My aunt teaches math".
_FAMILY_POSS = lazy_compile(
    r"^[Mm]y (?:(?:older|younger|little|big|baby|twin|elder|oldest|youngest|eldest)\s+)?"
    rf"({EN_RELATIONS})(?: (?:still|also|now|currently|just))?(?:'s| is| works| lives| lived| turned"
    # "are" only for where they are or what they are, not how they feel ("are so excited").
    r"| are(?= (?:still |both |also )*(?:in|from|living|retired|divorced|married|twins)\b)| live"
    r"| grew up| was born| moved| studies| teaches"
    r"| got| opened| started| retired| runs| owns|'s name is| is named"
    r"| has(?= (?:a|an) [\w -]{1,24} allergy$)"
    r"| has(?= (?:a|an|one|two|three|four|\d+) (?:kids?|children|child|boys?|girls?|sons?|daughters?)\b)"
    r"| was(?= (?:a|an) \w+(?: \w+)?$))\s*(.{2,60})$",
    re.IGNORECASE,
)


# "My aunt in Manila calls me every Sunday": whatever the rest says, a relative placed by name is
# a relative the user has there (the rest, a habit of theirs, is not the user's).
_FAMILY_PLACED = lazy_compile(
    r"^[Mm]y (?:(?:older|younger|little|big|baby|twin|elder|oldest|youngest|eldest)\s+)?"
    rf"({EN_RELATIONS}) (?:who lives |living |out |over |back |up |down )?in "
    r"(?P<place>[A-Z][a-z]+(?: [A-Z][a-z]+){0,2})(?=[ ,]|$)"
)


def _named_pets(m: re.Match[str], ctx: RuleContext) -> list[Fact] | None:
    verb, word = m.group(1), m.group(4).lower()
    species = _PLURAL_SPECIES.get(word, word)
    names = [n for n in re.split(r"\s*,\s*and\s+|\s*,\s*|\s+and\s+|\s*&\s*", m.group(5)) if n]
    if any(n.lower() in _NOT_NAMES for n in names):
        return None
    adj = m.group(3).strip()
    label = f"{adj} {species}".strip()
    verb = "has" if verb in ("have", "'ve got") or m.group(0).startswith(("I've got", "I have got")) else verb
    facts = []
    for name in names:
        ctx.pets[name] = species
        content = f"User {verb} {article(label)} {label} named {name}."
        facts.append(Fact(content, "relation", f"pet:{norm_key(name)}", species, confidence=0.85))
    return facts


def _named_relative(rel: str, name: str, rest: str) -> list[Fact] | None:
    if YOU.search(rest) or name.lower() in _NOT_NAMES:
        return None
    rest = third_person(rest.strip(" ,.;!"))
    content = f"User's {rel} {name} {rest}." if rest else f"User has {article(rel)} {rel} named {name}."
    return [Fact(content, "relation", f"family:{en_relation(rel)}:{norm_key(name)}", name, confidence=0.7)]


def pets_family(c: EnClause, ctx: RuleContext) -> list[Fact] | None:
    s = c.core
    m = _PET_GOT.match(s)
    if m:
        return _named_pets(m, ctx)
    m = _PET_ADOPTED.match(s)
    if m:
        word = m.group(4).lower()
        species = _PLURAL_SPECIES.get(word, word)
        ctx.pets.setdefault(species, species)
        label = f"{m.group(3).strip()} {word}".strip()
        content = f"User {m.group(1)} {m.group(2).lower()} {label}."
        return [Fact(content, "relation", f"pet:{norm_key(species)}", species, confidence=0.8)]
    m = _FAMILY_NAMED.match(s)
    if m:
        return _named_relative(m.group(1).lower(), m.group(2), m.group(3))
    m = _FAMILY_HAVE_NAMED.match(s)
    if m:
        rel, name, rest = m.group(1).lower(), m.group(2), m.group(3)
        return _named_relative(rel, name, rest or "")
    m = _PET_HAVE.match(s)
    if m:
        num, adj, species, name = m.group(1), m.group(2).strip(), m.group(3).lower(), m.group(4)
        label = f"{adj} {species}".strip()
        if name:
            ctx.pets[name] = species
            content = f"User has {num.lower()} {label} named {name}."
            return [Fact(content, "relation", f"pet:{norm_key(name)}", species, confidence=0.85)]
        ctx.pets.setdefault(species, species)
        key = f"pet:{norm_key(species.rstrip('s'))}"
        return [Fact(f"User has {num.lower()} {label}.", "relation", key, species)]
    m = _PET_APPOSITIVE.match(s)
    if m and m.group(2).lower() not in _NOT_NAMES and m.group(2) not in ("I", "And", "But", "Is"):
        species, name = m.group(1).lower(), m.group(2)
        ctx.pets[name] = species
        content = f"User has {article(species)} {species} named {name}."
        return [Fact(content, "relation", f"pet:{norm_key(name)}", species, confidence=0.8)]
    m = _PET_NAMED.match(s)
    if m:
        species, name = m.group(1).lower(), m.group(2)
        ctx.pets[name] = species
        return [
            Fact(
                f"User's {species} is named {name}.",
                "relation",
                f"pet:{norm_key(name)}",
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
                Fact(
                    content, "relation", f"pet:{norm_key(name)}:age", said, single_valued=True, confidence=0.8
                )
            ]
    m = _FAMILY_HAVE.match(s)
    if m:
        rel = m.group(2).lower()
        content = f"User has {m.group(1).lower()} {rel}."
        return [Fact(content, "relation", f"family:{en_relation(rel)}", rel, confidence=0.8)]
    m = _FAMILY_ATTR.match(s)
    if m:
        if YOU.search(m.group(3)) or not ok_object(m.group(3)):
            return None
        rel, verb, obj = m.group(1).lower(), m.group(2), third_person(m.group(3))
        key = f"family:{en_relation(rel)}:{norm_key(obj)}"
        return [Fact(f"User's {rel} {verb} {obj}.", "relation", key, obj, confidence=0.7)]
    m = _FAMILY_PLACED.match(s)
    if m and not _FAMILY_POSS.match(s):
        rel = m.group(1).lower()
        said = s[len("my ") : m.end(1)].lower()
        content = f"User has {article(said)} {said} in {m['place']}."
        return [Fact(content, "relation", f"family:{en_relation(rel)}", rel, confidence=0.7)]
    m = _FAMILY_POSS.match(s)
    # "My brother lives there", "My sister got it": what they point at was said before.
    if m and not YOU.search(m.group(2)) and not VAGUE.search(m.group(2)):
        rel = m.group(1).lower()
        said = s[len("my ") : m.end(1)]  # the relation as said, with "older" / "little"
        rest = third_person(s[m.end(1) :].strip())
        if rest.startswith("'s "):
            return None
        return [
            Fact(
                f"User's {said.lower()} {rest}.",
                "relation",
                f"family:{en_relation(rel)}",
                rel,
                confidence=0.7,
            )
        ]
    return None
