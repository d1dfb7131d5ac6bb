"""A PostgreSQL run that creates its memory does not read its specs, variables, summary or facts.

The insert of the memory's row in the run's transaction proves those tables hold nothing for it
(they reference ``cm_memories``, and the memory's lock keeps other writers out until the commit),
so ``add_messages`` puts their empty values in the run's read cache, and notes that the memory has
no fact until its next write. These tests check that the reads are gone, that the run's own later
writes are still seen, and that nothing is carried past the run: a value set by another writer
between runs is read by the next run.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import event

from convmem_graph.models import FragmentCandidate, FragmentOp, Message, VariableSpec
from convmem_graph.runner import Lifecycle
from convmem_graph.state import RawInput
from convmem_graph.store import MemoryStore

pytestmark = [pytest.mark.integration, pytest.mark.postgres]

#: The reads ``add_messages`` on a new memory makes unnecessary (the tables' own SELECTs).
READ_TABLES = ("FROM cm_variable_specs", "FROM cm_variables", "FROM cm_summaries")


@pytest.fixture
def store(fresh_pg_store: MemoryStore) -> MemoryStore:
    """The module's store: on a schema of the test's own (``conftest.fresh_pg_store``)."""
    return fresh_pg_store


@pytest.fixture
def selects(store: MemoryStore) -> Iterator[list[str]]:
    """The SELECTs of the three tables sent while the test runs (a listener routes every statement)."""
    seen: list[str] = []

    def on_execute(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if statement.lstrip().upper().startswith("SELECT") and any(t in statement for t in READ_TABLES):
            seen.append(statement)

    event.listen(store.engine, "before_cursor_execute", on_execute)
    yield seen
    event.remove(store.engine, "before_cursor_execute", on_execute)


def _message(k: int, text: str) -> Message:
    return Message(
        id=f"m{k}", role="user", content=text, channel="api", source="message", timestamp_ms=1_000 * k
    )


def test_a_lifecycle_run_creating_its_memory_reads_none_of_the_three(
    store: MemoryStore, selects: list[str]
) -> None:
    lifecycle = Lifecycle(store)
    raw = [{"role": "user", "content": "I like green tea. My name is Ann.", "timestamp": 1_000}]
    lifecycle.run("new", [RawInput(raw)])
    assert selects == []
    # The next run of the same memory is not new: it reads them (once each: the run's cache).
    lifecycle.run("new", [RawInput([{"role": "user", "content": "I live in Oslo.", "timestamp": 9_000}])])
    assert sorted(t for t in READ_TABLES for s in selects if t in s) == sorted(READ_TABLES)


def test_the_run_sees_its_own_writes_after_the_seed(store: MemoryStore, selects: list[str]) -> None:
    with store.run("fresh") as run:
        run.add_messages("fresh", [_message(1, "hello")])
        assert run.get_specs("fresh") == []
        assert run.get_variables("fresh") == {}
        assert run.get_summary("fresh") is None
        assert selects == []
        run.define_variables("fresh", [VariableSpec(name="city")])
        run.set_manual_variable("fresh", "city", "Oslo")
        assert [s.name for s in run.get_specs("fresh")] == ["city"]
        assert run.get_variables("fresh")["city"].value == "Oslo"
    assert store.get_variables("fresh")["city"].value == "Oslo"


def test_an_existing_memory_is_read_and_nothing_is_carried_past_the_run(
    store: MemoryStore, selects: list[str]
) -> None:
    store.ensure_memory("old")
    store.define_variables("old", [VariableSpec(name="city")])
    with store.run("old") as run:
        run.add_messages("old", [_message(1, "hello")])
        assert [s.name for s in run.get_specs("old")] == ["city"]
    # Another writer between runs (here the store itself): the next run must see it.
    store.set_manual_variable("old", "city", "Bergen")
    with store.run("old") as run:
        run.add_messages("old", [_message(2, "again")])
        assert run.get_variables("old")["city"].value == "Bergen"
    assert any("FROM cm_variables" in s for s in selects)


def test_no_facts_holds_from_the_creating_write_to_the_next_write_only(store: MemoryStore) -> None:
    assert not store.holds_no_facts("nf")
    with store.run("nf") as run:
        assert not run.holds_no_facts("nf")
        run.add_messages("nf", [_message(1, "I like green tea")])
        assert run.holds_no_facts("nf")
        candidate = FragmentCandidate(content="likes green tea", key="like:green_tea")
        op = FragmentOp(op="add", candidate=candidate)
        run.commit_extraction("nf", [op], upto_seq=1, now_ms=2_000)
        assert not run.holds_no_facts("nf")  # the write that may add facts ends it
        assert [f.content for f in run.list_fragments("nf")] == ["likes green tea"]
    with store.run("nf") as run:
        run.add_messages("nf", [_message(2, "again")])
        assert not run.holds_no_facts("nf")  # not created by this run


def test_a_creating_run_reads_no_fact_before_its_first_fact_write(fresh_pg_url: str) -> None:
    store = MemoryStore.from_url(fresh_pg_url)
    order: list[str] = []

    def on_execute(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if "cm_fragments" in statement:
            order.append("insert" if statement.lstrip().upper().startswith("INSERT") else "read")

    event.listen(store.engine, "before_cursor_execute", on_execute)
    try:
        said = [{"role": "user", "content": "I like green tea.", "timestamp": 1}]
        Lifecycle(store).run("t", [RawInput(said)])
    finally:
        event.remove(store.engine, "before_cursor_execute", on_execute)
        store.close()
    assert "insert" in order
    assert "read" not in order[: order.index("insert")]
