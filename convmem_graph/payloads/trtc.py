"""Tencent TRTC AI conversation payloads: the ``LLMConfig`` JSON string and a ``StartAIConversation`` body.

``LLMConfig.SystemPrompt`` = persona + the memory block. Recent turns go, per
``TRTCOptions.recent_placement``:

- ``"user_messages"`` (default, our reference design): ``LLMConfig.UserMessages`` =
  ``[{"Role": "user"|"assistant", "Content": ...}]``, the last N turns oldest first. This field is
  **not** in TRTC's published LLMConfig field list (spec 3.4); verify on a live account.
- ``"system_prompt"``: a delimited ``<recent_turns>`` data block appended to ``SystemPrompt``;
  no ``UserMessages`` key is sent. Use it when the account rejects or ignores ``UserMessages``.

``LLMConfig`` and ``TTSConfig`` are JSON *strings* inside the JSON body (double encoding),
written with ``ensure_ascii=False``. Secrets in ``llm`` (``APIKey``) are passed through but are
masked in reprs and never logged.
"""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from convmem_graph.models import MemorySnapshot
from convmem_graph.payloads._sanitize import guard_turn, redact_secrets
from convmem_graph.payloads.memory_block import (
    MemoryBlockOptions,
    build_memory_block,
    render_recent_turns,
    select_recent_turns,
)
from convmem_graph.tokens import TokenCounter, count_tokens

if TYPE_CHECKING:
    from langchain_core.embeddings import Embeddings

__all__ = [
    "MAX_RECENT_TURNS",
    "TRTCOptions",
    "build_llm_config",
    "build_llm_config_dict",
    "build_start_ai_conversation",
]

logger = logging.getLogger(__name__)

#: Most recent turns sent to TRTC; larger settings are capped with a warning.
MAX_RECENT_TURNS = 30
# Keys of LLMConfig this module computes; setting them through ``llm`` would be silently lost.
_RESERVED_LLM_KEYS = {
    "SystemPrompt": "persona",
    "UserMessages": "recent_turns",
    "History": "history",
    "HistoryMode": "history_mode",
}
_AGENT_REQUIRED = ("UserId", "UserSig", "TargetUserId")


class TRTCOptions(BaseModel):
    """Settings of the TRTC payload.

    Attributes:
        persona: The bot's own instructions, first part of ``SystemPrompt``.
        recent_turns: Last N messages injected (values above 30 are capped to 30 with a warning).
        recent_placement: ``user_messages`` (``LLMConfig.UserMessages``) or ``system_prompt``
            (a ``<recent_turns>`` block in ``SystemPrompt``); see the module docstring.
        history: ``LLMConfig.History``, in-call rounds TRTC keeps as context, 0..50.
        history_mode: ``LLMConfig.HistoryMode`` (1 = only text whose audio was played), omitted if None.
        llm: Other LLMConfig keys passed through as given (``LLMType``, ``Model``, ``APIKey``,
            ``APIUrl``, ``Streaming``, ``Timeout``, ``MetaInfo`` ...).
        block: Memory block settings.
    """

    model_config = ConfigDict(extra="forbid")

    persona: str = ""
    recent_turns: int = Field(default=10, ge=0)
    recent_placement: Literal["user_messages", "system_prompt"] = "user_messages"
    history: int = Field(default=10, ge=0, le=50)
    history_mode: Literal[0, 1] | None = None
    llm: dict[str, Any] = Field(default_factory=dict)
    block: MemoryBlockOptions = Field(default_factory=MemoryBlockOptions)

    @field_validator("recent_turns")
    @classmethod
    def _cap_recent(cls, v: int) -> int:
        if v > MAX_RECENT_TURNS:
            logger.warning("TRTC recent_turns=%d is above the cap; using %d", v, MAX_RECENT_TURNS)
            return MAX_RECENT_TURNS
        return v

    @field_validator("llm")
    @classmethod
    def _no_reserved_keys(cls, v: dict[str, Any]) -> dict[str, Any]:
        for key, option in _RESERVED_LLM_KEYS.items():
            if key in v:
                raise ValueError(
                    f"LLMConfig.{key} is built by convmem_graph; set TRTCOptions.{option} instead"
                )
        return v

    def __repr_args__(self) -> Any:
        for name, value in super().__repr_args__():
            yield name, redact_secrets(value) if name == "llm" else value


def build_llm_config_dict(
    snapshot: MemorySnapshot,
    options: TRTCOptions,
    *,
    counter: TokenCounter = count_tokens,
    embeddings: Embeddings | None = None,
) -> dict[str, Any]:
    """Build ``LLMConfig`` as a dict (see :func:`build_llm_config` for the string TRTC expects).

    Args:
        snapshot: The memory to inject; only it is read.
        options: Persona, recent turns, history and passthrough LLM settings.
        counter: Token counter for the memory block budget.
        embeddings: Optional embeddings to rank fragments against ``options.block.query``.

    Returns:
        The passthrough ``llm`` keys plus ``SystemPrompt``, ``History``, ``HistoryMode`` (when set)
        and ``UserMessages`` (when placed there and non-empty).
    """
    block = build_memory_block(
        snapshot, options.block, counter=counter, embeddings=embeddings, list_all_dropped=False
    )
    parts = [options.persona, block.text]
    turns = select_recent_turns(snapshot.recent, options.recent_turns, memory_id=snapshot.memory_id)
    if options.recent_placement == "system_prompt" and turns:
        language = block.language if block.text else options.block.language
        parts.append(render_recent_turns(turns, n=len(turns), language=language))
    config: dict[str, Any] = dict(options.llm)
    config["SystemPrompt"] = "\n".join(p for p in parts if p.strip())
    config["History"] = options.history
    if options.history_mode is not None:
        config["HistoryMode"] = options.history_mode
    if options.recent_placement == "user_messages" and turns:
        # Instruction-like turns are flagged, others verbatim (see _sanitize.guard_turn).
        config["UserMessages"] = [{"Role": m.role, "Content": guard_turn(m.content)} for m in turns]
    logger.debug(
        "TRTC LLMConfig for %s: block %d tokens, %d turns in %s",
        snapshot.memory_id,
        block.tokens,
        len(turns),
        options.recent_placement,
    )
    return config


def build_llm_config(
    snapshot: MemorySnapshot,
    options: TRTCOptions,
    *,
    counter: TokenCounter = count_tokens,
    embeddings: Embeddings | None = None,
) -> str:
    """Build the ``LLMConfig`` JSON string of ``StartAIConversation`` / ``UpdateAIConversation``.

    Args:
        snapshot: The memory to inject; only it is read.
        options: Persona, recent turns, history and passthrough LLM settings.
        counter: Token counter for the memory block budget.
        embeddings: Optional embeddings to rank fragments against ``options.block.query``.

    Returns:
        ``json.dumps(config, ensure_ascii=False)``.

    Example:
        >>> from convmem_graph.models import MemorySnapshot
        >>> build_llm_config(MemorySnapshot(memory_id="m"), TRTCOptions(persona="你是小雨。"))
        '{"SystemPrompt": "你是小雨。", "History": 10}'
    """
    return json.dumps(
        build_llm_config_dict(snapshot, options, counter=counter, embeddings=embeddings), ensure_ascii=False
    )


def _json_object_string(value: dict[str, Any] | str, field: str) -> str:
    if isinstance(value, str):
        try:
            parsed = json.loads(value)
        except json.JSONDecodeError as exc:
            raise ValueError(f"StartAIConversation.{field} is not valid JSON: {exc.msg}") from None
        if not isinstance(parsed, dict):
            raise ValueError(
                f"StartAIConversation.{field} must be a JSON object, got {type(parsed).__name__}"
            )
        return value
    if isinstance(value, dict):
        return json.dumps(value, ensure_ascii=False)
    raise ValueError(
        f"StartAIConversation.{field} must be a dict or a JSON string, got {type(value).__name__}"
    )


def build_start_ai_conversation(
    snapshot: MemorySnapshot,
    options: TRTCOptions,
    *,
    sdk_app_id: int,
    room_id: str,
    room_id_type: int = 1,
    agent_config: dict[str, Any],
    tts_config: dict[str, Any] | str,
    stt_config: dict[str, Any] | None = None,
    session_id: str | None = None,
    counter: TokenCounter = count_tokens,
    embeddings: Embeddings | None = None,
) -> dict[str, Any]:
    """Build the whole JSON body of a TRTC ``StartAIConversation`` request.

    Args:
        snapshot: The memory to inject; only it is read.
        options: TRTC payload settings.
        sdk_app_id: ``SdkAppId`` of the room.
        room_id: ``RoomId`` (a string even for numeric rooms).
        room_id_type: ``RoomIdType``: 0 numeric, 1 string room id.
        agent_config: ``AgentConfig`` passed through; needs ``UserId``, ``UserSig``, ``TargetUserId``.
        tts_config: ``TTSConfig`` as a dict (encoded here) or an already encoded JSON string.
        stt_config: ``STTConfig`` passed through when given.
        session_id: ``SessionId`` when given.
        counter: Token counter for the memory block budget.
        embeddings: Optional embeddings to rank fragments against ``options.block.query``.

    Returns:
        The body dict with ``LLMConfig`` and ``TTSConfig`` as JSON strings.

    Raises:
        ValueError: Naming the ``StartAIConversation`` field that is missing or malformed.
    """
    if isinstance(sdk_app_id, bool) or not isinstance(sdk_app_id, int) or sdk_app_id <= 0:
        raise ValueError(
            f"StartAIConversation.SdkAppId must be a positive integer, got {type(sdk_app_id).__name__}"
        )
    if not isinstance(room_id, str) or not room_id:
        raise ValueError("StartAIConversation.RoomId must be a non-empty string")
    if room_id_type not in (0, 1):
        raise ValueError(f"StartAIConversation.RoomIdType must be 0 or 1, got {type(room_id_type).__name__}")
    if not isinstance(agent_config, dict):
        raise ValueError("StartAIConversation.AgentConfig must be an object")
    for key in _AGENT_REQUIRED:
        if not agent_config.get(key):
            raise ValueError(f"StartAIConversation.AgentConfig.{key} is required")
    if agent_config["UserId"] == agent_config["TargetUserId"]:
        raise ValueError("StartAIConversation.AgentConfig.UserId (the bot) must differ from TargetUserId")
    if stt_config is not None and not isinstance(stt_config, dict):
        raise ValueError("StartAIConversation.STTConfig must be an object")
    tts = _json_object_string(tts_config, "TTSConfig")

    body: dict[str, Any] = {"SdkAppId": sdk_app_id, "RoomId": room_id, "RoomIdType": room_id_type}
    if session_id is not None:
        body["SessionId"] = session_id
    body["AgentConfig"] = agent_config
    if stt_config is not None:
        body["STTConfig"] = stt_config
    body["LLMConfig"] = build_llm_config(snapshot, options, counter=counter, embeddings=embeddings)
    body["TTSConfig"] = tts
    return body
