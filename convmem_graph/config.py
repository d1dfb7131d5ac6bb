"""MemoryConfig: budgets, retention, bot ids and model settings for one deployment."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["MemoryConfig"]


class MemoryConfig(BaseModel):
    """Settings shared by the lifecycle nodes, the payload builders and the CLI.

    Example:
        >>> cfg = MemoryConfig(bot_ids=["ai_xiaoyu_bot"], summary_budget_tokens=200)
        >>> cfg.recent_turns
        10
    """

    model_config = ConfigDict(extra="forbid")

    bot_ids: list[str] = Field(
        default_factory=list,
        description="Accounts whose messages are the assistant's (IM '@RBT#' accounts always are).",
    )
    non_text_elements: Literal["placeholder", "skip"] = Field(
        default="placeholder",
        description="IM image/face/sound/... elements: a short placeholder like '[image]', or skipped.",
    )
    dedupe_window_ms: int = Field(
        default=10_000,
        ge=0,
        description="Same speaker + same text within this window from two channels is one message.",
    )
    summary_budget_tokens: int = Field(default=300, ge=20)
    summary_threshold_tokens: int = Field(
        default=200, ge=0, description="New transcript tokens since the last summary that trigger a refresh."
    )
    memory_block_budget_tokens: int = Field(
        default=300, ge=40, description="Token budget of the memory block when a payload names none."
    )
    episodic: bool = Field(
        default=True,
        description="Keep every stored turn searchable (the episodic index) and quote the turns that "
        "match the current query in the memory block. False keeps and injects facts only.",
    )
    recent_turns: int = Field(default=10, ge=0, le=30)
    snapshot_max_fragments: int = Field(
        default=200,
        ge=1,
        description="Strongest active fragments cached for call start (relevance ranks among these).",
    )
    transient_ttl_days: int = Field(default=7, ge=1)
    keep_checkpoints: int = Field(default=3, ge=1, description="Checkpoints kept per memory after pruning.")
    purge_summarized_messages: bool = Field(
        default=False,
        description="Retention: at the end of each run delete the raw messages (and their index rows) "
        "that are both extracted and summarized, keeping the newest recent_turns while a session is "
        "open and none once it ended (session_ended=True). A late copy of a purged message is not "
        "stored again. With episodic=False this keeps facts, variables and the summary only.",
    )
    extraction_batch_messages: int = Field(default=200, ge=1)
    extract_after_user_messages: int = Field(
        default=10,
        ge=1,
        description="A model extractor (one whose ``buffers_turns`` is true, like the LLM extractor) "
        "waits until this many user messages are unextracted, the session ended, or the "
        "conversation was idle for extract_idle_seconds when a run comes (ingest with no payload, "
        "or session_ended=True, to flush); then it extracts them in one call. The turns are stored "
        "meanwhile (the extraction cursor says what is pending), so a crash loses nothing.",
    )
    extract_idle_seconds: float = Field(
        default=120.0,
        ge=0,
        description="Seconds without a new message after which waiting turns are extracted.",
    )
    structured_output_method: Literal["json_schema", "function_calling", "json_mode"] = "json_schema"
    model_max_attempts: int = Field(default=3, ge=1, le=10)
