"""Settings of ``convmem serve``: address, database, webhook keys, caps, memory-id mapping, upstream.

Every field is read from the environment as ``CONVMEM_<FIELD>`` (for example
``CONVMEM_TRTC_CALLBACK_KEY``); the bearer token is ``CONVMEM_SERVE_TOKEN`` and the database
``CONVMEM_DB`` (shared with the CLI). Secrets are :class:`pydantic.SecretStr`, so they never show in
a ``repr`` or a log line.

Example:
    >>> s = ServeSettings(bot_ids="ai_bot, ai_bot_2", _env_file=None)
    >>> s.bot_ids, s.max_body_bytes, s.trtc_memory_from
    (['ai_bot', 'ai_bot_2'], 65536, 'user')
"""

from __future__ import annotations

import ipaddress
from typing import Annotated, Any, Literal

from pydantic import AliasChoices, Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

__all__ = ["DEFAULT_PROXY_MEMORY_KEYS", "ServeSettings", "is_loopback"]

#: Where the proxy looks for the memory id, first match wins: ``body:<dotted path>`` in the request
#: body (TRTC copies ``LLMConfig.MetaInfo`` keys into it, Agora merges ``llm.params`` into it), or
#: ``header:<name>`` (TRTC sends ``X-User-Id``).
DEFAULT_PROXY_MEMORY_KEYS = (
    "body:memory_id",
    "body:MetaInfo.memory_id",
    "body:context.memory_id",
    "body:user",
    "header:x-user-id",
)


def is_loopback(host: str) -> bool:
    """Return whether ``host`` only accepts connections from this machine.

    Example:
        >>> is_loopback("127.0.0.1"), is_loopback("localhost"), is_loopback("0.0.0.0")
        (True, True, False)
    """
    if host.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


class ServeSettings(BaseSettings):
    """Configuration of the live service (environment ``CONVMEM_*`` or keyword arguments)."""

    model_config = SettingsConfigDict(env_prefix="CONVMEM_", extra="ignore", populate_by_name=True)

    host: str = "127.0.0.1"
    port: int = Field(default=8080, ge=0, le=65535)
    db: str = Field(default="convmem.db", description="SQLite file or SQLAlchemy URL (as the CLI's --db)")
    token: SecretStr | None = Field(
        default=None,
        validation_alias=AliasChoices("token", "CONVMEM_SERVE_TOKEN"),
        description="Bearer token required on everything but the vendor webhooks and /healthz.",
    )
    trtc_callback_key: SecretStr | None = Field(default=None, description="TRTC console callback key")
    agora_webhook_secret: SecretStr | None = Field(default=None, description="Agora NCS secret")
    upstream_url: str | None = Field(default=None, description="chat-completions URL of the real model")
    upstream_api_key: SecretStr | None = None
    upstream_timeout_s: float = Field(default=60.0, gt=0)
    bot_ids: Annotated[list[str], NoDecode] = Field(
        default_factory=list, description="bot accounts (comma-separated in the environment)"
    )
    max_body_bytes: int = Field(default=64 * 1024, ge=1024, description="TRTC webhook body cap (413 past it)")
    max_agora_body_bytes: int = Field(
        default=512 * 1024,
        ge=1024,
        description="Agora webhook cap: a 103 carries up to 1024 history items (llm.max_history)",
    )
    max_proxy_body_bytes: int = Field(default=4 * 1024 * 1024, ge=1024)
    webhook_tolerance_ms: int = Field(
        default=5 * 60 * 1000,
        ge=0,
        description="replay window of a webhook's send time (TRTC CallbackTs, Agora notifyMs), either "
        "way; a correctly signed delivery outside it (or without one) gets 401; 0 turns the check off",
    )
    trtc_memory_from: Literal["user", "room", "task"] = Field(
        default="user",
        description="TRTC memory id: the human UserId of the round, the RoomId, or the id registered "
        "for the TaskId (by `convmem call start` or POST /tasks/trtc)",
    )
    agora_memory_label: str = Field(default="memory_id", description="label of an Agora 103 holding the id")
    proxy_memory_keys: Annotated[list[str], NoDecode] = Field(
        default_factory=lambda: list(DEFAULT_PROXY_MEMORY_KEYS)
    )
    proxy_recent_turns: int = Field(default=10, ge=0, le=30, description="stored turns added to the proxy")
    proxy_rank_by_query: bool = Field(
        default=False,
        description="rank facts by each turn's text (builds the block per request, a few ms) instead of "
        "serving the cached block the worker keeps fresh",
    )
    proxy_cache_ttl_s: float = Field(
        default=60.0, gt=0, description="idle cached blocks are rebuilt after this"
    )
    proxy_require_memory: bool = Field(
        default=False,
        description="refuse a proxy request naming no memory id (400, OpenAI error shape) instead of "
        "forwarding it without memory",
    )
    queue_max: int = Field(
        default=10_000, ge=1, description="pending work items before the proxy answers 503"
    )
    worker_batch: int = Field(default=500, ge=1, description="deliveries processed per lifecycle batch")
    worker_max_attempts: int = Field(
        default=5,
        ge=1,
        le=100,
        description="attempts of a delivery failing with an unexpected error before it goes to dead letters "
        "(a data error goes at once; a database outage is not counted)",
    )
    worker_process: bool = Field(
        default=False,
        description="run the lifecycle in a child process (a file or PostgreSQL database only) so proxied "
        "streams never wait behind a run for the GIL; on a busy 2-core machine the thread was faster",
    )

    @field_validator("bot_ids", "proxy_memory_keys", mode="before")
    @classmethod
    def _split(cls, value: Any) -> Any:
        if isinstance(value, str):
            return [part.strip() for part in value.split(",") if part.strip()]
        return value

    @field_validator("proxy_memory_keys")
    @classmethod
    def _check_keys(cls, value: list[str]) -> list[str]:
        for key in value:
            kind, _, name = key.partition(":")
            if kind not in ("body", "header") or not name:
                raise ValueError(f"proxy_memory_keys: {key!r} is not 'body:<path>' or 'header:<name>'")
        return value

    def secret(self, name: str) -> str | None:
        """Return the plain value of a secret field (``None`` when unset or empty)."""
        value = getattr(self, name)
        plain = value.get_secret_value() if isinstance(value, SecretStr) else value
        return plain or None
