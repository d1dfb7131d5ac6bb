"""Agora Conversational AI payloads: ``properties.llm`` for join, the update body, custom-LLM messages.

The memory goes into ``llm.system_messages`` as two system messages, the persona and the memory
block (either is omitted when empty). The runtime update endpoint overwrites ``params`` as a whole,
so :func:`build_update_body` requires them. For an LLM endpoint behind ``vendor: "custom"`` the
messages keep Agora's extended fields (``turn_id``, ``timestamp``, ``metadata``); for other vendors
only ``role`` and ``content`` (spec 1.10). Secrets in ``llm`` (``api_key``, ``headers``) are passed
through but are masked in reprs and never logged.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from convmem_graph.models import MemorySnapshot, Message
from convmem_graph.payloads._sanitize import guard_turn, redact_secrets
from convmem_graph.payloads.memory_block import MemoryBlockOptions, build_memory_block, select_recent_turns
from convmem_graph.tokens import TokenCounter, count_tokens

if TYPE_CHECKING:
    from langchain_core.embeddings import Embeddings

__all__ = [
    "AgoraOptions",
    "build_custom_llm_messages",
    "build_join_body",
    "build_join_llm",
    "build_system_messages",
    "build_update_body",
]

logger = logging.getLogger(__name__)

_RESERVED_LLM_KEYS = {
    "system_messages": "persona",
    "params": "params",
    "vendor": "vendor",
    "max_history": "max_history",
}
_JOIN_REQUIRED = ("channel", "token", "agent_rtc_uid", "remote_rtc_uids")


class AgoraOptions(BaseModel):
    """Settings of the Agora payloads.

    Attributes:
        persona: The agent's own instructions, the first system message.
        vendor: ``llm.vendor`` (``custom``, ``openai``, ``azure``, ``xai``); omitted when None.
        params: ``llm.params`` (``model``, ``max_tokens`` ...); required for the update body, where
            it replaces the join-time object as a whole.
        max_history: ``llm.max_history`` (1..1024), omitted when None.
        recent_turns: Turns included by :func:`build_custom_llm_messages`.
        llm: Other ``properties.llm`` keys passed through as given (``url``, ``api_key``, ``style``,
            ``greeting_message``, ``failure_message``, ``template_variables``, ``headers`` ...).
        block: Memory block settings.
    """

    model_config = ConfigDict(extra="forbid")

    persona: str = ""
    vendor: str | None = "custom"
    params: dict[str, Any] | None = None
    max_history: int | None = Field(default=None, ge=1, le=1024)
    recent_turns: int = Field(default=10, ge=0, le=1024)
    llm: dict[str, Any] = Field(default_factory=dict)
    block: MemoryBlockOptions = Field(default_factory=MemoryBlockOptions)

    @field_validator("llm")
    @classmethod
    def _no_reserved_keys(cls, v: dict[str, Any]) -> dict[str, Any]:
        for key, option in _RESERVED_LLM_KEYS.items():
            if key in v:
                raise ValueError(f"properties.llm.{key} is built by convmem_graph; set AgoraOptions.{option}")
        return v

    def __repr_args__(self) -> Any:
        for name, value in super().__repr_args__():
            yield name, redact_secrets(value) if name in ("llm", "params") else value


def build_system_messages(
    snapshot: MemorySnapshot,
    options: AgoraOptions,
    *,
    counter: TokenCounter = count_tokens,
    embeddings: Embeddings | None = None,
) -> list[dict[str, Any]]:
    """Return ``[persona system message, memory block system message]``, omitting empty ones.

    Args:
        snapshot: The memory to inject; only it is read.
        options: Persona and block settings.
        counter: Token counter for the memory block budget.
        embeddings: Optional embeddings to rank fragments against ``options.block.query``.

    Example:
        >>> from convmem_graph.models import MemorySnapshot
        >>> build_system_messages(MemorySnapshot(memory_id="m"), AgoraOptions(persona="你是小雨。"))
        [{'role': 'system', 'content': '你是小雨。'}]
    """
    block = build_memory_block(
        snapshot, options.block, counter=counter, embeddings=embeddings, list_all_dropped=False
    )
    return [{"role": "system", "content": text} for text in (options.persona, block.text) if text.strip()]


def build_join_llm(
    snapshot: MemorySnapshot,
    options: AgoraOptions,
    *,
    counter: TokenCounter = count_tokens,
    embeddings: Embeddings | None = None,
) -> dict[str, Any]:
    """Build ``properties.llm`` of an Agora ``POST /join`` body.

    Args:
        snapshot: The memory to inject; only it is read.
        options: Agora settings; ``llm["url"]`` is required.
        counter: Token counter for the memory block budget.
        embeddings: Optional embeddings to rank fragments against ``options.block.query``.

    Returns:
        The passthrough ``llm`` keys plus ``vendor``, ``max_history``, ``params`` (when set) and
        ``system_messages``.

    Raises:
        ValueError: If ``properties.llm.url`` is missing.
    """
    if not options.llm.get("url"):
        raise ValueError("agora join: properties.llm.url is required (set AgoraOptions.llm['url'])")
    llm: dict[str, Any] = dict(options.llm)
    if options.vendor is not None:
        llm["vendor"] = options.vendor
    if options.max_history is not None:
        llm["max_history"] = options.max_history
    if options.params is not None:
        llm["params"] = options.params
    llm["system_messages"] = build_system_messages(snapshot, options, counter=counter, embeddings=embeddings)
    return llm


def build_join_body(
    snapshot: MemorySnapshot,
    options: AgoraOptions,
    *,
    name: str,
    properties: dict[str, Any],
    preset: str | None = None,
    pipeline_id: str | None = None,
    counter: TokenCounter = count_tokens,
    embeddings: Embeddings | None = None,
) -> dict[str, Any]:
    """Build the whole body of an Agora ``POST /join`` with ``properties.llm`` filled in.

    Args:
        snapshot: The memory to inject; only it is read.
        options: Agora settings.
        name: Agent name (unique per project; must not be reused).
        properties: The other ``properties`` (``channel``, ``token``, ``agent_rtc_uid``,
            ``remote_rtc_uids``, ``asr``, ``tts``, ``labels`` ...), copied, not modified.
        preset: Optional ``preset`` (comma-separated preset names).
        pipeline_id: Optional ``pipeline_id``.
        counter: Token counter for the memory block budget.
        embeddings: Optional embeddings to rank fragments against ``options.block.query``.

    Raises:
        ValueError: Naming the missing or conflicting join field.
    """
    if not isinstance(name, str) or not name:
        raise ValueError("agora join: name must be a non-empty string")
    if not isinstance(properties, dict):
        raise ValueError("agora join: properties must be an object")
    for key in _JOIN_REQUIRED:
        if key not in properties:
            raise ValueError(f"agora join: properties.{key} is required")
    if "llm" in properties:
        raise ValueError(
            "agora join: properties.llm is built from AgoraOptions; pass its settings in AgoraOptions.llm"
        )
    body: dict[str, Any] = {"name": name}
    if preset is not None:
        body["preset"] = preset
    if pipeline_id is not None:
        body["pipeline_id"] = pipeline_id
    body["properties"] = {
        **properties,
        "llm": build_join_llm(snapshot, options, counter=counter, embeddings=embeddings),
    }
    return body


def build_update_body(
    snapshot: MemorySnapshot,
    options: AgoraOptions,
    *,
    token: str | None = None,
    counter: TokenCounter = count_tokens,
    embeddings: Embeddings | None = None,
) -> dict[str, Any]:
    """Build the body of ``POST /agents/{agentId}/update`` that refreshes the memory mid-session.

    Always sends the complete ``system_messages`` list and the complete ``params`` object, since
    the update replaces ``params`` as a whole.

    Args:
        snapshot: The memory to inject; only it is read.
        options: Agora settings; ``params`` is required.
        token: A new RTC token (the answer to event 104), sent as ``properties.token`` when given.
        counter: Token counter for the memory block budget.
        embeddings: Optional embeddings to rank fragments against ``options.block.query``.

    Raises:
        ValueError: If ``params`` is not set.
    """
    if options.params is None:
        raise ValueError(
            "agora update: properties.llm.params is required because the update overwrites the "
            "join-time params; set AgoraOptions.params to the complete object"
        )
    properties: dict[str, Any] = {}
    if token is not None:
        properties["token"] = token
    properties["llm"] = {
        "system_messages": build_system_messages(snapshot, options, counter=counter, embeddings=embeddings),
        "params": options.params,
    }
    return {"properties": properties}


def _extended(msg: Message) -> dict[str, Any]:
    item: dict[str, Any] = {"role": msg.role, "content": guard_turn(msg.content)}
    if msg.turn_id is not None:
        item["turn_id"] = msg.turn_id
    item["timestamp"] = msg.timestamp_ms
    metadata: dict[str, Any] = {"source": msg.source}
    if msg.role == "user" and msg.speaker_id:
        metadata["user"] = msg.speaker_id
    if msg.interrupted:
        metadata["interrupted"] = True
        # sources/agora.py keeps it as ``interrupt_timestamp_ms``; accept the vendor spelling too.
        for key in ("interrupt_timestamp_ms", "interrupt_timestamp"):
            value = msg.metadata.get(key)
            if isinstance(value, int) and not isinstance(value, bool):
                metadata["interrupt_timestamp"] = value
                break
        if msg.original is not None:
            metadata["original"] = msg.original
    item["metadata"] = metadata
    return item


def build_custom_llm_messages(
    snapshot: MemorySnapshot,
    options: AgoraOptions,
    *,
    extended: bool = True,
    counter: TokenCounter = count_tokens,
    embeddings: Embeddings | None = None,
) -> list[dict[str, Any]]:
    """Build the ``messages`` an LLM endpoint behind Agora receives: system messages then recent turns.

    Useful for a custom-LLM proxy that rebuilds the request, and to test what the model will see.

    Args:
        snapshot: The memory to inject; only it is read.
        options: Agora settings (``recent_turns`` turns are included).
        extended: ``True`` for ``vendor: "custom"``: turns keep ``turn_id``, ``timestamp`` (ms) and
            ``metadata`` (``source``, ``user``, ``interrupted``, ``interrupt_timestamp``,
            ``original``); ``False``: only ``role`` and ``content``. Interrupted assistant turns
            carry the spoken ``content`` either way.
        counter: Token counter for the memory block budget.
        embeddings: Optional embeddings to rank fragments against ``options.block.query``.
    """
    messages = build_system_messages(snapshot, options, counter=counter, embeddings=embeddings)
    turns = select_recent_turns(snapshot.recent, options.recent_turns, memory_id=snapshot.memory_id)
    if extended:
        messages.extend(_extended(m) for m in turns)
    else:
        # Instruction-like turns are flagged, others verbatim (see _sanitize.guard_turn).
        messages.extend({"role": m.role, "content": guard_turn(m.content)} for m in turns)
    return messages
