"""Synthetic history shared by the call-start and live-turn benchmarks (one definition of it)."""

from __future__ import annotations

from convmem_graph.models import Message
from convmem_graph.store import MemoryStore

TOPICS = ["芒果", "跑步", "西湖", "猫", "成都", "咖啡", "coffee", "hiking", "guitar", "sushi"]
BASE_MS = 1_767_000_000_000


def add_messages(store: MemoryStore, memory_id: str, messages: int, *, base_ms: int = BASE_MS) -> None:
    """Store ``messages`` alternating user/assistant turns, one topic word each, a second apart."""
    batch: list[Message] = []
    for i in range(messages):
        batch.append(
            Message(
                id=f"m{i}",
                role="user" if i % 2 == 0 else "assistant",
                content=f"第{i}条消息：我们聊了{TOPICS[i % len(TOPICS)]}，还有别的事情 {i}",
                channel="im",
                source="message",
                timestamp_ms=base_ms + i * 1000,
            )
        )
        if len(batch) == 5000:
            store.add_messages(memory_id, batch)
            batch = []
    if batch:
        store.add_messages(memory_id, batch)
