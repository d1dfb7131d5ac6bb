"""One memory of every kind of row the store's driver paths read and write (SQLite and PostgreSQL tests).

Variables with a manual value, a summary, a voice turn with a round, an interruption and JSON
metadata, and facts of several families (durable and temporary) stated through the lifecycle.
"""

from __future__ import annotations

from convmem_graph.models import Message, VariableSpec
from convmem_graph.runner import Lifecycle
from convmem_graph.state import RawInput
from convmem_graph.store import MemoryStore

T0 = 1_767_268_800_000


def fill_memory(store: MemoryStore) -> None:
    """Store memory ``m1`` (and an empty ``m2``) as the module docstring says."""
    store.define_variables(
        "m1",
        [
            VariableSpec(name="city", description="where", infer=False, allowed_values=["北京", "上海"]),
            VariableSpec(name="hobbies", type="list"),
            VariableSpec(name="age", type="integer", allowed_values=None),
        ],
    )
    store.set_manual_variable("m1", "city", "北京")
    store.set_manual_variable("m1", "hobbies", ["围棋", "chess"])
    store.commit_summary(
        "m1", "用户画像：北京。", tokens=7, covers_until_ms=T0, upto_seq=0, now_ms=T0, origin="extractive"
    )
    store.add_messages(
        "m1",
        [
            Message(
                id="u1", role="user", content="我住在北京。", channel="voice", source="asr", timestamp_ms=T0
            ),
            Message(
                id="a1",
                role="assistant",
                content="好的。",
                channel="voice",
                source="llm",
                timestamp_ms=T0 + 1,
                turn_id=4,
                round_id="r1",
                interrupted=True,
                original="好的，我记住了",
                metadata={"k": [1, "二"]},
            ),
        ],
    )
    store.ensure_memory("m2")
    # Facts of several families (durable, temporary), stated through the lifecycle.
    turns = [
        "I'm allergic to mango.",
        "我喜欢围棋。",
        "I love hiking and jazz.",
        "我明天要去上海出差。",
        "My dog is Rex.",
    ]
    Lifecycle(store, clock=lambda: T0).run("m1", [RawInput([{"role": "user", "content": t} for t in turns])])
