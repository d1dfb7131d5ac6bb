"""Small read models of the store: dead letters and audit entries."""

from __future__ import annotations

import hashlib
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["AuditAction", "AuditEntry", "AuditKind", "DeadLetter", "dead_letter_key"]

AuditKind = Literal["fragment", "variable", "message"]
AuditAction = Literal["add", "update", "supersede", "delete", "set_manual", "clear_manual", "infer", "purge"]


class DeadLetter(BaseModel):
    """A raw input item that could not be turned into messages, kept so nothing is lost silently."""

    model_config = ConfigDict(extra="forbid")

    id: int
    memory_id: str | None = None
    source: str = Field(description="source format name (agora, tencent_im, trtc, openai, ...)")
    raw: str = Field(description="the item exactly as received")
    error: str
    path: str = Field(default="$", description="JSON path of the offending field")
    created_at: int = 0


class AuditEntry(BaseModel):
    """One change of a fragment or a variable: what changed, when, and why."""

    model_config = ConfigDict(extra="forbid")

    id: int
    memory_id: str
    at: int = Field(description="ms UTC")
    kind: AuditKind
    object_id: str = Field(description="fragment id or variable name")
    action: AuditAction
    before: dict[str, Any] | None = None
    after: dict[str, Any] | None = None
    cause: str = Field(default="", description="e.g. 'extracted from messages [m1, m2]', 'set by hand'")


def dead_letter_key(memory_id: str | None, raw: str) -> str:
    """Return the dedupe key of a dead letter: the same bad item of one memory is stored once."""
    scope = "\x00" if memory_id is None else f"m:{memory_id}"
    return hashlib.blake2b(f"{scope}\x1f{raw}".encode("utf-8", "surrogatepass"), digest_size=16).hexdigest()
