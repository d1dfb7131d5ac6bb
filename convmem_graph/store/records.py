"""Small read models of the store: dead letters and audit entries."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["AuditAction", "AuditEntry", "AuditKind", "DeadLetter"]

AuditKind = Literal["fragment", "variable"]
AuditAction = Literal["add", "update", "supersede", "delete", "set_manual", "clear_manual", "infer"]


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
