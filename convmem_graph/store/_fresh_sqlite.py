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
``python -m convmem_graph.store._fresh_sqlite`` (then ``ruff format`` it) and stamped with the
schema stamp it was made under: a process whose stamp it carries plays it without the scratch
run (~50 ms of CPU in every new process that creates a store: each replay worker, each command on
a new file). Under any other stamp (tables or migrations changed, the file not rewritten) the
scratch run makes it as before, and a unit test fails until the file is written again.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, create_engine, event
from sqlalchemy.pool import StaticPool

from convmem_graph._time import now_ms
from convmem_graph.store._driver import driver_execute
from convmem_graph.store.registry import schema_migrations

__all__ = ["is_empty", "recorded_store_script", "set_up_fresh"]

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


def _store_steps() -> tuple[Callable[[Connection], None], ...]:
    """The set-up steps a SQLite store runs on a new file (as ``SqliteBackend.set_up`` passes them)."""
    from convmem_graph.store.migrations import set_up_schema
    from convmem_graph.store.sqlite import SQLITE_EPISODES

    return (set_up_schema, SQLITE_EPISODES.ensure)


def _blank_times(script: Sequence[Statement]) -> list[Statement]:
    """``script`` with the migration records' ``applied_at`` set to 0 (the open's time replaces it)."""
    out: list[Statement] = []
    for statement, parameters in script:
        if statement.startswith(f"INSERT INTO {schema_migrations.name} ") and isinstance(parameters, tuple):
            parameters = (*parameters[:-1], 0)
        out.append((statement, parameters))
    return out


def recorded_store_script() -> list[Statement]:
    """The store's script as the scratch run records it now (what the generated file must hold)."""
    return _blank_times(_record(_store_steps()))


def _stored(steps: tuple[Callable[[Connection], None], ...]) -> list[Statement] | None:
    """The generated script, when ``steps`` are the store's and the file was made under this stamp."""
    from convmem_graph.store import _fresh_script
    from convmem_graph.store._stamp import SCHEMA_STAMP

    if _fresh_script.STAMP != SCHEMA_STAMP or steps != _store_steps():
        return None
    return [(statement, tuple(parameters)) for statement, parameters in _fresh_script.SCRIPT]


def set_up_fresh(conn: Connection, *steps: Callable[[Connection], None]) -> int:
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
            script = _scripts[steps] = _stored(steps) or _record(steps)
    for statement, parameters in script:
        driver_execute(conn, statement, parameters if parameters else ())
    conn.execute(schema_migrations.update().values(applied_at=now_ms()))
    return len(script)


def _pieces(text: str, width: int = 72) -> list[str]:
    """``text`` cut after each newline and every ``width`` characters, for short source lines."""
    out: list[str] = []
    for line in text.splitlines(keepends=True):
        out.extend(line[i : i + width] for i in range(0, len(line), width))
    return out or [""]


def write_store_script(path: Path) -> int:
    """Write :mod:`~convmem_graph.store._fresh_script` for this version's schema; statements written."""
    from convmem_graph.store._stamp import SCHEMA_STAMP

    script = recorded_store_script()
    lines = [
        '"""The statements that set up a new SQLite store, generated: do not edit.',
        "",
        "Written by ``python -m convmem_graph.store._fresh_sqlite`` from the migrations' own scratch run",
        "(see :mod:`~convmem_graph.store._fresh_sqlite`); used only while :data:`STAMP` is the schema stamp.",
        '"""',
        "",
        "from __future__ import annotations",
        "",
        "#: The schema stamp this script was recorded under.",
        f"STAMP = {SCHEMA_STAMP}",
        "",
        "#: (statement, parameters) in order; the migration records' ``applied_at`` is set at each open.",
        "SCRIPT: tuple[tuple[str, tuple[object, ...]], ...] = (",
    ]
    for statement, parameters in script:
        lines.append("    (")
        lines.append("        (")
        lines.extend(f"            {piece!r}" for piece in _pieces(statement))
        lines.append("        ),")
        lines.append(f"        {tuple(parameters or ())!r},")
        lines.append("    ),")
    lines.append(")")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return len(script)


if __name__ == "__main__":  # pragma: no cover - the generator, run by hand after a schema change
    target = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).with_name("_fresh_script.py")
    print(f"{write_store_script(target)} statements written to {target}")
