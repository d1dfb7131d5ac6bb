"""OpenAI chat messages and LangChain messages: one system message, then the recent turns.

Persona and memory block share a single system message (persona first, then the block), because
several chat model integrations reject or merge more than one system message; Agora, which
documents a list, gets them as two (see ``agora.py``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from convmem_graph.models import MemorySnapshot
from convmem_graph.payloads._sanitize import guard_turn
from convmem_graph.payloads.memory_block import MemoryBlockOptions, build_memory_block, select_recent_turns
from convmem_graph.tokens import TokenCounter, count_tokens

if TYPE_CHECKING:
    from langchain_core.embeddings import Embeddings
    from langchain_core.messages import BaseMessage

__all__ = ["build_langchain_messages", "build_openai_messages"]


def build_openai_messages(
    snapshot: MemorySnapshot,
    *,
    persona: str = "",
    recent_turns: int = 10,
    block: MemoryBlockOptions | None = None,
    counter: TokenCounter = count_tokens,
    embeddings: Embeddings | None = None,
) -> list[dict[str, Any]]:
    """Build OpenAI Chat Completions ``messages``: ``[system, *recent turns]``.

    Args:
        snapshot: The memory to inject; only it is read.
        persona: The assistant's instructions, placed before the memory block.
        recent_turns: Last N non-empty messages, oldest first (``0``: none).
        block: Memory block settings.
        counter: Token counter for the memory block budget.
        embeddings: Optional embeddings to rank fragments against ``block.query``.

    Returns:
        Dicts with ``role`` and ``content``; the system message is omitted when persona and memory
        are both empty.

    Raises:
        ValueError: If ``recent_turns`` is negative.

    Example:
        >>> from convmem_graph.models import MemorySnapshot
        >>> build_openai_messages(MemorySnapshot(memory_id="m"), persona="You are Rain.")
        [{'role': 'system', 'content': 'You are Rain.'}]
    """
    memory = build_memory_block(
        snapshot, block, counter=counter, embeddings=embeddings, list_all_dropped=False
    )
    system = "\n".join(p for p in (persona, memory.text) if p.strip())
    messages: list[dict[str, Any]] = [{"role": "system", "content": system}] if system else []
    turns = select_recent_turns(snapshot.recent, recent_turns, memory_id=snapshot.memory_id)
    # Instruction-like turns are flagged, others verbatim (see _sanitize.guard_turn).
    messages.extend({"role": m.role, "content": guard_turn(m.content)} for m in turns)
    return messages


def build_langchain_messages(
    snapshot: MemorySnapshot,
    *,
    persona: str = "",
    recent_turns: int = 10,
    block: MemoryBlockOptions | None = None,
    counter: TokenCounter = count_tokens,
    embeddings: Embeddings | None = None,
) -> list[BaseMessage]:
    """Build the same messages as :func:`build_openai_messages` as LangChain messages.

    Turn messages carry the convmem message id as ``id``, so they can be matched against an
    agent's own history.

    Args:
        snapshot: The memory to inject; only it is read.
        persona: The assistant's instructions, placed before the memory block.
        recent_turns: Last N non-empty messages, oldest first (``0``: none).
        block: Memory block settings.
        counter: Token counter for the memory block budget.
        embeddings: Optional embeddings to rank fragments against ``block.query``.

    Returns:
        ``[SystemMessage, HumanMessage | AIMessage, ...]``.
    """
    dicts = build_openai_messages(
        snapshot, persona=persona, recent_turns=0, block=block, counter=counter, embeddings=embeddings
    )
    turns = select_recent_turns(snapshot.recent, recent_turns, memory_id=snapshot.memory_id)
    dicts.extend({"role": m.role, "content": guard_turn(m.content), "id": m.id} for m in turns)
    # Imported here: a call start that only needs dicts must not load LangChain Core.
    from langchain_core.messages import convert_to_messages

    return convert_to_messages(dicts)
