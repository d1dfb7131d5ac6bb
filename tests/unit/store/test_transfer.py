"""Export and import of one memory: exact round trip, all-or-nothing import."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from convmem_graph.errors import ConvMemError
from convmem_graph.models import Message
from convmem_graph.nodes._extract_reads import related_facts
from convmem_graph.runner import Lifecycle
from convmem_graph.state import RawInput
from convmem_graph.store import MemoryStore
from convmem_graph.store.transfer import export_memory, import_memory

T0 = 1_767_268_800_000


@pytest.fixture
def store(tmp_path: Path) -> MemoryStore:
    s = MemoryStore.from_url(str(tmp_path / "t.db"))
    turns = [
        {"role": "user", "content": "I'm allergic to peanuts and I live in Lyon.", "timestamp": T0},
        {"role": "assistant", "content": "Noted.", "timestamp": T0 + 1000},
        {"role": "user", "content": "My daughter Mia is six.", "timestamp": T0 + 2000},
    ]
    Lifecycle(s).run("src", [RawInput(turns)], session_ended=True)
    return s


def _without_id(doc: dict) -> dict:  # type: ignore[type-arg]
    doc = copy.deepcopy(doc)
    doc["memory"].pop("memory_id")
    return doc


def test_round_trip_under_another_id_is_exact(store: MemoryStore) -> None:
    doc = export_memory(store, "src")
    assert doc["messages"] and doc["fragments"] and doc["summary"]
    assert import_memory(store, doc, memory_id="copy") == "copy"
    assert _without_id(export_memory(store, "copy")) == _without_id(doc)


def test_a_bad_row_late_in_the_document_leaves_nothing_behind(store: MemoryStore) -> None:
    doc = export_memory(store, "src")
    doc["audit"][-1]["action"] = None  # checked before anything is written
    with pytest.raises(ConvMemError, match=r"\$\.audit\[\d+\]\.action"):
        import_memory(store, doc, memory_id="broken")
    assert store.count_messages("broken") == 0
    assert store.list_fragments("broken", status=None) == []
    assert [m.memory_id for m in store.list_memories()] == ["src"]


def test_replace_is_all_or_nothing_too(store: MemoryStore) -> None:
    doc = export_memory(store, "src")
    bad = copy.deepcopy(doc)
    bad["audit"][-1]["action"] = None
    with pytest.raises(ConvMemError):
        import_memory(store, bad, replace=True)
    assert export_memory(store, "src") == doc  # the memory it would have replaced is intact


def test_export_waits_for_a_writer_of_the_memory(store: MemoryStore) -> None:
    import threading
    import time

    started, release = threading.Event(), threading.Event()

    def writer() -> None:
        with store.session() as s, s.transaction("src"):
            s.add_messages(
                "src",
                [
                    Message(
                        id="late",
                        role="user",
                        content="One more thing.",
                        channel="im",
                        source="message",
                        timestamp_ms=T0 + 9000,
                    )
                ],
            )
            started.set()
            release.wait(10)

    t = threading.Thread(target=writer)
    t.start()
    assert started.wait(10)
    done: dict[str, dict] = {}  # type: ignore[type-arg]
    reader = threading.Thread(target=lambda: done.setdefault("doc", export_memory(store, "src")))
    reader.start()
    time.sleep(0.3)
    assert "doc" not in done  # the export waits for the open write
    release.set()
    t.join(10)
    reader.join(10)
    assert [m["id"] for m in done["doc"]["messages"]][-1] == "late"  # and then sees all of it


def test_import_recomputes_the_fragments_derived_columns(store: MemoryStore) -> None:
    # An export from another version (or a tampered one) cannot hide a fact from the live path,
    # which finds facts by canonical key and content hash.
    doc = export_memory(store, "src")
    for row in doc["fragments"]:
        row["ckey"], row["norm_hash"], row["cjk"] = "other:key", 7, True
    import_memory(store, doc, memory_id="copy")
    for fragment in store.list_fragments("copy"):
        found = related_facts(store, "copy", [fragment.key], [])
        assert [f.id for f in found] == [fragment.id]
        assert [f.id for f in related_facts(store, "copy", [], [fragment.content])] == [fragment.id]
    assert _without_id(export_memory(store, "copy")) == _without_id(export_memory(store, "src"))
