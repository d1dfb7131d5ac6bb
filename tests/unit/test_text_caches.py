"""A delete forgets the memory in this process too: the memos of stored text and the kept rows.

The database side of a delete is checked table by table (tests/unit/test_memory_delete.py). Here:
every memo in the package is either registered as holding stored text (and emptied by a delete or
a purge) or named below as holding none; after ``ConvMemory.delete`` the store keeps no parsed
snapshot or fact rows of the memory and every registered memo is empty.
"""

from __future__ import annotations

import importlib
import pkgutil
from pathlib import Path
from typing import Any

import pytest

import convmem_graph
from convmem_graph import _text_caches
from convmem_graph.memory import ConvMemory
from convmem_graph.store import _vectors

T0 = 1_767_268_800_000

#: Memos whose keys and answers never hold stored text (a user's words, a memory id), and why.
HOLDS_NO_TEXT = {
    "convmem_graph.payloads._sanitize._skeleton_table": "no argument: Unicode's confusables",
    "convmem_graph.store._episode_search._postings_sql": "keyed by a term count",
    "convmem_graph.payloads.memory_block._header_tokens": "keyed by language and token counter",
    "convmem_graph.payloads.memory_block._quote_note_tokens": "keyed by language and token counter",
    "convmem_graph.checkpoints.postgres._saver_class": "no argument: a class",
    "convmem_graph.checkpoints.namespace._channels": "no argument: the graph's channel names",
    "convmem_graph.store.postgres._pg_followed_sql": "keyed by a flag: SQL text",
    "convmem_graph.store.engine.insert_ignore": "keyed by dialect and table: a statement",
    "convmem_graph.store.engine.upsert": "keyed by dialect, table and column names: a statement",
    "convmem_graph.store._fact_queries.pg_context": "keyed by fact-key families (schema words)",
}


def _package_memos() -> dict[str, Any]:
    """Every module-level memo (an object with ``cache_clear`` and ``cache_info``) in the package."""
    found: dict[str, Any] = {}
    root = Path(convmem_graph.__file__).parent
    for info in pkgutil.walk_packages([str(root)], prefix="convmem_graph."):
        if info.name.endswith("__main__"):
            continue
        module = importlib.import_module(info.name)
        for name, value in vars(module).items():
            if callable(getattr(value, "cache_clear", None)) and callable(getattr(value, "cache_info", None)):
                owner = getattr(getattr(value, "__wrapped__", value), "__module__", info.name)
                if owner == info.name:  # defined here, not imported from elsewhere
                    found[f"{info.name}.{name}"] = value
    return found


def test_every_memo_is_registered_or_named_as_holding_no_text() -> None:
    memos = _package_memos()
    registered = {id(c) for c in _text_caches.text_caches()}
    unaccounted = sorted(n for n, m in memos.items() if id(m) not in registered and n not in HOLDS_NO_TEXT)
    assert unaccounted == [], f"neither registered with holds_text nor in HOLDS_NO_TEXT: {unaccounted}"
    stale = sorted(n for n in HOLDS_NO_TEXT if n not in memos)
    assert stale == [], f"HOLDS_NO_TEXT names memos that no longer exist: {stale}"
    # The text memos the call start and the lifecycle fill are among the registered ones.
    for name in ("convmem_graph.tokens._count_short", "convmem_graph.payloads.ranker._cached_terms"):
        assert id(memos[name]) in registered


def _messages(words: str, at: int) -> list[dict[str, Any]]:
    return [
        {"role": "user", "content": f"I went hiking near {words} yesterday with my sister.", "timestamp": at},
        {"role": "assistant", "content": f"How was {words}?", "timestamp": at + 1000},
        {"role": "user", "content": f"Lovely, {words} is my favourite walk.", "timestamp": at + 2000},
    ]


def _filled(mem: ConvMemory, memory_id: str, words: str) -> None:
    mem.ingest(memory_id, _messages(words, T0), session_ended=True)
    payload = mem.payload(memory_id, "openai", query=f"where did I go hiking near {words}?")
    assert words in str(payload)


def _memo_sizes() -> int:
    return sum(c.cache_info().currsize for c in _text_caches.text_caches())  # type: ignore[attr-defined]


def test_delete_forgets_the_memory_in_this_process(tmp_path: Path) -> None:
    with ConvMemory.open(f"sqlite:///{tmp_path / 'm.db'}") as mem:
        _filled(mem, "gone", "Zorbelmoor")
        _filled(mem, "kept", "Quillanshaw")
        store = mem.store
        assert "gone" in store._parsed
        assert _memo_sizes() > 0
        assert mem.delete("gone")
        assert "gone" not in store._parsed
        assert "gone" not in store._strongest._kept
        assert "gone" not in store._snapshot_json._kept
        assert _memo_sizes() == 0
        # The other memory answers as before (its memos fill again).
        again = mem.payload("kept", "openai", query="where did I go hiking near Quillanshaw?")
        assert "Quillanshaw" in str(again)
        assert _memo_sizes() > 0


def test_a_purge_empties_the_text_memos(tmp_path: Path) -> None:
    with ConvMemory.open(f"sqlite:///{tmp_path / 'm.db'}") as mem:
        _filled(mem, "u", "Brackenvale")
        assert _memo_sizes() > 0
        purged = mem.store.purge_messages("u", before_ms=T0 + 10_000, keep_recent=0, only_processed=False)
        assert purged == 3
        assert _memo_sizes() == 0
        assert "u" not in mem.store._parsed


def test_forget_matrices_drops_only_that_memorys_entries(monkeypatch: pytest.MonkeyPatch) -> None:
    fake: Any = object()
    monkeypatch.setattr(_vectors, "_cache", type(_vectors._cache)())
    _vectors._cache[(1, "a", "m1")] = fake
    _vectors._cache[(2, "a", "m2")] = fake
    _vectors._cache[(1, "b", "m1")] = fake
    _vectors.forget_matrices("a")
    assert list(_vectors._cache) == [(1, "b", "m1")]
