"""A custom list variable's walk of its key family on a real PostgreSQL equals the rule over every fact.

The generated writes of ``tests/unit/nodes/test_list_bounded.py``; here the walk's order ties are
broken by PostgreSQL's collation of ``id``, which need not be Python's (the walk reads on past the
last item's time for that reason).
"""

from __future__ import annotations

from typing import Any
from unittest.mock import patch

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from convmem_graph.extractors import variables as V
from convmem_graph.extractors.variables import infer_variables
from convmem_graph.nodes import _inference
from convmem_graph.nodes._inference import infer_from_store
from convmem_graph.store import MemoryStore
from tests.unit.nodes.test_list_bounded import ACTIONS, DAY, NOW, SPECS, apply

pytestmark = [pytest.mark.integration, pytest.mark.postgres]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(actions=ACTIONS, cap=st.sampled_from([1, 2, 20]))
def test_the_walk_gives_the_value_of_every_fact_on_postgres(
    pg_store: MemoryStore, actions: list[tuple[Any, ...]], cap: int
) -> None:
    memory_id = f"list{abs(hash((tuple(actions), cap))) % 10**9}"
    pg_store.ensure_memory(memory_id)
    try:
        for step, action in enumerate(actions):
            apply(pg_store, memory_id, action, step)
        every = pg_store.list_fragments(memory_id, status="active")
        names = {s.name for s in SPECS}
        with (
            patch.object(V, "MAX_LIST_ITEMS", cap),
            patch.object(_inference, "MAX_LIST_ITEMS", cap),
            patch.object(_inference, "_FEW", 0),
        ):
            for now in (NOW - 2 * DAY, NOW):
                want = {k: v for k, v in infer_variables(SPECS, every, now_ms=now).items() if k in names}
                assert infer_from_store(pg_store, memory_id, SPECS, now_ms=now) == want
    finally:
        pg_store.delete_memory(memory_id)
