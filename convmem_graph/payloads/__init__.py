"""Inject side: pure functions from a :class:`~convmem_graph.models.MemorySnapshot` to vendor payloads.

- :mod:`~convmem_graph.payloads.memory_block`: the delimited, budgeted memory block.
- :mod:`~convmem_graph.payloads.relevance`: fragment ranking (lexical BM25, optional embeddings).
- :mod:`~convmem_graph.payloads.trtc`: TRTC ``LLMConfig`` string and ``StartAIConversation`` body.
- :mod:`~convmem_graph.payloads.agora`: Agora join/update bodies and custom-LLM messages.
- :mod:`~convmem_graph.payloads.openai`: OpenAI dict messages and LangChain messages.
"""

from __future__ import annotations

from convmem_graph.payloads._sanitize import INSTRUCTION_PATTERNS, redact_secrets
from convmem_graph.payloads.agora import (
    AgoraOptions,
    build_custom_llm_messages,
    build_join_body,
    build_join_llm,
    build_system_messages,
    build_update_body,
)
from convmem_graph.payloads.memory_block import (
    VARIABLE_LABELS,
    MemoryBlock,
    MemoryBlockOptions,
    PartBudgets,
    build_memory_block,
    detect_language,
    render_recent_turns,
    select_recent_turns,
)
from convmem_graph.payloads.openai import build_langchain_messages, build_openai_messages
from convmem_graph.payloads.relevance import rank_fragments
from convmem_graph.payloads.trtc import (
    MAX_RECENT_TURNS,
    TRTCOptions,
    build_llm_config,
    build_llm_config_dict,
    build_start_ai_conversation,
)

__all__ = [
    "INSTRUCTION_PATTERNS",
    "MAX_RECENT_TURNS",
    "VARIABLE_LABELS",
    "AgoraOptions",
    "MemoryBlock",
    "MemoryBlockOptions",
    "PartBudgets",
    "TRTCOptions",
    "build_custom_llm_messages",
    "build_join_body",
    "build_join_llm",
    "build_langchain_messages",
    "build_llm_config",
    "build_llm_config_dict",
    "build_memory_block",
    "build_openai_messages",
    "build_start_ai_conversation",
    "build_system_messages",
    "build_update_body",
    "detect_language",
    "rank_fragments",
    "redact_secrets",
    "render_recent_turns",
    "select_recent_turns",
]
