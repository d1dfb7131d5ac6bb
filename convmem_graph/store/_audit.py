"""Audit rows: every fragment and variable change with its cause."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import Connection, Row

from convmem_graph.store._driver import execute_rows
from convmem_graph.store._queries import INSERT_AUDIT
from convmem_graph.store.records import AuditAction, AuditEntry, AuditKind

__all__ = ["audit_row", "messages_cause", "row_to_audit", "write_audit"]


def audit_row(
    memory_id: str,
    at: int,
    kind: AuditKind,
    object_id: str,
    action: AuditAction,
    *,
    before: dict[str, Any] | None,
    after: dict[str, Any] | None,
    cause: str,
) -> dict[str, Any]:
    """Return the insert parameters of one audit entry."""
    return {
        "memory_id": memory_id,
        "at": at,
        "kind": kind,
        "object_id": object_id,
        "action": action,
        "before": before,
        "after": after,
        "cause": cause,
    }


def write_audit(conn: Connection, rows: Sequence[dict[str, Any]]) -> None:
    """Insert audit rows in one executemany (nothing when empty)."""
    if rows:
        execute_rows(conn, INSERT_AUDIT, list(rows))


def messages_cause(message_ids: Sequence[str], reason: str = "") -> str:
    """Describe an extraction cause, e.g. ``extracted from messages [m1, m2]``."""
    cause = f"extracted from messages [{', '.join(message_ids)}]" if message_ids else "extracted"
    return f"{cause}; {reason}" if reason else cause


def row_to_audit(row: Row[Any]) -> AuditEntry:
    """Build an AuditEntry from a ``cm_audit`` row."""
    return AuditEntry(
        id=row.id,
        memory_id=row.memory_id,
        at=row.at,
        kind=row.kind,
        object_id=row.object_id,
        action=row.action,
        before=row.before,
        after=row.after,
        cause=row.cause,
    )
