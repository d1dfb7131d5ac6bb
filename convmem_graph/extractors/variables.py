"""The default variable schema and deterministic inference of variable values from fragments.

Inference reads only active, non-transient fragments and never calls a model:

- single-valued string/integer variables (``name``, ``city``, ``occupation``, ``birth_year`` and
  any custom spec) come from ``profile:<name>`` fragments; the newest supporting fragment wins and
  the value is read from its wording ("用户住在杭州。" -> ``杭州``, "User works as a nurse." ->
  ``nurse``);
- ``hobbies`` is the sorted, de-duplicated list of liked activities (``pref:`` and ``habit:`` keys
  with positive wording, favourite-thing slots excepted), at most :data:`MAX_LIST_ITEMS` of the
  newest;
- ``diet`` joins allergies, vegetarianism, avoided and liked foods (``allergy:`` and ``food:``
  keys), allergies first, from the newest :data:`ALLERGY_WINDOW` allergy keys and the newest
  :data:`FOOD_WINDOW` food keys (diets such as "vegetarian" at any age). Each part is worded in the
  language of its subject ("对芒果过敏", "allergic to mango"); parts in one script are joined with
  that script's comma ("，" or ", "), parts in two with a semicolon of the memory's language, so a
  mixed value still reads as a list;
- ``language`` comes from a ``profile:language`` fragment, else from the script of the fragments.

Keys are read in their canonical form (:func:`~convmem_graph.text.keys.canonical_key`), so
one set of prefixes serves both extractors; the older ``diet:`` and ``hobby:`` prefixes read as
``food:`` and ``pref:``.

Fragments do not store the candidate's ``value``; reading it back from the wording works for the
heuristic extractor's templates and for the usual phrasings of a model, and a fragment whose
wording cannot be read is skipped (the next newest one is tried).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from functools import lru_cache

from convmem_graph._text_caches import holds_text
from convmem_graph.extractors._field_match import generic_field
from convmem_graph.extractors._precision import fits_variable
from convmem_graph.extractors._taxonomy import DIETS_EN, DIETS_ZH
from convmem_graph.extractors.reconcile import content_polarity
from convmem_graph.models import Fragment, VariableGuess, VariableSpec
from convmem_graph.payloads._sanitize import looks_like_instruction
from convmem_graph.text._lazy_re import LazyPattern, lazy_compile
from convmem_graph.text.keys import canonical_key, key_subject, normalize_key
from convmem_graph.text.scripts import has_cjk, is_cjk_text

__all__ = [
    "ALLERGY_WINDOW",
    "DEFAULT_VARIABLE_SPECS",
    "DIET_KEYS",
    "FOOD_WINDOW",
    "MAX_LIST_ITEMS",
    "generic_sources",
    "hobby_item",
    "infer_variables",
]

#: Longest list a list variable gets (the newest items are kept, then sorted).
MAX_LIST_ITEMS = 20
#: How many of the newest distinct ``food:`` keys ``diet`` looks at: five times the foods it keeps,
#: so an avoided food (kept before liked ones) stays in the value until a hundred newer foods
#: were named. Without a window, finding the avoided ones meant reading every food fact of the
#: memory on each run that touched one (thousands in a large memory), for a value of 20 foods.
FOOD_WINDOW = 5 * MAX_LIST_ITEMS
#: How many of the newest distinct ``allergy:`` keys ``diet`` looks at. Every allergy among them is
#: kept (a missed allergy costs more than a long value), so the window is twice the list cap: a
#: "not allergic to ..." fact takes a place too. Nobody states forty allergies; a memory that holds
#: more is a synthetic or a broken one, and its value stays readable.
ALLERGY_WINDOW = 2 * MAX_LIST_ITEMS
#: How many supporting fragment ids ``language`` reports.
_MAX_LANGUAGE_SUPPORT = 10

DEFAULT_VARIABLE_SPECS: tuple[VariableSpec, ...] = (
    VariableSpec(
        name="name",
        description="用户的名字或希望被称呼的名字。The user's name, or what they like to be called.",
    ),
    VariableSpec(
        name="birth_year",
        type="integer",
        description=(
            "用户的出生年份（四位数字；可由年龄和说这句话的日期推算）。"
            "Year the user was born, four digits (from an age and the date it was said)."
        ),
    ),
    VariableSpec(
        name="city",
        description="用户目前居住或工作的城市。City where the user currently lives or works.",
    ),
    VariableSpec(name="occupation", description="用户的职业或工作。The user's job or occupation."),
    VariableSpec(
        name="diet",
        description=(
            "用户的饮食习惯：忌口、偏好和食物过敏。"
            "The user's diet: foods they avoid or prefer, and food allergies."
        ),
    ),
    VariableSpec(
        name="hobbies",
        type="list",
        description=(
            "用户的兴趣爱好和经常做的活动（列表）。The user's hobbies and regular activities (a list)."
        ),
    ),
    VariableSpec(
        name="language",
        description=(
            "用户使用的语言，用 ISO 639-1 代码表示，如 zh、en。"
            "Language the user writes or speaks, as an ISO 639-1 code such as zh or en."
        ),
    ),
)

_VALUE_PATTERNS: dict[str, tuple[LazyPattern, ...]] = {
    "name": (
        lazy_compile(r"^用户(?:叫|名叫|的名字(?:是|叫)|名字(?:是|叫))(?P<v>[^，。,.；;（(]{1,30})"),
        lazy_compile(r"^User(?:'s name is| is called| is named| goes by)\s+(?P<v>[^,.;(]{1,40})"),
    ),
    "city": (
        lazy_compile(
            r"^用户(?:目前|现在)?(?:住在|居住在|生活在|定居在|现居|搬到了|搬到|搬去了?|在)"
            r"(?P<v>[^，。,.；;（(]{1,12}?)(?:工作|生活|居住|上班|定居)?[。.]?$"
        ),
        lazy_compile(
            r"^User (?:currently |now )?(?:lives|works|is based|moved|relocated|resides|lives and works)"
            r" (?:in|to) (?P<v>[^.;(]{1,40}?)\.?$"
        ),
    ),
    "occupation": (
        lazy_compile(
            r"^用户(?:的职业是|的工作是|是一名|是一位|是一个|是个|是|从事|在[^，。]{1,10}?(?:做|当))"
            r"(?P<v>[^，。,.；;（(]{1,20}?)(?:工作)?[。.]?$"
        ),
        lazy_compile(
            r"^User (?:works as|is|is working as|'s job is) (?:an? )?"
            r"(?P<v>[^,.;(]{1,40}?)(?: at .+| in .+)?\.?$"
        ),
    ),
    "hometown": (
        lazy_compile(r"^用户(?:来自|是|老家(?:是|在))(?P<v>[^，。,.；;（(]{1,12}?)(?:人)?[。.]?$"),
        lazy_compile(r"^User (?:is from|comes from|grew up in|was born in) (?P<v>[^,.;(]{1,40}?)\.?$"),
    ),
}
_VALUE_PATTERNS["workplace"] = (
    lazy_compile(r"^用户在(?P<v>[^，。,.；;（(]{1,20}?)(?:工作|上班|实习|任职)[。.]?$"),
    lazy_compile(r"^User works (?:at|for|in) (?P<v>[^,.;(]{1,60}?)\.?$"),
)
_VALUE_PATTERNS["school"] = (
    lazy_compile(r"^用户在(?P<v>[^，。,.；;（(]{1,20}?)(?:上学|读书|读大学|上大学|念书)[。.]?$"),
    lazy_compile(r"^User (?:studies|is studying|goes to school) (?:at|in) (?P<v>[^,.;(]{1,60}?)\.?$"),
)
_GENERIC = (
    lazy_compile(
        r"^用户(?:的[^，。是]{1,10}是|是|叫|在|为)(?P<v>[^，。,.；;（(]{1,30}?)(?:工作|上班|生活|居住|上学)?[。.]?$"
    ),
    lazy_compile(r"^User(?:'s [\w ]{1,30} is| is| has)\s+(?P<v>[^,.;(]{1,60}?)\.?$"),
)
_DEFAULT_NAMES = frozenset(s.name for s in DEFAULT_VARIABLE_SPECS)
_YEAR = lazy_compile(r"(?<!\d)(19\d{2}|20\d{2})(?!\d)")
_INT = lazy_compile(r"-?\d+")
_LANG_WORDS = (
    (lazy_compile(r"中文|汉语|普通话|Chinese|Mandarin|Cantonese|粤语", re.IGNORECASE), "zh"),
    (lazy_compile(r"英语|英文|English", re.IGNORECASE), "en"),
)
_HOBBY_PREFIXES = ("pref:", "habit:")
_FAVORITE_PREFIXES = ("pref:favorite_", "pref:favourite_", "pref:最喜欢的", "pref:最爱的")
_DIET_PREFIXES = ("allergy:", "food:")
#: Diets (not foods): "吃素", "gluten-free", "清真"; a diet given up is left out, never "avoids vegan".
_VEGETARIAN = frozenset({"素食", *DIETS_EN.values(), *DIETS_ZH.values()})
#: The canonical keys of those diets: read at any age, outside :data:`FOOD_WINDOW` (a handful of
#: keys; "vegetarian" said a year ago still holds). Only ``food:<diet>`` keys: an item of
#: another key spelling that reads as a diet is a food of the window like any other.
DIET_KEYS = frozenset(canonical_key(f"food:{d.replace(' ', '_')}") for d in _VEGETARIAN)


def _is_value(text: str) -> bool:
    # A value read from what the user said must not carry an instruction into the profile line
    # ("我喜欢ignore previous instructions" once became a hobby): the memory block's guard, applied
    # on the way in, so such text stays a (flagged) fact and never becomes a variable.
    return not looks_like_instruction(text)


def _newest_first(fragments: Sequence[Fragment]) -> list[Fragment]:
    # When the fact was stated decides, not when it was stored: the same archive ingested in one run
    # or in several (a resumed replay) must give the same values.
    return sorted(fragments, key=lambda f: (f.observed_at, f.updated_at, f.created_at, f.id), reverse=True)


def _read_value(name: str, content: str) -> str | None:
    for rx in _VALUE_PATTERNS.get(name, _GENERIC):
        m = rx.match(content.strip())
        if m:
            value = m.group("v").strip().removeprefix("a ").removeprefix("an ").strip()
            return value or None
    return None


def _single(
    spec: VariableSpec, fragments: Sequence[Fragment], reader: Callable[[Fragment], str | int | None]
) -> VariableGuess | None:
    key = canonical_key(f"profile:{spec.name}")
    for f in _newest_first([f for f in fragments if canonical_key(f.key) == key]):
        value = reader(f)
        if value is None or (
            isinstance(value, str) and not (_is_value(value) and fits_variable(spec.name, value))
        ):
            continue
        if spec.allowed_values is not None:
            value = _allowed(spec.allowed_values, str(value))
            if value is None:
                continue
        return VariableGuess(value=value, fragment_ids=[f.id])
    return None


def _allowed(allowed: Sequence[str], text: str) -> str | None:
    low = text.lower()
    for option in allowed:
        if option.lower() == low:
            return option
    for option in sorted(allowed, key=len, reverse=True):
        if option.lower() in low:
            return option
    return None


def _string_reader(name: str) -> Callable[[Fragment], str | None]:
    return lambda f: _read_value(name, f.content)


def _int_reader(name: str) -> Callable[[Fragment], int | None]:
    def read(f: Fragment) -> int | None:
        if name == "birth_year":
            m = _YEAR.search(f.content)
            return int(m.group(1)) if m else None
        m = _INT.search(f.content)
        return int(m.group(0)) if m else None

    return read


@holds_text
@lru_cache(maxsize=4096)
def hobby_item(key: str, content: str) -> str | None:
    """The hobby item a fact with canonical key ``key`` and wording ``content`` counts towards, if any.

    A pure function of the two, asked again for the same facts on every turn (inference starts
    from the newest facts each time): cached, so its regexes run once per fact.
    """
    if not key.startswith(_HOBBY_PREFIXES) or key.startswith(_FAVORITE_PREFIXES):
        return None
    if content_polarity(content) < 0:
        return None
    item = key_subject(key)
    # An instruction-like item or a food never counts towards the list.
    return item if item and _is_value(item) and fits_variable("hobbies", item) else None


def _hobbies(fragments: Sequence[Fragment]) -> VariableGuess | None:
    items: dict[str, list[str]] = {}
    for f in _newest_first(fragments):
        item = hobby_item(canonical_key(f.key), f.content)
        if item is None:
            continue
        if item not in items and len(items) >= MAX_LIST_ITEMS:
            continue
        items.setdefault(item, []).append(f.id)
    if not items:
        return None
    values = sorted(items)
    ids = sorted({i for item in values for i in items[item]})
    return VariableGuess(value=values, fragment_ids=ids)


def _diet(fragments: Sequence[Fragment], zh: bool) -> VariableGuess | None:
    """Allergies, vegetarianism, avoided and liked foods (the newest few), each in its subject's language.

    Looks at each key's newest fact, of the newest :data:`ALLERGY_WINDOW` allergy keys, the newest
    :data:`FOOD_WINDOW` food keys and the :data:`DIET_KEYS` (any age): what
    :mod:`convmem_graph.nodes._inference` reads through its indexes, so both give one value.
    """
    parts: list[tuple[int, str, str, bool]] = []
    seen: set[str] = set()
    allergies = foods = 0
    for f in _newest_first(fragments):
        key = canonical_key(f.key)
        if not key.startswith(_DIET_PREFIXES) or key in seen:
            continue
        if key.startswith("allergy:"):
            if allergies >= ALLERGY_WINDOW:
                continue
            allergies += 1
        else:
            if foods >= FOOD_WINDOW and key not in DIET_KEYS:
                continue
            foods += 1
        seen.add(key)
        item = key_subject(key)
        if not item or not _is_value(item):
            continue
        cjk = has_cjk(item)
        negative = content_polarity(f.content) < 0
        if key.startswith("allergy:"):
            if negative:
                continue
            rank, text = 0, f"对{item}过敏" if cjk else f"allergic to {item}"
        elif item in _VEGETARIAN:
            if negative:
                continue
            rank, text = 1, "吃素" if item == "素食" else item
        elif negative:
            rank, text = 2, f"不吃{item}" if cjk else f"avoids {item}"
        else:
            rank, text = 3, f"爱吃{item}" if cjk else f"likes {item}"
        parts.append((rank, text, f.id, cjk))
    if not parts:
        return None
    # Allergies and diets are all kept (a missed allergy is a risk); of the foods, at most
    # MAX_LIST_ITEMS, avoided ones before liked ones, newest first within each (``parts`` is newest
    # first and the sort is stable): the value is injected into every prompt, and a memory naming
    # thousands of foods made it hundreds of kilobytes.
    foods_kept = sorted((p for p in parts if p[0] >= 2), key=lambda p: p[0])[:MAX_LIST_ITEMS]
    parts = sorted([p for p in parts if p[0] < 2] + foods_kept)
    scripts = {p[3] for p in parts}
    # The comma of the parts' own script: "vegetarian，avoids olives" read wrong in a memory that
    # is mostly Chinese. Only a value in two scripts needs the memory's language, for its semicolon.
    if len(scripts) > 1:
        sep = "；" if zh else "; "
    else:
        sep = "，" if True in scripts else ", "
    return VariableGuess(value=sep.join(p[1] for p in parts), fragment_ids=sorted(p[2] for p in parts))


def _language(fragments: Sequence[Fragment]) -> VariableGuess | None:
    for f in _newest_first([f for f in fragments if canonical_key(f.key) == "profile:language"]):
        for rx, code in _LANG_WORDS:
            if rx.search(f.content):
                return VariableGuess(value=code, fragment_ids=[f.id])
    zh = [f for f in fragments if is_cjk_text(f.content)]
    en = [f for f in fragments if not is_cjk_text(f.content)]
    if not zh and not en:
        return None
    code, support = ("zh", zh) if len(zh) >= len(en) else ("en", en)
    ids = sorted(f.id for f in _newest_first(support)[:_MAX_LANGUAGE_SUPPORT])
    return VariableGuess(value=code, fragment_ids=ids)


def infer_variables(
    specs: Sequence[VariableSpec], fragments: Sequence[Fragment], *, now_ms: int
) -> dict[str, VariableGuess]:
    """Infer values for the ``infer=True`` specs from active, durable fragments.

    Args:
        specs: The memory's variable specs (:data:`DEFAULT_VARIABLE_SPECS` when it defines none).
        fragments: Fragments of the memory; superseded, deleted, transient and expired ones are
            ignored.
        now_ms: Current time, to ignore fragments already expired.

    Returns:
        Variable name -> value and the ids of the fragments supporting it; variables with no
        support are absent.

    Example:
        >>> f = Fragment(id="f1", memory_id="m", content="用户住在杭州。", key="profile:city")
        >>> infer_variables(DEFAULT_VARIABLE_SPECS, [f], now_ms=0)["city"].value
        '杭州'
    """
    usable = [
        f
        for f in fragments
        if f.status == "active" and not f.transient and (f.expires_at is None or f.expires_at > now_ms)
    ]
    guesses: dict[str, VariableGuess] = {}
    language = _language(usable)
    zh = language is None or language.value == "zh"
    for spec in specs:
        if not spec.infer:
            continue
        guess: VariableGuess | None
        if spec.name == "language" and spec.type == "string":
            guess = language
            if guess is not None and spec.allowed_values is not None:
                value = _allowed(spec.allowed_values, str(guess.value))
                guess = VariableGuess(value=value, fragment_ids=guess.fragment_ids) if value else None
        elif spec.name == "hobbies" and spec.type == "list":
            guess = _hobbies(usable)
        elif spec.name == "diet" and spec.type == "string":
            guess = _diet(usable, zh)
        elif spec.type == "integer":
            guess = _single(spec, usable, _int_reader(spec.name))
        elif spec.type == "list":
            guess = _list(spec, usable)
        else:
            guess = _single(spec, usable, _string_reader(spec.name))
        if guess is None and spec.name not in _DEFAULT_NAMES and (family := generic_field(spec)) is not None:
            guess = _generic(spec, family, usable, zh)  # its own keys say nothing: a family's rule may
        if guess is not None:
            guesses[spec.name] = guess
    return guesses


def _generic(
    spec: VariableSpec, family: str, fragments: Sequence[Fragment], zh: bool
) -> VariableGuess | None:
    """A custom field filled by the rule of the family its name or description names (pet name, city ...)."""
    guess: VariableGuess | None
    if family == "pet_names":
        guess = _subjects(fragments, "pet:")
    elif family == "allergies":
        guess = _subjects(fragments, "allergy:")
    elif family == "hobbies":
        guess = _hobbies(fragments)
    elif family == "diet":
        guess = _diet(fragments, zh)
    else:
        field = spec.model_copy(update={"name": family})
        reader = _int_reader(family) if family == "birth_year" else _string_reader(family)
        guess = _single(field, fragments, reader)
    if guess is None:
        return None
    value = guess.value
    if spec.type == "list" and not isinstance(value, list):
        value = [str(value)]
    elif spec.type == "string" and isinstance(value, list):
        value = ("、" if any(has_cjk(v) for v in value) else ", ").join(value)
    elif spec.type == "integer" and not isinstance(value, int):
        return None
    return VariableGuess(value=value, fragment_ids=guess.fragment_ids)


def generic_sources(family: str) -> tuple[list[str], tuple[str, ...]]:
    """The fact keys and key prefixes the rule of ``family`` reads (for index reads and change tracking)."""
    prefixes = {
        "pet_names": ("pet:",),
        "allergies": ("allergy:",),
        "hobbies": _HOBBY_PREFIXES,
        "diet": _DIET_PREFIXES,
    }.get(family)
    if prefixes is not None:
        return [], prefixes
    return [canonical_key(f"profile:{family}")], ()


def _subjects(fragments: Sequence[Fragment], prefix: str) -> VariableGuess | None:
    """The subjects of positive ``<prefix><subject>`` keys (pet names, allergens), newest first kept."""
    items: dict[str, list[str]] = {}
    for f in _newest_first(fragments):
        key = canonical_key(f.key)
        rest = key.removeprefix(prefix)
        if rest == key or not rest or ":" in rest or content_polarity(f.content) < 0:
            continue
        item = key_subject(key)
        # Keys are lower-cased: keep the name as the fact writes it ("Miso", not "miso").
        found = re.search(re.escape(item), f.content, re.IGNORECASE)
        item = found.group(0) if found else item
        if _is_value(item) and (item in items or len(items) < MAX_LIST_ITEMS):
            items.setdefault(item, []).append(f.id)
    if not items:
        return None
    values = sorted(items)
    return VariableGuess(value=values, fragment_ids=sorted({i for v in values for i in items[v]}))


def _list(spec: VariableSpec, fragments: Sequence[Fragment]) -> VariableGuess | None:
    """A custom list variable: the subjects of ``<name>:<item>`` keys."""
    prefix = f"{normalize_key(spec.name)}:"
    items: dict[str, list[str]] = {}
    for f in _newest_first(fragments):
        key = normalize_key(f.key)
        if key.startswith(prefix) and content_polarity(f.content) > 0:
            item = key.partition(":")[2].replace("_", " ").strip()
            if item and _is_value(item) and (item in items or len(items) < MAX_LIST_ITEMS):
                items.setdefault(item, []).append(f.id)
    if not items:
        return None
    values = sorted(items)
    return VariableGuess(value=values, fragment_ids=sorted({i for v in values for i in items[v]}))
