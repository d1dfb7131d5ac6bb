"""What SQL a piece of the package sends: a test helper shared by the statement-count tests."""

from __future__ import annotations

import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import event

from convmem_graph.store import MemoryStore


@contextmanager
def statements_from(store: MemoryStore, function: str) -> Iterator[list[str]]:
    """The SQL statements the store's engine executes while ``function`` (a name) is on the stack."""
    seen: list[str] = []

    def record(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if any(frame.name == function for frame in traceback.extract_stack()):
            seen.append(statement)

    event.listen(store.engine, "before_cursor_execute", record)
    try:
        yield seen
    finally:
        event.remove(store.engine, "before_cursor_execute", record)
