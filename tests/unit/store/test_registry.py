"""The registry says, for every memory table, how an export carries it or why it does not."""

from __future__ import annotations

from convmem_graph.store import MemoryStore
from convmem_graph.store.registry import MEMORY_TABLES
from convmem_graph.store.transfer import export_memory


def test_every_memory_table_is_exported_or_says_why_not() -> None:
    for entry in MEMORY_TABLES:
        assert (entry.export is None) != (entry.not_exported == ""), entry.table.name
        if entry.export is not None:
            columns = set(entry.table.c.keys())
            assert set(entry.export.order) <= columns and entry.export.drop <= columns, entry.table.name


def test_an_export_has_a_key_per_exported_table() -> None:
    with MemoryStore.from_url(":memory:") as store:
        store.add_fragment("u1", "Likes tea", category="preference")
        doc = export_memory(store, "u1")
    keys = {e.export.key for e in MEMORY_TABLES if e.export is not None}
    assert keys <= set(doc) and len(keys) == sum(e.export is not None for e in MEMORY_TABLES)
    assert [f["content"] for f in doc["fragments"]] == ["Likes tea"]
