"""One entry point from a vendor name and flat options to a payload (used by ConvMemory and the CLI).

Options common to every vendor: ``persona``, ``query``, ``recent_turns``, ``budget_tokens``,
``language``, ``max_fragments``. Vendor options:

- ``trtc`` (whole ``StartAIConversation`` body): ``sdk_app_id``, ``room_id``, ``room_id_type``,
  ``agent_config``, ``tts_config``, ``stt_config``, ``session_id``, plus the ``trtc-llmconfig``
  options.
- ``trtc-llmconfig`` (the ``LLMConfig`` JSON string): ``recent_placement``
  (``user_messages`` | ``system_prompt``), ``history``, ``history_mode``, ``llm`` (passthrough:
  ``LLMType``, ``Model``, ``APIKey``, ``APIUrl``, ``Streaming``, ``Timeout``, ``MetaInfo`` ...).
- ``agora`` (join body): ``name``, ``properties``, ``preset``, ``pipeline_id``, plus ``agora-llm``.
- ``agora-llm`` (``properties.llm``): ``vendor``, ``params``, ``max_history``, ``llm`` (passthrough:
  ``url``, ``api_key``, ``style``, ``greeting_message``, ``failure_message`` ...).
- ``agora-update``: the ``agora-llm`` options (``params`` required) and ``token``.
- ``agora-custom`` / ``agora-standard``: messages an LLM endpoint behind Agora receives, with or
  without the extended fields.
- ``openai`` / ``langchain``: system message (persona + memory block) and recent turns.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from convmem_graph.errors import describe_validation_error
from convmem_graph.models import MemorySnapshot
from convmem_graph.payloads.agora import (
    AgoraOptions,
    build_custom_llm_messages,
    build_join_body,
    build_join_llm,
    build_update_body,
)
from convmem_graph.payloads.memory_block import MemoryBlockOptions
from convmem_graph.payloads.openai import build_langchain_messages, build_openai_messages
from convmem_graph.payloads.trtc import (
    MAX_RECENT_TURNS,
    TRTCOptions,
    build_llm_config,
    build_start_ai_conversation,
)
from convmem_graph.tokens import TokenCounter, count_tokens

if TYPE_CHECKING:
    from langchain_core.embeddings import Embeddings

__all__ = ["FACTS_BY_MEANING", "VENDORS", "block_options", "render_payload", "sent_turns"]

_COMMON = {"persona", "query", "recent_turns", "budget_tokens", "language", "max_fragments"}
_TRTC_LLM = _COMMON | {"recent_placement", "history", "history_mode", "llm"}
#: Options of the whole StartAIConversation body beyond LLMConfig.
_TRTC_BODY_ONLY = (
    "sdk_app_id",
    "room_id",
    "room_id_type",
    "agent_config",
    "tts_config",
    "stt_config",
    "session_id",
)
_TRTC_BODY = _TRTC_LLM | set(_TRTC_BODY_ONLY)
_AGORA_LLM = _COMMON | {"vendor", "params", "max_history", "llm"}

#: Vendor name -> options it accepts.
VENDORS: dict[str, frozenset[str]] = {
    "trtc": frozenset(_TRTC_BODY),
    "trtc-llmconfig": frozenset(_TRTC_LLM),
    "agora": frozenset(_AGORA_LLM | {"name", "properties", "preset", "pipeline_id"}),
    "agora-llm": frozenset(_AGORA_LLM),
    "agora-update": frozenset(_AGORA_LLM | {"token"}),
    "agora-custom": frozenset(_AGORA_LLM),
    "agora-standard": frozenset(_AGORA_LLM),
    "openai": frozenset(_COMMON),
    "langchain": frozenset(_COMMON),
}

#: Vendor name -> the options any vendor of its family (``agora``, ``agora-update``, ...) accepts.
_FAMILY_OPTIONS: dict[str, frozenset[str]] = {
    vendor: frozenset().union(*(keys for name, keys in VENDORS.items() if name.split("-")[0] == family))
    for vendor in VENDORS
    for family in [vendor.split("-")[0]]
}

#: Vendors whose block ranks facts by meaning when the call start has a model (the others by words).
FACTS_BY_MEANING = frozenset({"openai", "langchain"})


def _block(options: Mapping[str, Any], now_ms: int | None, *, sent_turns: int) -> MemoryBlockOptions:
    values: dict[str, Any] = {"now_ms": now_ms}
    for key in ("query", "language", "max_fragments"):
        if options.get(key) is not None:
            values[key] = options[key]
    if options.get("budget_tokens") is not None:
        values["budget_tokens"] = options["budget_tokens"]
    # Turns the payload carries as recent turns are not quoted in the block again; turns it does
    # not carry stay quotable.
    values["skip_recent_turns"] = sent_turns
    return MemoryBlockOptions(**values)


def sent_turns(vendor: str, options: Mapping[str, Any]) -> int:
    """How many of the newest turns the ``vendor`` payload itself carries to the model."""
    recent = options.get("recent_turns", 10)
    recent = recent if isinstance(recent, int) and not isinstance(recent, bool) and recent > 0 else 0
    if vendor in ("agora", "agora-llm"):
        return 0  # a join sends no turns: the agent starts with an empty history
    if vendor.startswith("trtc"):
        return min(recent, MAX_RECENT_TURNS)
    # openai, langchain and the Agora custom-LLM messages send them; an Agora update reaches an
    # agent whose own history already holds the session's latest turns.
    return recent


def _vendor_options(vendor: str, opts: Mapping[str, Any]) -> dict[str, Any]:
    """The options ``vendor`` reads; an unknown vendor or option is an error."""
    if vendor not in VENDORS:
        raise ValueError(f"unknown vendor {vendor!r}; choose one of {', '.join(VENDORS)}")
    # Options of a sibling vendor (one options file for Agora join and update) are ignored.
    accepted_any = _FAMILY_OPTIONS[vendor]
    unknown = sorted(set(opts) - accepted_any)
    if unknown:
        accepted = ", ".join(sorted(accepted_any))
        raise ValueError(f"{vendor}: unknown option(s) {', '.join(unknown)}; accepted: {accepted}")
    return {k: v for k, v in opts.items() if k in VENDORS[vendor]}


def block_options(vendor: str, options: Mapping[str, Any], now_ms: int | None) -> MemoryBlockOptions:
    """The memory block options :func:`render_payload` builds the ``vendor`` payload's block with.

    Raises:
        ValueError: Unknown vendor or option.
        pydantic.ValidationError: An option the block rejects.
    """
    opts = _vendor_options(vendor, options)
    return _block(opts, now_ms, sent_turns=sent_turns(vendor, opts))


def _mapping(options: Mapping[str, Any], key: str) -> dict[str, Any]:
    value = options.get(key) or {}
    if not isinstance(value, Mapping):
        raise ValueError(f"option {key} must be a JSON object, got {type(value).__name__}")
    return dict(value)


def _int(options: Mapping[str, Any], key: str, default: int) -> int:
    value = options.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"option {key} must be an integer, got {type(value).__name__}")
    return value


def _pick(options: Mapping[str, Any], keys: tuple[str, ...]) -> dict[str, Any]:
    return {k: options[k] for k in keys if options.get(k) is not None}


def render_payload(
    vendor: str,
    snapshot: MemorySnapshot,
    options: Mapping[str, Any] | None = None,
    *,
    counter: TokenCounter = count_tokens,
    now_ms: int | None = None,
    embeddings: Embeddings | None = None,
) -> Any:
    """Build the ``vendor`` payload for ``snapshot``.

    Args:
        vendor: One of :data:`VENDORS`.
        snapshot: The memory (usually the cached call-start snapshot).
        options: Flat options (see the module docstring).
        counter: Token counter for the memory block budget.
        now_ms: Current time; expired transient facts are left out.
        embeddings: The memory's model: the block's facts are ranked by meaning too (fused with
            their words, :mod:`convmem_graph.payloads.fusion`). Read by the ``openai`` and
            ``langchain`` vendors only so far; the TRTC and Agora blocks rank facts by words.

    Raises:
        ValueError: Unknown vendor or option, or an option the vendor's builder rejects (the
            message names the vendor field).

    Example:
        >>> render_payload("openai", MemorySnapshot(memory_id="m"), {"persona": "You are Rain."})
        [{'role': 'system', 'content': 'You are Rain.'}]
    """
    try:
        return _render(vendor, snapshot, dict(options or {}), counter, now_ms, embeddings)
    except ValidationError as exc:
        # Field paths only: pydantic's own text echoes the input, API keys included.
        raise ValueError(f"{vendor}: invalid options: {describe_validation_error(exc)}") from None


def _render(
    vendor: str,
    snapshot: MemorySnapshot,
    opts: dict[str, Any],
    counter: TokenCounter,
    now_ms: int | None,
    embeddings: Embeddings | None,
) -> Any:
    opts = _vendor_options(vendor, opts)
    block = _block(opts, now_ms, sent_turns=sent_turns(vendor, opts))
    persona = str(opts.get("persona") or "")
    if vendor in FACTS_BY_MEANING:
        build = build_openai_messages if vendor == "openai" else build_langchain_messages
        return build(
            snapshot,
            persona=persona,
            recent_turns=_int(opts, "recent_turns", 10),
            block=block,
            counter=counter,
            embeddings=embeddings,
        )
    if vendor.startswith("trtc"):
        trtc = TRTCOptions(
            persona=persona,
            block=block,
            **_pick(opts, ("recent_turns", "recent_placement", "history", "history_mode", "llm")),
        )
        if vendor == "trtc-llmconfig":
            return build_llm_config(snapshot, trtc, counter=counter)
        missing = [k for k in ("sdk_app_id", "room_id", "agent_config", "tts_config") if k not in opts]
        if missing:
            raise ValueError(
                f"trtc: StartAIConversation needs {', '.join(missing)} (SdkAppId, RoomId, AgentConfig, "
                "TTSConfig); pass them as options or use vendor 'trtc-llmconfig' for LLMConfig alone"
            )
        return build_start_ai_conversation(
            snapshot,
            trtc,
            counter=counter,
            **_pick(opts, _TRTC_BODY_ONLY),
        )
    agora = AgoraOptions(
        persona=persona,
        block=block,
        **_pick(opts, ("vendor", "params", "max_history", "recent_turns", "llm")),
    )
    if vendor == "agora":
        return build_join_body(
            snapshot,
            agora,
            name=str(opts.get("name") or f"convmem-{snapshot.memory_id}"),
            properties=_mapping(opts, "properties"),
            counter=counter,
            **_pick(opts, ("preset", "pipeline_id")),
        )
    if vendor == "agora-llm":
        return build_join_llm(snapshot, agora, counter=counter)
    if vendor == "agora-update":
        return build_update_body(snapshot, agora, counter=counter, **_pick(opts, ("token",)))
    return build_custom_llm_messages(snapshot, agora, extended=vendor == "agora-custom", counter=counter)
