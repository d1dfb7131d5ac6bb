"""A run's new message ids are in its output, never in its checkpoint (issue 24, disk per message).

A replay batch stores ~1k messages per run; their ids (24 B each) were 24 of the end-state
checkpoint's 28 KB, kept for each of a memory's last ``keep_checkpoints`` runs, where only their
count was ever read back (``RunResult.new_messages``, the viewer's lifecycle page). The state now
checkpoints the count (``new_messages``) and carries the ids as an untracked channel.
"""

from __future__ import annotations

import sqlite3
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langgraph.checkpoint.sqlite import SqliteSaver

from convmem_graph.checkpoints.namespace import thread_id_for
from convmem_graph.config import MemoryConfig
from convmem_graph.memory import ConvMemory
from convmem_graph.runner import Lifecycle
from convmem_graph.state import MemoryContext, RawInput
from convmem_graph.store import MemoryStore
from convmem_graph.viewer.lifecycle import last_run

#: Messages are drawn from a pool of this size: a batch may repeat one sent before.
_POOL = 400


def _message(k: int) -> dict[str, object]:
    return {
        "id": f"m{k}",
        "role": "user" if k % 2 else "assistant",
        "content": f"line {k}: I walked {k} km today",
        "timestamp": 1_767_000_000_000 + k * 1000,
    }


def _checkpoint_bytes(db: Path, memory_id: str) -> list[int]:
    with sqlite3.connect(db) as conn:
        query = "SELECT length(checkpoint) FROM checkpoints WHERE thread_id = ?"
        return [int(r[0]) for r in conn.execute(query, (thread_id_for(memory_id),))]


# Batches drawn from one pool, so later batches repeat earlier messages in any order and mix.
batches = st.lists(
    st.lists(st.integers(min_value=0, max_value=_POOL - 1), min_size=0, max_size=300), min_size=1, max_size=4
)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batches)
def test_each_run_counts_and_outputs_its_new_ids_and_checkpoints_neither_list(runs: list[list[int]]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "mem.db"
        store = MemoryStore.from_url(str(db))
        saver = SqliteSaver(sqlite3.connect(db, check_same_thread=False))
        lc = Lifecycle(store, saver, config=MemoryConfig(), durability="exit")
        try:
            for n, picks in enumerate(runs):
                before, count = store.max_seq("u"), store.count_messages("u")
                inputs = (RawInput([_message(k) for k in picks], source="openai"),)
                if n % 2 == 0:
                    result = lc.run("u", inputs)
                    stored = [mid for _, mid in store.message_ids_after("u", before, limit=2 * _POOL)]
                    assert result.new_messages == len(stored)
                else:
                    # As a LangGraph user runs the graph (Studio, a custom graph): the end state
                    # returned holds every id the run stored, in store order.
                    ctx = MemoryContext(store=store, config=lc.config, inputs=inputs)
                    out = lc.graph.invoke(
                        {"memory_id": "u"},
                        {"configurable": {"thread_id": thread_id_for("u")}},
                        context=ctx,
                        durability="exit",
                    )
                    stored = [mid for _, mid in store.message_ids_after("u", before, limit=2 * _POOL)]
                    assert out["new_message_ids"] == stored and out["new_messages"] == len(stored)
                state = lc.graph.get_state({"configurable": {"thread_id": thread_id_for("u")}}).values
                assert state["new_messages"] == store.count_messages("u") - count == len(stored)
                assert "new_message_ids" not in state
                # The checkpoint does not grow with the batch: 300 ids alone would be ~7 KB.
                assert max(_checkpoint_bytes(db, "u")) < 4096
        finally:
            store.close()


def test_the_viewer_shows_the_count_of_a_new_and_of_an_older_checkpoint(tmp_path: Path) -> None:
    with ConvMemory.open(str(tmp_path / "v.db")) as mem:
        mem.ingest("u", [_message(k) for k in range(5)], source="openai")
        assert last_run(mem, "u")["state"]["new_messages"] == 5
        # A checkpoint written before this change kept the ids and no count.
        config = {"configurable": {"thread_id": thread_id_for("u")}}
        saver = mem.checkpointer
        assert saver is not None
        older = saver.get_tuple(config)
        assert older is not None
        values = dict(older.checkpoint["channel_values"])
        values.pop("new_messages", None)
        values["new_message_ids"] = ["a", "b", "c"]
        checkpoint = {**older.checkpoint, "channel_values": values}
        saver.put(older.config, checkpoint, older.metadata, {})  # type: ignore[arg-type]
        assert last_run(mem, "u")["state"]["new_messages"] == 3
