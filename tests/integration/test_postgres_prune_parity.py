"""Pruning a DeltaChannel thread: PostgreSQL refuses exactly when SQLite does."""

from __future__ import annotations

import uuid
from pathlib import Path

import psycopg
import pytest

from convmem_graph.checkpoints import postgres_checkpointer, prune_checkpoints, sqlite_checkpointer
from convmem_graph.store.urls import libpq_url
from tests.unit.checkpoints.test_checkpoints import build_counter_graph, cfg, checkpoint_ids

_DELTA_META = '{"counters_since_delta_snapshot": {"ids": 1}}'


def test_a_delta_channel_thread_with_nothing_to_prune_is_left_alone_on_both(
    pg_url: str, tmp_path: Path
) -> None:
    lite = sqlite_checkpointer(str(tmp_path / "ck.db"))
    build_counter_graph(lite).invoke({"fail": False}, cfg("t"))
    lite.conn.execute("UPDATE checkpoints SET metadata = ? WHERE thread_id = 't'", (_DELTA_META.encode(),))
    lite.conn.commit()
    kept = len(checkpoint_ids(lite, "t"))
    assert prune_checkpoints(lite, "t", keep=kept) == 0
    lite.conn.close()

    saver = postgres_checkpointer(pg_url)
    thread = f"delta-{uuid.uuid4().hex[:8]}"
    try:
        build_counter_graph(saver).invoke({"fail": False}, cfg(thread))
        with psycopg.connect(libpq_url(pg_url), autocommit=True) as conn:
            conn.execute(
                "UPDATE checkpoints SET metadata = %s::jsonb WHERE thread_id = %s", (_DELTA_META, thread)
            )
        kept = len(checkpoint_ids(saver, thread))
        assert prune_checkpoints(saver, thread, keep=kept) == 0  # nothing past keep: no refusal
        with pytest.raises(NotImplementedError, match="DeltaChannel"):
            prune_checkpoints(saver, thread, keep=kept - 1)
        assert len(checkpoint_ids(saver, thread)) == kept
    finally:
        saver.delete_thread(thread)
        saver.conn.close()  # type: ignore[union-attr]
