"""A LangGraph ``BaseStore`` over convmem's memory, for ``runtime.store`` and LangMem's memory tools.

``ConvMemory.as_store()`` returns a :class:`ConvMemoryStore`. Its namespaces (``prefix`` is
``"memories"`` by default, as in LangMem's examples):

- ``(prefix, memory_id)``: active fragments. Key: the fragment id, or the key a ``put`` chose.
  Value: ``content``, ``category``, ``key``, ``origin``, ``transient``, ``expires_at``,
  ``source_message_ids``. ``put`` adds or edits a fact, ``delete`` deletes it (both audited;
  variables are re-inferred and the call-start snapshot rebuilt).
- ``(prefix, memory_id, "variables")``: key = variable name, value ``value``, ``origin``,
  ``fragment_ids``. ``put({"value": v})`` sets a manual value, ``delete`` clears it.
- ``(prefix, memory_id, "summary")``: key ``"summary"``, value ``content``, ``tokens``,
  ``version``. Read-only.
- ``(prefix, memory_id, "turns")``: stored messages (the newest 200 without a query), value
  ``content``, ``role``, ``channel``, ``timestamp_ms``. Read-only.

``search(namespace, query=...)`` ranks fragments with convmem's ranker (BM25 with CJK bigrams,
embeddings when the ``ConvMemory`` has them) and turns through the episodic index (every stored
turn, not only the newest); ``filter`` matches value fields by equality. A ``put`` under a key
that is not a fragment id stores a fact whose key is ``item:<key>``, so tools that choose their
own ids (LangMem uses UUIDs) can update and delete it later. The store is synchronous; the
``a``-methods run ``batch`` in a worker thread.

Example:
    >>> from convmem_graph import ConvMemory
    >>> mem = ConvMemory.open("sqlite://")
    >>> store = mem.as_store()
    >>> store.put(("memories", "u_1"), "k1", {"content": "User likes green tea."})
    >>> [i.value["content"] for i in store.search(("memories", "u_1"), query="tea")]
    ['User likes green tea.']
    >>> store.delete(("memories", "u_1"), "k1")
    >>> store.search(("memories", "u_1"), query="tea")
    []
    >>> mem.close()
"""

from __future__ import annotations

import asyncio
import json
import math
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from langgraph.store.base import (
    BaseStore,
    GetOp,
    Item,
    ListNamespacesOp,
    MatchCondition,
    Op,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
)

from convmem_graph.errors import MemoryNotFoundError
from convmem_graph.models import FRAGMENT_MAX_CHARS, Fragment, Message

if TYPE_CHECKING:
    from convmem_graph.memory_api import MemoryAPI

__all__ = ["ConvMemoryStore"]

_ITEM_KEY = "item:"
_KINDS = ("variables", "summary", "turns")
_TURNS = 200


def _dt(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, tz=UTC)


def _item_key(fragment: Fragment) -> str:
    return fragment.key[len(_ITEM_KEY) :] if fragment.key.startswith(_ITEM_KEY) else fragment.id


def _fragment_value(f: Fragment) -> dict[str, Any]:
    return {
        "content": f.content,
        "category": f.category,
        "key": f.key,
        "origin": f.origin,
        "transient": f.transient,
        "expires_at": f.expires_at,
        "source_message_ids": list(f.source_message_ids),
    }


def _fragment_item(f: Fragment, namespace: tuple[str, ...]) -> Item:
    return Item(
        value=_fragment_value(f),
        key=_item_key(f),
        namespace=namespace,
        created_at=_dt(f.created_at),
        updated_at=_dt(f.updated_at),
    )


def _turn_value(m: Message) -> dict[str, Any]:
    return {"content": m.content, "role": m.role, "channel": m.channel, "timestamp_ms": m.timestamp_ms}


def _matches(value: Mapping[str, Any], filter: Mapping[str, Any] | None) -> bool:
    return not filter or all(value.get(k) == v for k, v in filter.items())


def _path_matches(namespace: tuple[str, ...], condition: MatchCondition) -> bool:
    path = tuple(condition.path)
    if len(path) > len(namespace):
        return False
    if condition.match_type == "prefix":
        part = namespace[: len(path)]
    else:
        part = namespace[len(namespace) - len(path) :]
    return all(p == "*" or p == n for p, n in zip(path, part, strict=True))


class ConvMemoryStore(BaseStore):
    """``BaseStore`` whose namespaces expose convmem memories (see the module docstring).

    Args:
        memory: The ConvMemory whose store, ranker and lifecycle are used.
        prefix: First element of every namespace.
    """

    supports_ttl = False

    def __init__(self, memory: MemoryAPI, *, prefix: str = "memories") -> None:
        self.memory = memory
        self.prefix = prefix

    # -- namespaces -----------------------------------------------------------------------------
    def _parse(self, namespace: tuple[str, ...]) -> tuple[str, str]:
        """Return (memory id, kind) where kind is ``fragments`` or one of ``_KINDS``."""
        ns = tuple(namespace)
        if len(ns) < 2 or ns[0] != self.prefix or len(ns) > 3 or (len(ns) == 3 and ns[2] not in _KINDS):
            shapes = ", ".join(f"({self.prefix!r}, memory_id, {k!r})" for k in _KINDS)
            raise ValueError(
                f"ConvMemoryStore: namespace {ns!r} is not ({self.prefix!r}, memory_id) or one of {shapes}"
            )
        return ns[1], ns[2] if len(ns) == 3 else "fragments"

    def _exists(self, memory_id: str) -> bool:
        try:
            self.memory.info(memory_id)
        except MemoryNotFoundError:
            return False
        return True

    # -- reading --------------------------------------------------------------------------------
    def _fragments(self, memory_id: str) -> list[Fragment]:
        now = self.memory.lifecycle.clock()
        return self.memory.store.list_fragments(memory_id, status="active", include_expired=False, now_ms=now)

    def _find_fragment(self, memory_id: str, key: str) -> Fragment | None:
        for f in self._fragments(memory_id):
            if f.id == key or f.key == f"{_ITEM_KEY}{key}":
                return f
        return None

    def _items(self, memory_id: str, kind: str) -> list[Item]:
        ns: tuple[str, ...] = (self.prefix, memory_id)
        if kind != "fragments":
            ns = (*ns, kind)
        if not self._exists(memory_id):
            return []
        if kind == "fragments":
            return [_fragment_item(f, ns) for f in self._fragments(memory_id)]
        if kind == "variables":
            return [
                Item(
                    value={"value": v.value, "origin": v.origin, "fragment_ids": list(v.fragment_ids)},
                    key=name,
                    namespace=ns,
                    created_at=_dt(v.updated_at),
                    updated_at=_dt(v.updated_at),
                )
                for name, v in self.memory.variables(memory_id).items()
            ]
        if kind == "summary":
            s = self.memory.summary(memory_id)
            if s is None:
                return []
            value = {"content": s.text, "tokens": s.tokens, "version": s.version}
            at = _dt(s.updated_at)
            return [Item(value=value, key="summary", namespace=ns, created_at=at, updated_at=at)]
        turns = self.memory.recent(memory_id, _TURNS)
        return [
            Item(
                value=_turn_value(m),
                key=m.id,
                namespace=ns,
                created_at=_dt(m.timestamp_ms),
                updated_at=_dt(m.timestamp_ms),
            )
            for m in reversed(turns)  # newest first, like a search without a query
        ]

    def _get(self, op: GetOp) -> Item | None:
        memory_id, kind = self._parse(op.namespace)
        if kind == "fragments":
            if not self._exists(memory_id):
                return None
            f = self._find_fragment(memory_id, op.key)
            return None if f is None else _fragment_item(f, tuple(op.namespace))
        return next((i for i in self._items(memory_id, kind) if i.key == op.key), None)

    def _search(self, op: SearchOp) -> list[SearchItem]:
        memory_id, kind = self._parse(op.namespace_prefix)
        query = (op.query or "").strip()
        if kind == "fragments" and query:
            if not self._exists(memory_id):
                return []
            # Rank everything, filter, then page: a filter must not shrink a page.
            hits = self.memory.search(memory_id, query, k=10_000)
            found = [
                SearchItem(
                    namespace=tuple(op.namespace_prefix),
                    key=_item_key(h.fragment),
                    value=_fragment_value(h.fragment),
                    created_at=_dt(h.fragment.created_at),
                    updated_at=_dt(h.fragment.updated_at),
                    score=h.score,
                )
                for h in hits
                if _matches(_fragment_value(h.fragment), op.filter)
            ]
            return found[op.offset : op.offset + op.limit]
        if kind == "turns" and query and self.memory.config.episodic:
            return self._search_turns(op, memory_id, query)
        items = [i for i in self._items(memory_id, kind) if _matches(i.value, op.filter)]
        scored: list[tuple[Item, float | None]]
        if query:
            from convmem_graph.payloads.relevance import lexical_scores

            texts = [str(i.value.get("content", i.value.get("value", ""))) for i in items]
            scores = lexical_scores(query, texts)
            top = max(scores.values(), default=0.0)
            order = sorted(scores, key=lambda n: -scores[n])
            scored = [(items[n], scores[n] / top) for n in order] if top > 0 else []
        else:
            if kind == "fragments":
                items.sort(key=lambda i: i.updated_at, reverse=True)
            scored = [(i, None) for i in items]
        return [
            SearchItem(
                namespace=i.namespace,
                key=i.key,
                value=i.value,
                created_at=i.created_at,
                updated_at=i.updated_at,
                score=score,
            )
            for i, score in scored[op.offset : op.offset + op.limit]
        ]

    def _search_turns(self, op: SearchOp, memory_id: str, query: str) -> list[SearchItem]:
        """Search every stored turn through the episodic index (not only the newest ones)."""
        if not self._exists(memory_id):
            return []
        found = self.memory.store.search_episodes(memory_id, query, limit=max(32, op.offset + op.limit))
        n = max(found.total, 1)

        def idf(term: str) -> float:
            df = found.document_frequency.get(term, 0)
            return math.log(1 + (n - df + 0.5) / (df + 0.5))

        weights = [sum(idf(t) for t in hit.terms) for hit in found.hits]
        top = max(weights, default=0.0)
        ns = (self.prefix, memory_id, "turns")
        items = [
            SearchItem(
                namespace=ns,
                key=hit.message.id,
                value=_turn_value(hit.message),
                created_at=_dt(hit.message.timestamp_ms),
                updated_at=_dt(hit.message.timestamp_ms),
                score=(w / top) if top > 0 and w > 0 else None,  # a reply to a hit holds no term
            )
            for hit, w in zip(found.hits, weights, strict=True)
            if _matches(_turn_value(hit.message), op.filter)
        ]
        return items[op.offset : op.offset + op.limit]

    def _list_namespaces(self, op: ListNamespacesOp) -> list[tuple[str, ...]]:
        found: list[tuple[str, ...]] = []
        offset = 0
        while True:
            page = self.memory.memories(limit=500, offset=offset)
            for info in page:
                base = (self.prefix, info.memory_id)
                found.append(base)
                found.extend((*base, kind) for kind in _KINDS)
            if len(page) < 500:
                break
            offset += 500
        for condition in op.match_conditions or ():
            found = [ns for ns in found if _path_matches(ns, condition)]
        if op.max_depth is not None:
            found = sorted({ns[: op.max_depth] for ns in found})
        return found[op.offset : op.offset + op.limit]

    # -- writing --------------------------------------------------------------------------------
    def _content(self, value: Mapping[str, Any]) -> str:
        content = value.get("content")
        if content is None:
            raise ValueError("ConvMemoryStore.put: a fact needs value['content'] (text, or JSON-able data)")
        text = content if isinstance(content, str) else json.dumps(content, ensure_ascii=False)
        text = text.strip()
        if not text or len(text) > FRAGMENT_MAX_CHARS:
            raise ValueError(
                f"ConvMemoryStore.put: value['content'] must be 1 to {FRAGMENT_MAX_CHARS} characters "
                f"(got {len(text)}); store one fact per item"
            )
        return text

    def _put(self, op: PutOp) -> None:
        memory_id, kind = self._parse(op.namespace)
        mem = self.memory
        if kind in ("summary", "turns"):
            raise ValueError(f"ConvMemoryStore: namespace {tuple(op.namespace)!r} is read-only")
        if kind == "variables":
            if op.value is None:
                if self._exists(memory_id):
                    mem.clear_variable(memory_id, op.key)
                return
            if "value" not in op.value:
                raise ValueError("ConvMemoryStore.put: a variable needs value['value']")
            mem.set_variable(memory_id, op.key, op.value["value"])
            return
        existing = self._find_fragment(memory_id, op.key) if self._exists(memory_id) else None
        if op.value is None:
            if existing is not None:
                mem.delete_fragment(memory_id, existing.id)
            return
        content = self._content(op.value)
        category = str(op.value.get("category") or (existing.category if existing else "other"))
        if existing is not None:
            if existing.content != content or existing.category != category:
                mem.update_fragment(memory_id, existing.id, content=content, category=category)
            return
        key = f"{_ITEM_KEY}{op.key}"
        mem.store.add_fragment(memory_id, content, category=category, key=key, origin="api")
        mem.lifecycle.run(memory_id)  # variables follow the facts; the snapshot is rebuilt

    # -- BaseStore ------------------------------------------------------------------------------
    def batch(self, ops: Iterable[Op]) -> list[Result]:
        """Run get, search, put and list-namespaces operations in order."""
        results: list[Result] = []
        for op in ops:
            if isinstance(op, GetOp):
                results.append(self._get(op))
            elif isinstance(op, SearchOp):
                results.append(self._search(op))
            elif isinstance(op, PutOp):
                self._put(op)
                results.append(None)
            elif isinstance(op, ListNamespacesOp):
                results.append(self._list_namespaces(op))
            else:
                raise TypeError(f"ConvMemoryStore: unknown operation {type(op).__name__}")
        return results

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        """Async twin of :meth:`batch` (run in a worker thread: the store is synchronous)."""
        return await asyncio.to_thread(self.batch, list(ops))
