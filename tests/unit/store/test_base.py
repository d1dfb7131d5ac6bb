"""store/base.py: the interface by record kind, and MemoryStore as its implementation."""

from __future__ import annotations

import inspect

import pytest

from convmem_graph.store import MemoryStore, base

KINDS = [
    base.StoreScopes,
    base.MemoryRecordStore,
    base.MessageStore,
    base.FactStore,
    base.VariableStore,
    base.SummaryStore,
    base.DeadLetterStore,
]
#: Public on MemoryStore and deliberately outside the interface: construction, the earlier names
#: of run()/session(), the PostgreSQL run's driver connection (for the checkpointer), a session's
#: connection, and the database's policy object (the statements of reads a node shapes itself).
OUTSIDE = {"from_url", "memory_lock", "pinned", "run_connection", "connection", "backend"}


def _members(proto: type) -> set[str]:
    return {
        n
        for n, v in vars(proto).items()
        if (callable(v) or isinstance(v, property)) and not n.startswith("_")
    }


def test_every_public_method_of_the_store_belongs_to_exactly_one_kind() -> None:
    public = {n for n in dir(MemoryStore) if not n.startswith("_")} - OUTSIDE
    owners = {n: [k.__name__ for k in KINDS if n in _members(k)] for n in public}
    assert {n: o for n, o in owners.items() if len(o) != 1} == {}
    assert set().union(*(_members(k) for k in KINDS)) <= public  # nothing in the interface is missing


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.__name__)
def test_the_store_has_each_kinds_signatures(kind: type) -> None:
    for name in _members(kind):
        if isinstance(vars(kind)[name], property):
            assert isinstance(inspect.getattr_static(MemoryStore, name), property), name
            continue
        want = inspect.signature(getattr(kind, name)).parameters
        got = inspect.signature(getattr(MemoryStore, name)).parameters
        assert list(want) == list(got), name
        for p in want:
            assert (want[p].kind, want[p].default, want[p].annotation) == (
                got[p].kind,
                got[p].default,
                got[p].annotation,
            ), f"{name}({p})"


def test_a_store_and_its_run_are_each_kind() -> None:
    store = MemoryStore.from_url(":memory:")
    try:
        with store.run("mem_1") as run:
            for kind in (*KINDS, base.Store):
                assert isinstance(store, kind) and isinstance(run, kind)
        assert not isinstance(object(), base.MessageStore)
    finally:
        store.close()


def test_every_database_the_store_opens_has_a_conformance_run() -> None:
    from tests.unit.store.test_repository import BACKENDS

    # The dialects MemoryStore accepts (anything else is refused) and the in-memory SQLite variant.
    with pytest.raises(ValueError, match="unsupported database"):
        MemoryStore.from_url("mysql://nobody@localhost/x")
    assert {"sqlite-file", "sqlite-memory", "postgresql"} <= set(BACKENDS)
    assert set(BACKENDS.values()) <= {"unit", "integration"}
