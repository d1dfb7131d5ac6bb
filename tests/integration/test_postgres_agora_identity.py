"""Agora history + 103 copies merge on PostgreSQL as on SQLite, in either run order."""

from __future__ import annotations

import uuid

import pytest

from convmem_graph.memory import ConvMemory
from convmem_graph.state import RawInput
from tests.unit.sources.test_agora_identity import HISTORY, HOOK_103, REFERENCE, _timeline

pytestmark = [pytest.mark.integration, pytest.mark.postgres]


@pytest.mark.parametrize(
    "runs", [[[HOOK_103], [HISTORY]], [[HISTORY], [HOOK_103, HISTORY]], [[HISTORY, HOOK_103]]]
)
def test_copies_merge_in_any_run_order(pg_url: str, runs: list[list[dict[str, object]]]) -> None:
    memory_id = f"u_agora_{uuid.uuid4().hex[:8]}"
    mem = ConvMemory.open(pg_url)
    try:
        for run in runs:
            mem.ingest(memory_id, [RawInput(p, "agora") for p in run])
        assert _timeline(mem, memory_id) == REFERENCE
    finally:
        mem.delete(memory_id)
        mem.close()
