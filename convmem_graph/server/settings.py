"""Settings of ``convmem serve``: address, database, webhook keys, caps, memory-id mapping, upstream.

Every field is read from the environment as ``CONVMEM_<FIELD>`` (for example
``CONVMEM_TRTC_CALLBACK_KEY``); the admin bearer token is ``CONVMEM_SERVE_TOKEN`` (or read from
the file ``CONVMEM_SERVE_TOKEN_FILE``), the chat-only token ``CONVMEM_PROXY_TOKEN`` and the database
``CONVMEM_DB`` (shared with the CLI). Only these ``CONVMEM_*`` names are read: no bare ``TOKEN``.
Secrets are :class:`pydantic.SecretStr`, so they never show in a ``repr`` or a log line.

The proxy bounds what it reads from the upstream model: a non-stream answer over
``CONVMEM_PROXY_MAX_UPSTREAM_BYTES`` (default 8 MiB, decoded) is a 502 naming the limit, nothing
stored; a streamed answer is read line by line, and one SSE line over
``CONVMEM_PROXY_MAX_SSE_LINE_BYTES`` (default 1 MiB), or streamed text over the first cap, ends the
stream with an SSE error event.

A finished proxy turn the inbox cannot take (a database outage, a lock past
``CONVMEM_SERVE_WRITE_TIMEOUT_S``) is appended, fsynced, to a spool file in
``CONVMEM_PROXY_SPOOL_DIR`` and moved into the inbox by a background flusher every
``CONVMEM_PROXY_SPOOL_RETRY_S`` (backing off to 5 s while it fails), with the same inbox key, so
it is stored once; the spool is flushed first at start-up (see :mod:`convmem_graph.server.spool`).
Unset, the directory is ``<sqlite file>.proxy-spool`` next to a SQLite file, a private temporary
directory for an in-memory database, and ``$XDG_STATE_HOME/convmem/proxy-spool/<hash of the URL>``
(default ``~/.local/state``) for PostgreSQL; set it to a persistent volume in a container. With
``CONVMEM_PROXY_SPOOL_MAX_TURNS`` turns spooled, new proxy requests are answered 503 before the
upstream is called: a turn is only answered when it can be kept.

Example:
    >>> s = ServeSettings(bot_ids="ai_bot, ai_bot_2", _env_file=None)
    >>> s.bot_ids, s.max_body_bytes, s.trtc_memory_from
    (['ai_bot', 'ai_bot_2'], 65536, 'user')
"""

from __future__ import annotations

import ipaddress
from pathlib import Path
from typing import Annotated, Any, Literal, Self

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import NoDecode, SettingsConfigDict

from convmem_graph.settings import ConvMemSettings

__all__ = ["DEFAULT_PROXY_MEMORY_KEYS", "LOOPBACK_HOSTS", "ServeSettings", "is_loopback", "read_token_file"]

#: Host names a loopback client may send (``Host`` without port; IPv6 in brackets, as Starlette
#: compares them): always allowed unless ``allowed_hosts`` is set explicitly.
LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "[::1]")

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


def _host_name(entry: str) -> str:
    """Normalize an allow-list entry to what Starlette compares: lower case, no port, IPv6 in brackets."""
    entry = entry.strip().lower()
    if entry.startswith("["):  # "[::1]" or "[::1]:8080"
        return entry[: entry.index("]") + 1] if "]" in entry else entry
    if entry.count(":") > 1:  # a bare IPv6 address ("::1")
        return f"[{entry}]"
    return entry.partition(":")[0]


def read_token_file(path: Path) -> str:
    """Return the token stored in ``path`` (trailing newline stripped).

    Raises:
        ValueError: The file cannot be read, is not UTF-8, or holds no token.
    """
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"CONVMEM_SERVE_TOKEN_FILE {str(path)!r} cannot be read: {exc}") from None
    token = text.rstrip("\r\n")
    if not token.strip():
        raise ValueError(f"CONVMEM_SERVE_TOKEN_FILE {str(path)!r} is empty")
    return token


class ServeSettings(ConvMemSettings):
    """Configuration of the live service (environment ``CONVMEM_*`` or keyword arguments).

    Extends the settings every command reads (database, PostgreSQL pools, vendor credentials).
    """

    model_config = SettingsConfigDict(env_prefix="CONVMEM_", extra="ignore", populate_by_name=True)

    host: str = "127.0.0.1"
    port: int = Field(default=8080, ge=0, le=65535)
    db: str = Field(default="convmem.db", description="SQLite file or SQLAlchemy URL (as the CLI's --db)")
    token: SecretStr | None = Field(
        default=None,
        # One documented name only: an alias without the prefix made a stray TOKEN variable the token.
        validation_alias="CONVMEM_SERVE_TOKEN",
        description="Admin bearer token: the viewer, the Bailian API, /tasks, /docs and the proxy "
        "(everything but the vendor webhooks and /healthz)",
    )
    token_file: Path | None = Field(
        default=None,
        validation_alias="CONVMEM_SERVE_TOKEN_FILE",
        description="file holding the admin token (keeps it out of argv and the environment)",
    )
    proxy_token: SecretStr | None = Field(
        default=None,
        description="chat-only bearer token (TRTC APIKey / Agora api_key): accepted on the proxy's "
        "chat route only; unset, the proxy takes the admin token",
    )
    allowed_hosts: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="Host header values served (comma-separated, port ignored); a foreign Host gets "
        "400 (DNS rebinding); empty: the bind host plus localhost, 127.0.0.1 and [::1]",
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
    proxy_max_upstream_bytes: int = Field(
        default=8 * 1024 * 1024,
        ge=1024,
        description="cap of a non-stream upstream answer (decoded bytes; 502 past it, nothing stored) and "
        "of the text of a streamed one (the stream ends with an SSE error event)",
    )
    proxy_max_sse_line_bytes: int = Field(
        default=1024 * 1024,
        ge=1024,
        description="cap of one SSE line of a streamed upstream answer: a longer line (a newline-less "
        "'stream') ends the stream with an SSE error event instead of being buffered",
    )
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
    proxy_spool_dir: Path | None = Field(
        default=None,
        description="directory of the proxy's turn spool (turns the inbox could not take, fsynced); "
        "unset: <sqlite file>.proxy-spool, or $XDG_STATE_HOME/convmem/proxy-spool/<url hash> for PostgreSQL",
    )
    proxy_spool_retry_s: float = Field(
        default=1.0, gt=0, le=60, description="wait between the spool flusher's passes while turns wait"
    )
    proxy_spool_max_turns: int = Field(
        default=10_000,
        ge=1,
        description="spooled proxy turns at which the proxy answers new requests 503 store_busy (with "
        "Retry-After) before calling the upstream, so no answered turn is lost "
        "(CONVMEM_PROXY_SPOOL_MAX_TURNS)",
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
    serve_write_timeout_s: float = Field(
        default=2.0,
        gt=0,
        le=60,
        description="longest wait of a request's store write for a lock (the SQLite write gate or another "
        "process's BEGIN IMMEDIATE, a memory's run); past it the request gets 503 with Retry-After, nothing "
        "stored (CONVMEM_SERVE_WRITE_TIMEOUT_S)",
    )
    health_timeout_s: float = Field(
        default=0.8,
        gt=0,
        le=30,
        description="longest wait of /healthz and /readyz for their store read; past it, or on an error, "
        "they answer 503 (CONVMEM_HEALTH_TIMEOUT_S)",
    )
    worker_process: bool = Field(
        default=False,
        description="run the lifecycle in a child process (a file or PostgreSQL database only) so proxied "
        "streams never wait behind a run for the GIL; on a busy 2-core machine the thread was faster",
    )

    @field_validator("bot_ids", "proxy_memory_keys", "allowed_hosts", mode="before")
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

    @field_validator("allowed_hosts")
    @classmethod
    def _check_hosts(cls, value: list[str]) -> list[str]:
        hosts = [_host_name(entry) for entry in value]
        for host in hosts:
            if host == "*":  # an explicit opt-out (a proxy in front checks the Host)
                continue
            if "*" in host[1:] or (host.startswith("*") and not host.startswith("*.")):
                raise ValueError(f"allowed_hosts: {host!r} is not a host name or '*.domain'")
        return hosts

    @model_validator(mode="after")
    def _resolve_tokens(self) -> Self:
        if self.token_file is not None:
            if self.secret("token") is not None:
                raise ValueError("set CONVMEM_SERVE_TOKEN or CONVMEM_SERVE_TOKEN_FILE, not both")
            self.token = SecretStr(read_token_file(self.token_file))
        if self.secret("proxy_token") is not None and self.secret("proxy_token") == self.secret("token"):
            # The same value would let the token given to a vendor delete memories again.
            raise ValueError("proxy_token (CONVMEM_PROXY_TOKEN) must differ from the admin token")
        if not self.allowed_hosts:
            bind = _host_name(self.host)
            wildcard = bind in ("0.0.0.0", "[::]", "")
            self.allowed_hosts = [*LOOPBACK_HOSTS, *([] if wildcard or bind in LOOPBACK_HOSTS else [bind])]
        return self

    def secret(self, name: str) -> str | None:
        """Return the plain value of a secret field (``None`` when unset or empty)."""
        value = getattr(self, name)
        plain = value.get_secret_value() if isinstance(value, SecretStr) else value
        return plain or None
