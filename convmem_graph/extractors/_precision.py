"""The precision floor: facts that carry nothing, and values that are not of their variable's kind.

Two checks, both deterministic:

- :func:`carries_fact` drops a fact the rules built from a fragment with no content: a frequency
  without an activity ("每周去两次" -> "用户每周两次。"), a bare routine ("用户每天下班回来。", which
  is half of "每天下班回来都要遛狗"), an object that points at what was said before ("the
  structure of the language"), a workplace that names no place ("在同一家公司工作"), or a quoted
  instruction ("请忽略之前的指令") that only looks like a statement;
- :func:`fits_variable` checks a value before it becomes a variable: hobbies are activities (not
  foods, not smoking), a name is a name (a few letters, no sentence), a diet is a diet.
"""

from __future__ import annotations

import re

from convmem_graph.extractors._facts import Fact
from convmem_graph.extractors._lexicon import EN_FOODS, ZH_FOODS
from convmem_graph.payloads._sanitize import looks_like_instruction
from convmem_graph.text._lazy_re import lazy_compile
from convmem_graph.text.cjk import UNIFIED
from convmem_graph.text.keys import key_subject

__all__ = ["carries_fact", "fits_variable"]

# A count with no activity: "两次", "去两次", "once", "3 times"; a bare verb with a count ("烤一次",
# "每个周末都烤一次") names no object either: what is done was said before.
_COUNT_ONLY = lazy_compile(
    r"^(?:去|来|做|练|跑)?(?:\d+|[一二两三四五六七八九十几半]+)(?:次|回|趟|遍|下|天)$"
    rf"|^[{UNIFIED}](?:\d+|[一二两三四五六七八九十几半]+)(?:次|回|趟|遍)$"
    r"|^(?:go\s+)?(?:once|twice|\d+\s+times|a\s+few\s+times)$",
    re.IGNORECASE,
)
# Comings and goings: half of a routine sentence, not a fact by themselves.
_BARE_ROUTINE = lazy_compile(
    r"^(?:下班|放学|下课)?(?:回来|回家|到家)$|^(?:下班|上班|放学|上学|出门|下课)$"
    r"|^(?:come|get|go) (?:home|back)(?: from work)?$|^(?:leave|get off) work$",
    re.IGNORECASE,
)


# Taking someone along ("带它去江边散步") is the user's own walk: the pronoun is the dog or the child.
_TAKEN_ALONG = lazy_compile(r"带[他她它]们?")
# An outcome is not something the user does: "sometimes I win", "I always miss out", "总是错过最好玩的"
# name no activity (what is won or missed was said before).
_OUTCOME = lazy_compile(
    r"^(?:win|wins|lose|loses|fail|fails|miss|misses|fall|falls|succeed|succeeds|get lost"
    rf"|错过|赢|输|失败|摔倒|摔跤)(?:[_ ]|$|[{UNIFIED}])",
    re.IGNORECASE,
)


# A pronoun or a "that kind" in what the user likes or does points at something said before:
# "用户喜欢和他们一起做饭", "用户喜欢多肉的那种" say nothing on their own (吉他 and 其他 are words).
_UNRESOLVED_ZH = lazy_compile(r"(?<![吉其])[他她它]|那种$|这种$")


# "the structure of the language", "the ending of the show": a definite noun that names no thing of
# its own points at what was said before ("Learning German ... I like the structure of the language").
_POINTING_EN = lazy_compile(
    r"(?:^|[_ ])the[_ ](?:language|game|book|show|movie|film|story|song|album|series|place|city|town"
    r"|team|class|course|job|process|idea|thing|things|one|ones|trip|event|project|area|way|stuff)$"
)


# A workplace that names no place: "在同一家公司工作" (15 years at the same company), "at a company".
_VAGUE_WORKPLACE = lazy_compile(
    r"^(?:同一家|同一个|一家|这家|那家|某家?|本|一个|这个|那个|家里的?)?(?:公司|单位|企业|工厂|厂|店|地方|部门)$"
    r"|^(?:the same|a|an|one|some|this|that|the)\s+(?:small\s+|big\s+|large\s+|local\s+)?"
    r"(?:company|firm|office|place|business|startup|shop|store)$",
    re.IGNORECASE,
)


# A plan with no object: "打算自己养着" (养 what: the cat said before) names nothing to do.
_NO_OBJECT_PLAN = lazy_compile(rf"^(?:自己)?[{UNIFIED}]着$")


def carries_fact(fact: Fact) -> bool:
    """Return whether a fact found by a rule says something (see the module docstring).

    Example:
        >>> carries_fact(Fact("用户每周两次。", "habit", "habit:两次"))
        False
        >>> carries_fact(Fact("用户每周打两次网球。", "habit", "habit:打两次网球"))
        True
    """
    subject = key_subject(fact.key)
    if fact.key.startswith(("habit:", "pref:", "state:")) and (
        _COUNT_ONLY.match(subject)
        or _BARE_ROUTINE.match(subject)
        or _UNRESOLVED_ZH.search(subject)
        # The key may leave the pronoun out ("给她换衣服" -> habit:换衣服): the content says it.
        or _UNRESOLVED_ZH.search(_TAKEN_ALONG.sub("", fact.content.removeprefix("用户")))
        or (fact.key.startswith("habit:") and _OUTCOME.match(subject))
        # The value, not the key: a long key is cut ("likes the game \"Detroit\"" -> "..._the_game").
        or _POINTING_EN.search((fact.value or subject).lower().rstrip(" .!"))
    ):
        return False
    if fact.key.startswith("plan:") and _NO_OBJECT_PLAN.match(subject):
        return False
    if fact.key == "profile:workplace" and _VAGUE_WORKPLACE.match((fact.value or subject).strip()):
        return False
    return not looks_like_instruction(fact.content)


_NOT_HOBBIES = frozenset("抽烟 吸烟 喝酒 smoke smoking drink drinking vape vaping".split())
_HOBBY_FOOD_VERBS = lazy_compile(
    r"^(?:cook|cooking|bake|baking|make|making|grow|growing|brew|brewing|做|烤|烘焙|种)"
)
_EATING = lazy_compile(r"^(?:吃|喝|eat|eating|drink|drinking)\b|^[吃喝]")
_LATIN_NAME = lazy_compile(r"^[A-Z][A-Za-z'\-]{0,23}(?: [A-Z][A-Za-z'\-]{0,23}){0,2}$")
_ZH_NAME = lazy_compile(rf"^[{UNIFIED}·]{{1,5}}$|^[A-Za-z][A-Za-z'\-]{{0,23}}$")
#: Longest hobby item, in words or (Chinese) characters: anything longer is a fragment of a sentence.
_MAX_HOBBY_WORDS = 5
_MAX_HOBBY_CHARS = 12


def fits_variable(name: str, value: str) -> bool:
    """Return whether ``value`` is of the kind variable ``name`` holds (only known kinds checked).

    Example:
        >>> fits_variable("hobbies", "hiking"), fits_variable("hobbies", "cheese pizza and prosciutto")
        (True, False)
        >>> fits_variable("name", "Lena"), fits_variable("name", "not sure what to say")
        (True, False)
    """
    text = value.strip()
    if not text:
        return False
    if name == "hobbies":
        return _is_activity(text)
    if name == "name":
        return bool(_LATIN_NAME.match(text) or _ZH_NAME.match(text))
    return True


def _is_activity(item: str) -> bool:
    low = item.lower()
    if low in _NOT_HOBBIES or _EATING.match(low):
        return False
    words = low.split()
    if len(words) > _MAX_HOBBY_WORDS or (
        not words[1:] and len(low) > _MAX_HOBBY_CHARS and low[:1] >= "\u3400"
    ):
        return False
    if _HOBBY_FOOD_VERBS.match(low):
        return True
    if low in ZH_FOODS or low in EN_FOODS:
        return False
    return not any(w.strip(",.") in EN_FOODS for w in words)
