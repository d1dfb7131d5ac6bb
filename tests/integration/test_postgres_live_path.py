"""The live path's index reads on a real PostgreSQL: same results as reading every fact."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from convmem_graph.extractors.reconcile import reconcile
from convmem_graph.extractors.variables import DEFAULT_VARIABLE_SPECS, infer_variables
from convmem_graph.memory import ConvMemory
from convmem_graph.models import FragmentCandidate
from convmem_graph.nodes._extract_reads import related_facts
from convmem_graph.nodes._inference import infer_from_store
from convmem_graph.nodes.inject import select_fragments
from convmem_graph.store import MemoryStore
from tests.unit.nodes.test_flat_turn import CONTENTS, CUSTOM, KEYS, NOW, SUBJECTS, Fact, fact, fill

pytestmark = [pytest.mark.integration, pytest.mark.postgres]

_SETTINGS = settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


@pytest.fixture(scope="module")
def store(pg_url: str) -> Iterator[MemoryStore]:
    s = MemoryStore.from_url(pg_url)
    yield s
    s.close()


@_SETTINGS
@given(
    facts=st.lists(fact, max_size=50),
    candidates=st.lists(
        st.tuples(st.sampled_from(KEYS), st.sampled_from(CONTENTS), st.sampled_from(SUBJECTS)), max_size=5
    ),
    limit=st.integers(min_value=1, max_value=30),
)
def test_index_reads_equal_reading_every_fact(
    store: MemoryStore, facts: list[Fact], candidates: list[tuple[str, str, str]], limit: int
) -> None:
    memory_id = f"pg{abs(hash((tuple(facts), tuple(candidates), limit)))}"
    fill(store, memory_id, facts)
    every = store.list_fragments(memory_id, status="active")
    for specs in (list(DEFAULT_VARIABLE_SPECS), CUSTOM):
        assert infer_from_store(store, memory_id, specs, now_ms=NOW) == infer_variables(
            specs, every, now_ms=NOW
        )
    cands = [FragmentCandidate(content=c.format(s=s), key=k.format(s=s)) for k, c, s in candidates]
    related = related_facts(store, memory_id, [c.key for c in cands], [c.content for c in cands])
    assert reconcile(cands, related) == reconcile(cands, every)
    live = store.list_fragments(memory_id, status="active", include_expired=False, now_ms=NOW)
    assert store.strongest_fragments(memory_id, limit=limit, now_ms=NOW) == select_fragments(live, limit)
    store.delete_memory(memory_id)


def test_a_live_turn_on_postgres_keeps_variables_equal_to_a_full_inference(pg_url: str) -> None:
    with ConvMemory.open(pg_url, clock=lambda: NOW) as mem:
        turns = ["我住在杭州。", "我喜欢跑步。", "我不吃香菜。", "我搬到上海了。", "I love hiking."]
        for i, text in enumerate(turns):
            mem.ingest(
                "pg_live", [{"role": "user", "content": text, "timestamp": NOW // 1000 + i}], source="openai"
            )
        every = mem.store.list_fragments("pg_live", status="active")
        expected = infer_variables(DEFAULT_VARIABLE_SPECS, every, now_ms=NOW)
        stored = mem.store.inferred_variables("pg_live")
        assert {n: v.value for n, v in stored.items()} == {n: g.value for n, g in expected.items()}
        assert stored["city"].value == "上海"
        mem.delete("pg_live")
