"""Free-form ``meta_data`` of Bailian memory nodes, in a side table beside the store.

Bailian lets a client attach its own keys to a memory node (the docs' update example sets
``{"location_name": "杭州"}``). A fact has no column for them, so they are kept here, per (memory,
node), as one JSON object, and shown back in the node's ``meta_data`` next to convmem's own keys
(``category``, ``key``, ``origin`` ...). The table is registered in
:mod:`convmem_graph.store.registry`, so deleting the memory deletes them in the same transaction.

Example:
    >>> from convmem_graph.store import MemoryStore
    >>> meta = NodeMetaStore(MemoryStore.from_url("sqlite://"))
    >>> meta.merge("u_1", "f_1", {"location_name": "杭州"})
    {'location_name': '杭州'}
    >>> meta.merge("u_1", "f_1", {"weather": "晴", "location_name": None})
    {'weather': '晴'}
    >>> meta.get_many("u_1", ["f_1", "f_2"])
    {'f_1': {'weather': '晴'}}
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from sqlalchemy import delete, select

from convmem_graph._time import now_ms
from convmem_graph.store import MemoryStore
from convmem_graph.store.engine import execute_upsert
from convmem_graph.store.registry import node_meta

__all__ = ["MAX_META_BYTES", "NodeMetaStore"]

#: Largest JSON of one node's free-form metadata (a node's content is at most 200 characters).
MAX_META_BYTES = 4096


class NodeMetaStore:
    """Per-node free-form metadata in the store's database (an optional table of its registry).

    Args:
        store: The memory store whose database holds the table.
    """

    def __init__(self, store: MemoryStore) -> None:
        self.store = store
        store.ensure_tables(node_meta)  # a SQLite file gets it here (store._optional)

    def get_many(self, memory_id: str, node_ids: Iterable[str]) -> dict[str, dict[str, Any]]:
        """Return the metadata of those of ``node_ids`` that have any."""
        ids = list(node_ids)
        if not ids:
            return {}
        stmt = select(node_meta.c.node_id, node_meta.c.body).where(
            node_meta.c.memory_id == memory_id, node_meta.c.node_id.in_(ids)
        )
        with self.store.read() as conn:
            return {row.node_id: json.loads(row.body) for row in conn.execute(stmt)}

    def merge(self, memory_id: str, node_id: str, changes: Mapping[str, Any]) -> dict[str, Any]:
        """Set the keys of ``changes`` on a node (``None`` removes a key); return the result.

        Raises:
            ValueError: The result is not JSON or is larger than :data:`MAX_META_BYTES`.
        """
        with self.store.transaction(memory_id) as conn:
            row = conn.execute(
                select(node_meta.c.body).where(
                    node_meta.c.memory_id == memory_id, node_meta.c.node_id == node_id
                )
            ).first()
            current: dict[str, Any] = json.loads(row.body) if row is not None else {}
            for key, value in changes.items():
                if value is None:
                    current.pop(key, None)
                else:
                    current[key] = value
            try:
                body = json.dumps(current, ensure_ascii=False, sort_keys=True, allow_nan=False)
            except (TypeError, ValueError):
                raise ValueError("meta_data: values must be JSON") from None
            if len(body.encode("utf-8")) > MAX_META_BYTES:
                raise ValueError(f"meta_data: at most {MAX_META_BYTES} bytes of JSON per node")
            if current:
                row_values = {
                    "memory_id": memory_id,
                    "node_id": node_id,
                    "body": body,
                    "updated_at": now_ms(),
                }
                execute_upsert(conn, node_meta, ("memory_id", "node_id"), row_values)
            else:
                conn.execute(
                    delete(node_meta).where(
                        node_meta.c.memory_id == memory_id, node_meta.c.node_id == node_id
                    )
                )
        return current

    def forget(self, memory_id: str, node_id: str) -> None:
        """Remove a node's metadata (the node was deleted)."""
        with self.store.transaction(memory_id) as conn:
            conn.execute(
                delete(node_meta).where(node_meta.c.memory_id == memory_id, node_meta.c.node_id == node_id)
            )
