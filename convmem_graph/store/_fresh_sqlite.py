"""Setting up an empty SQLite database from the statements the migrations ran on a scratch one.

Every new store (each test, each ``convmem`` command on a new file, each in-memory store of an
application) used to run the whole migration list: SQLAlchemy compiles every ``CREATE`` and reads
the catalog before each (``checkfirst``), ~150 statements of which a third are catalog reads,
about 30 ms of CPU per open. On an empty database the outcome of those steps does not depend on
anything but the code, so this module runs them once per process on a scratch in-memory
database, records the statements that changed it (in order, with their parameters), and plays
that script into each new empty database inside its set-up transaction. The script is made by the
migrations themselves at run time, never written by hand, so it cannot drift from them; a file
that holds anything at all takes the migrations' own path.

The store's own script is also kept in :mod:`~convmem_graph.store._fresh_script`, written by
``python -m convmem_graph.store._kept_script`` (then ``ruff format`` it) and stamped with the
schema stamp it was made under: a process whose stamp it carries plays it without the scratch
run (~50 ms of CPU in every new process that creates a store: each replay worker, each command on
a new file). Under any other stamp (tables or migrations changed, the file not rewritten) the
scratch run makes it as before, and a unit test fails until the file is written again.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any

from sqlalchemy import Connection, create_engine, event
from sqlalchemy.pool import StaticPool

from convmem_graph._time import now_ms
from convmem_graph.store._driver import driver_execute
from convmem_graph.store.registry import schema_migrations

__all__ = ["is_empty", "set_up_fresh"]

#: Statements that only read (the catalog reads before each ``CREATE``): not replayed.
_READS = ("SELECT", "PRAGMA")

Statement = tuple[str, Any]

#: The recorded script of each sequence of set-up steps (one in practice: the store's).
_scripts: dict[tuple[Callable[[Connection], None], ...], list[Statement]] = {}
_scripts_lock = threading.Lock()


def is_empty(conn: Connection) -> bool:
    """Whether the database holds no schema object at all (a new file or a new in-memory one)."""
    return conn.exec_driver_sql("SELECT count(*) FROM sqlite_master").scalar() == 0


def _record(steps: tuple[Callable[[Connection], None], ...]) -> list[Statement]:
    """Run ``steps`` on a scratch in-memory database and return the statements that wrote to it."""
    engine = create_engine("sqlite://", poolclass=StaticPool)
    script: list[Statement] = []

    @event.listens_for(engine, "before_cursor_execute")
    def _keep(_conn: Any, _cursor: Any, statement: str, parameters: Any, _ctx: Any, _many: bool) -> None:
        if not statement.lstrip().upper().startswith(_READS):
            script.append((statement, parameters))

    try:
        with engine.begin() as conn:
            for step in steps:
                step(conn)
    finally:
        engine.dispose()
    return script


def set_up_fresh(
    conn: Connection, *steps: Callable[[Connection], None], kept: Sequence[Statement] | None = None
) -> int:
    """Give the empty database ``conn`` is in what ``steps`` would, by replaying their recorded statements.

    ``steps`` (the migrations, the open-time steps, the index's set-up) run once per process on a
    scratch database; later calls with the same steps replay their script. Runs in the caller's
    transaction. The migration records get this open's time, as the migrations' own path would
    give them.

    Returns:
        How many statements were replayed.
    """
    with _scripts_lock:
        script: Sequence[Statement] | None = _scripts.get(steps)
        if script is None:
            # ``kept``: the generated script of these steps, when the caller knows it is current.
            script = _scripts[steps] = list(kept) if kept else _record(steps)
    for statement, parameters in script:
        driver_execute(conn, statement, parameters if parameters else ())
    conn.execute(schema_migrations.update().values(applied_at=now_ms()))
    return len(script)
