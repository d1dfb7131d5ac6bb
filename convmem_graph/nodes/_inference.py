"""Variable inference that reads only the facts each variable depends on, and only when they changed.

Gives the same values as :func:`convmem_graph.extractors.variables.infer_variables` over every
active fact (a property test checks it), with the rules of that module applied to index reads:

- a single-valued variable reads the facts with key ``profile:<name>``;
- ``hobbies`` walks the durable facts of its key families (``pref:``, ``habit:``) newest first,
  keyset-paged through the index of every key family (``ix_cm_fragments_family``), both
  families' ranges in one statement per page, and stops once it has its items (then reads the
  older facts of those items for their ids): the facts of other families, however many, are
  never read;
- ``diet`` walks the ``allergy:`` and the ``food:`` facts newest first, each family a range of
  that index, keyset-paged, and stops after the newest ``ALLERGY_WINDOW`` and ``FOOD_WINDOW``
  keys (all its rule looks at), then reads the diets it has not met (``DIET_KEYS``) by key;
- a custom list (``like``, ``books``) walks its key family newest first through the index of every
  family (``ix_cm_fragments_family``) until it has ``MAX_LIST_ITEMS`` items, then reads the older
  facts of those items by key, as ``hobbies`` does;
- ``language`` reads the counts of Chinese and other facts the database keeps (triggers; see
  :mod:`convmem_graph.store._lang_counts`), less those expired since the memory's expiry mark (a
  bounded read; past the bound the mark moves), and the newest few of the majority's language by
  index.

A memory with few usable durable facts (at most ``_FEW``, as most are) has all of them read in one
statement, and every rule above filters that list instead of asking the database again.

With the set of canonical keys a run touched, only the variables depending on them are re-inferred
(``language`` on any change, ``diet`` also when the language changed).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Collection, Iterable, Iterator, Sequence
from typing import Any

from sqlalchemy import bindparam

from convmem_graph.extractors._field_match import generic_field
from convmem_graph.extractors.reconcile import content_polarity

# The rules themselves stay in one place (extractors/variables.py); this module only chooses what
# they read, so it uses that module's helpers and constants.
from convmem_graph.extractors.variables import (
    _DEFAULT_NAMES,
    _DIET_PREFIXES,
    _HOBBY_PREFIXES,
    _LANG_WORDS,
    _MAX_LANGUAGE_SUPPORT,
    ALLERGY_WINDOW,
    DIET_KEYS,
    FOOD_WINDOW,
    MAX_LIST_ITEMS,
    _allowed,
    _diet,
    _generic,
    _hobbies,
    _int_reader,
    _is_value,
    _list,
    _newest_first,
    _single,
    _string_reader,
    generic_sources,
    hobby_item,
)
from convmem_graph.models import Fragment, VariableGuess, VariableSpec
from convmem_graph.store import MemoryStore
from convmem_graph.store._driver import select_rows
from convmem_graph.store._fact_queries import (
    ACTIVE_BY_CKEY,
    NEWEST_DURABLE,
    NEWEST_DURABLE_IDS,
    NEWEST_OF_LANGUAGE,
    newest_hobby_rows,
    newest_key_family_rows,
    prefix_rows,
    usable,
)
from convmem_graph.store._fragments import fragments_once, row_to_fragment
from convmem_graph.store._lang_counts import (
    EXPIRY_BACKLOG,
    bounded_language_counts,
    language_counts,
    move_expiry_mark,
)
from convmem_graph.text.keys import canonical_key, normalize_key
from convmem_graph.text.scripts import is_cjk_text

__all__ = ["affected_specs", "infer_from_store"]


def _kind(spec: VariableSpec) -> str:
    if spec.name == "language" and spec.type == "string":
        return "language"
    if spec.name == "hobbies" and spec.type == "list":
        return "hobbies"
    if spec.name == "diet" and spec.type == "string":
        return "diet"
    if spec.type == "list":
        return "list"
    return "single"


def _list_prefix(spec: VariableSpec) -> str:
    # Canonical keys map legacy prefixes (diet: -> food:), so read the canonical prefix's range: a
    # superset of the keys the rule accepts, which it filters itself.
    return canonical_key(f"{spec.name}:x").partition(":")[0] + ":"


def _profile_key(spec: VariableSpec) -> str:
    return canonical_key(f"profile:{spec.name}")


def affected_specs(specs: Sequence[VariableSpec], touched: Collection[str] | None) -> list[VariableSpec]:
    """The ``infer=True`` specs whose value may change when facts with ``touched`` keys changed.

    ``None`` means unknown: every inferable spec. ``diet`` also depends on the language; the
    caller re-infers it when the language changed.

    Example:
        >>> from convmem_graph.extractors.variables import DEFAULT_VARIABLE_SPECS
        >>> [s.name for s in affected_specs(DEFAULT_VARIABLE_SPECS, ["profile:city"])]
        ['city', 'language']
    """
    inferable = [s for s in specs if s.infer]
    if touched is None:
        return inferable
    keys = set(touched)
    # Without a language spec nothing reports a language change, so diet follows every change.
    has_language = any(_kind(s) == "language" for s in inferable)
    out = []
    for spec in inferable:
        kind = _kind(spec)
        if kind == "language":
            hit = bool(keys)
        elif kind == "hobbies":
            hit = any(k.startswith(_HOBBY_PREFIXES) for k in keys)
        elif kind == "diet":
            hit = any(k.startswith(_DIET_PREFIXES) for k in keys) or (bool(keys) and not has_language)
        elif kind == "list":
            hit = any(k.startswith(_list_prefix(spec)) for k in keys)
        else:
            hit = _profile_key(spec) in keys
        family = generic_field(spec) if spec.name not in _DEFAULT_NAMES else None
        if family is not None and not hit:  # a custom field a family's rule fills (pet name, city ...)
            wanted, prefixes = generic_sources(family)
            hit = bool(keys & set(wanted)) or any(k.startswith(prefixes) for k in keys) or family == "diet"
        if hit:
            out.append(spec)
    return out


#: Usable durable facts a memory may hold and still have them all read at once (one statement
#: instead of one per rule).
_FEW = 32
#: The newest usable durable facts, ``limit`` of them (the page :class:`_Facts` reads first).
_NEWEST_PAGE = NEWEST_DURABLE.limit(bindparam("limit"))
#: Memories whose last :class:`_Facts` held more than ``_FEW`` facts (a hint, by memory id: the next
#: one asks for the ids first). Bounded; a wrong hint costs one statement, never a wrong answer.
_LARGE: OrderedDict[str, None] = OrderedDict()
_LARGE_MEMORIES = 4096
_large_lock = threading.Lock()


class _Facts:
    """The usable durable facts inference reads at ``now_ms``: the newest ``_FEW + 1`` read once.

    When that read finds at most ``_FEW``, it holds every such fact and each question is answered
    from it; otherwise each question is an index read of its own (keys, prefixes, the trigger-kept
    language counts, the hobby families' keyset walk). These reads are shaped for this node
    alone, so they live here rather than in the store's interface.
    """

    def __init__(self, store: MemoryStore, memory_id: str, now_ms: int) -> None:
        self.store, self.memory_id, self.now_ms = store, memory_id, now_ms
        params = {"mid": memory_id, "now": now_ms, "limit": _FEW + 1}
        with _large_lock:
            large = memory_id in _LARGE
        with store.read_facts() as conn:
            # A memory that held more than _FEW last time mostly still does: its ids say so at a
            # quarter of the cost of the decoded rows (which would then be thrown away).
            if large and len(select_rows(conn, NEWEST_DURABLE_IDS, params)) > _FEW:
                rows: list[Any] = []
                self.complete = False
            else:
                rows = select_rows(conn, _NEWEST_PAGE, params)
                self.complete = len(rows) <= _FEW
        with _large_lock:
            if self.complete:
                _LARGE.pop(memory_id, None)
            else:
                _LARGE[memory_id] = None
                _LARGE.move_to_end(memory_id)
                while len(_LARGE) > _LARGE_MEMORIES:
                    _LARGE.popitem(last=False)
        # A fact row costs ~3x more to make a Fragment of than to read: a page that only says "more
        # than _FEW" (every later question goes to the index reads then) is never made into any.
        self.page = [row_to_fragment(r) for r in rows] if self.complete else []

    def with_keys(
        self, keys: Collection[str] = (), prefixes: Collection[str] = (), *, besides: Collection[str] = ()
    ) -> list[Fragment]:
        """Those whose canonical key is one of ``keys`` or starts with one of ``prefixes``.

        ``besides``: ids the caller holds already, left out (their rows are not made into
        Fragments again).
        """
        if not self.complete:
            # Index reads: the keys' rows, then each prefix's range (``usable`` filters in Python).
            with self.store.read_facts() as conn:
                rows = []
                if keys:
                    by_key = select_rows(conn, ACTIVE_BY_CKEY, {"mid": self.memory_id, "ckeys": sorted(keys)})
                    rows = [r for r in by_key if usable(r, self.now_ms)]
                rows += prefix_rows(conn, self.memory_id, prefixes, now_ms=self.now_ms)
                return fragments_once(r for r in rows if r.id not in besides)
        wanted, starts = set(keys), tuple(prefixes)
        return [
            f
            for f in self.page
            if ((key := canonical_key(f.key)) in wanted or key.startswith(starts)) and f.id not in besides
        ]

    def language_counts(self) -> tuple[int, int]:
        """How many are mainly Chinese, and how many are not."""
        if not self.complete:
            # Trigger-kept counts less the facts expired since the memory's expiry mark: two short
            # index reads, not a count of every (expired) fact.
            with self.store.read() as conn:
                counts = bounded_language_counts(conn, self.memory_id, now_ms=self.now_ms, cap=EXPIRY_BACKLOG)
            if counts is not None:
                return counts
            # Many facts expired since the mark: move it to now (counting them once), so this and
            # later turns read only what expires after.
            with self.store.transaction(self.memory_id) as conn:
                move_expiry_mark(conn, self.memory_id, now_ms=self.now_ms)
                return language_counts(conn, self.memory_id, now_ms=self.now_ms)
        zh = sum(1 for f in self.page if is_cjk_text(f.content))
        return zh, len(self.page) - zh

    def newest_ids_in(self, cjk: bool, limit: int) -> list[str]:
        """The ids of the newest ``limit`` of them that are mainly Chinese (``cjk``) or not.

        One range of ``ix_cm_fragments_lang`` when the page is not the whole set: the walk used
        to page every durable fact with OFFSET until enough of that language turned up.
        """
        if self.complete:
            return [f.id for f in self.page if is_cjk_text(f.content) == cjk][:limit]
        params = {"mid": self.memory_id, "now": self.now_ms, "cjk": cjk, "limit": limit}
        with self.store.read_facts() as conn:
            return [str(row.id) for row in select_rows(conn, NEWEST_OF_LANGUAGE, params)]

    def newest_hobby_family(self) -> Iterator[tuple[Fragment, str]]:
        """Those of the hobby key families with their canonical keys, newest stated first.

        The usable durable facts newest first, filtered by key family, but read from the families'
        ranges of ``ix_cm_fragments_family`` (one statement per page), keyset-paged: the walk
        costs what it reads, not what the memory holds.
        """
        if self.complete:
            for f in self.page:
                key = canonical_key(f.key)
                if key.startswith(_HOBBY_PREFIXES):
                    yield f, key
            return
        # Each page is one short read: nothing is held while the walk looks at it.
        for row in newest_hobby_rows(self.store.read_facts, self.memory_id, now_ms=self.now_ms):
            # ckey is canonical_key(key), written with the row (filled on open for older rows).
            yield row_to_fragment(row), str(row.ckey)

    def newest_key_family(self, family: str) -> Iterator[tuple[Fragment, str]]:
        """Those whose canonical key is in ``family`` (``like:``), with their keys, newest stated first.

        From ``ix_cm_fragments_family``, keyset-paged: the walk costs what it reads.
        """
        if self.complete:
            for f in self.page:
                key = canonical_key(f.key)
                if key.startswith(family):
                    yield f, key
            return
        for row in newest_key_family_rows(self.store.read_facts, self.memory_id, family, now_ms=self.now_ms):
            yield row_to_fragment(row), str(row.ckey)

    def diet_facts(self) -> list[Fragment]:
        """What ``_diet`` looks at: each family's newest keys (its window) and the diets of any age.

        Gives ``_diet`` the value it would give over every diet fact (it applies the same windows);
        reads at most about ``ALLERGY_WINDOW + FOOD_WINDOW`` rows plus the diets' own, however many
        foods the memory names (a re-read of every food fact cost +4.4 s of an 11.6 s replay into a
        100k-message memory).
        """
        if self.complete:
            return self.with_keys(prefixes=_DIET_PREFIXES)
        rows = []
        met: set[str] = set()
        for family, window in (("allergy:", ALLERGY_WINDOW), ("food:", FOOD_WINDOW)):
            keys: set[str] = set()
            # The first page is the window and one row (most keys have one active fact): the walk
            # stops at the first row of a key past the window, which the rule never looks at, and
            # that row is then on the page already read (a page of ``window`` rows would make the
            # walk read a second, larger page for it).
            for row in newest_key_family_rows(
                self.store.read_facts, self.memory_id, family, now_ms=self.now_ms, batch=window + 1
            ):
                if row.ckey not in keys:
                    if len(keys) >= window:
                        break
                    keys.add(str(row.ckey))
                rows.append(row)
            met |= keys
        older = sorted(DIET_KEYS - met)
        if older:
            with self.store.read_facts() as conn:
                by_key = conn.execute(ACTIVE_BY_CKEY, {"mid": self.memory_id, "ckeys": older})
                rows += [r for r in by_key if usable(r, self.now_ms)]
        return fragments_once(rows)


def _language(facts: _Facts) -> VariableGuess | None:
    for f in _newest_first(facts.with_keys(keys=["profile:language"])):
        for rx, code in _LANG_WORDS:
            if rx.search(f.content):
                return VariableGuess(value=code, fragment_ids=[f.id])
    zh, other = facts.language_counts()
    if not zh and not other:
        return None
    code, want = ("zh", True) if zh >= other else ("en", False)
    return VariableGuess(value=code, fragment_ids=sorted(facts.newest_ids_in(want, _MAX_LANGUAGE_SUPPORT)))


def _hobby_item(f: Fragment, key: str | None = None) -> str | None:
    """The hobby item ``f`` counts towards, if any (``key``: its canonical key, when known)."""
    return hobby_item(canonical_key(f.key) if key is None else key, f.content)


def _hobby_facts(facts: _Facts) -> list[Fragment]:
    """The facts ``_hobbies`` would look at: the newest until its items are full, and their older facts.

    Only facts of the hobby key families: ``_hobbies`` skips every other fact, so leaving them
    out changes nothing it returns, and a memory of many ``like:`` or ``plan:`` facts (which
    never fill the items) no longer makes the walk read all of them.
    """
    seen: list[Fragment] = []
    items: set[str] = set()
    cutoff: int | None = None
    for f, key in facts.newest_hobby_family():
        if cutoff is not None and f.observed_at < cutoff:
            break  # facts stated at the same time as the last item are ordered by more than time
        seen.append(f)
        item = _hobby_item(f, key)
        if item is not None:
            # Items of facts tied in time with the last one count too: ``_hobbies`` may order a
            # tie otherwise (Python's ``id`` order, not the database's collation, or the merge of
            # the two families), and then needs that item's older facts.
            items.add(item)
            if cutoff is None and len(items) >= MAX_LIST_ITEMS:
                cutoff = f.observed_at
    if cutoff is None:
        return seen  # the walk read every durable fact
    keys = [f"{p}{item.replace(' ', '_')}" for p in _HOBBY_PREFIXES for item in items]
    # The items' facts the walk already holds (most of them) are not made into Fragments twice.
    return seen + facts.with_keys(keys=keys, besides={f.id for f in seen})


def _list_item(prefix: str, f: Fragment) -> str | None:
    """The item of a custom list ``f`` counts towards (``_list``'s rule; ``prefix``: ``<name>:``)."""
    key = normalize_key(f.key)
    if not key.startswith(prefix) or content_polarity(f.content) <= 0:
        return None
    item = key.partition(":")[2].replace("_", " ").strip()
    return item if item and _is_value(item) else None


def _list_facts(spec: VariableSpec, facts: _Facts) -> list[Fragment]:
    """The facts ``_list`` looks at for ``spec``: the newest until its items are full, and their older ones.

    ``_list`` keeps the first ``MAX_LIST_ITEMS`` items newest first, with every fact of each: the
    walk stops there (past the facts stated at the same time as the last item, which the rule
    orders by more than time), then reads the items' other facts by canonical key (a fact's
    item is its normalized key's subject, so one item's facts share one canonical key). Before,
    every fact of the family was read and made into a Fragment per turn.
    """
    family = _list_prefix(spec)
    if facts.complete:
        return facts.with_keys(prefixes=[family])
    prefix = f"{normalize_key(spec.name)}:"
    seen: list[Fragment] = []
    items: set[str] = set()
    item_keys: set[str] = set()
    cutoff: int | None = None
    for f, key in facts.newest_key_family(family):
        if cutoff is not None and f.observed_at < cutoff:
            break
        seen.append(f)
        item = _list_item(prefix, f)
        if item is None:
            continue
        # Items of facts tied in time with the last one are read too: ``_list`` may order a tie
        # otherwise (Python's ``id`` order, not the database's collation) and keep one of them.
        items.add(item)
        item_keys.add(key)
        if cutoff is None and len(items) >= MAX_LIST_ITEMS:
            cutoff = f.observed_at
    if cutoff is None:
        return seen  # the walk read every fact of the family
    return seen + facts.with_keys(keys=item_keys, besides={f.id for f in seen})


def infer_from_store(
    store: MemoryStore,
    memory_id: str,
    specs: Iterable[VariableSpec],
    *,
    now_ms: int,
) -> dict[str, VariableGuess]:
    """Infer the values of ``specs`` from the store; variables without support are absent.

    Args:
        store: The store.
        memory_id: The memory.
        specs: The specs to infer (``infer=True`` ones; see :func:`affected_specs`).
        now_ms: Current time.
    """
    wanted = [s for s in specs if s.infer]
    if not wanted:
        return {}
    kinds = {s.name: _kind(s) for s in wanted}
    facts = _Facts(store, memory_id, now_ms)
    language = None
    if any(k in ("language", "diet") for k in kinds.values()) or any(
        s.name not in _DEFAULT_NAMES and generic_field(s) == "diet" for s in wanted
    ):
        language = _language(facts)
    zh = language is None or language.value == "zh"
    guesses: dict[str, VariableGuess] = {}
    for spec in wanted:
        kind = kinds[spec.name]
        guess: VariableGuess | None
        if kind == "language":
            guess = language
            if guess is not None and spec.allowed_values is not None:
                value = _allowed(spec.allowed_values, str(guess.value))
                guess = VariableGuess(value=value, fragment_ids=guess.fragment_ids) if value else None
        elif kind == "hobbies":
            guess = _hobbies(_hobby_facts(facts))
        elif kind == "diet":
            guess = _diet(facts.diet_facts(), zh)
        elif kind == "list":
            guess = _list(spec, _list_facts(spec, facts))
        else:
            reader = _int_reader(spec.name) if spec.type == "integer" else _string_reader(spec.name)
            guess = _single(spec, facts.with_keys(keys=[_profile_key(spec)]), reader)
        family = generic_field(spec) if guess is None and spec.name not in _DEFAULT_NAMES else None
        if family is not None:  # its own keys say nothing: the rule of the family it names may
            wanted_keys, prefixes = generic_sources(family)
            if family == "hobbies":
                read = _hobby_facts(facts)
            elif family == "diet":
                read = facts.diet_facts()
            else:
                read = facts.with_keys(wanted_keys, prefixes)
            guess = _generic(spec, family, read, zh)
        if guess is not None:
            guesses[spec.name] = guess
    return guesses
