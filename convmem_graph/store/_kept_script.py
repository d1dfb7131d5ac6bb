"""The store's generated set-up script: which one is current, and its generator.

:mod:`~convmem_graph.store._fresh_script` holds the statements the migrations' scratch run
records for a new SQLite store (see :mod:`~convmem_graph.store._fresh_sqlite`), stamped with the
schema stamp it was made under. ``python -m convmem_graph.store._kept_script`` writes it again
after a schema change (then ``ruff format`` it).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from sqlalchemy import Connection

from convmem_graph.store._fresh_sqlite import _record
from convmem_graph.store.registry import schema_migrations

__all__ = ["recorded_store_script", "store_steps", "write_store_script"]

Statement = tuple[str, Any]


def store_steps() -> tuple[Callable[[Connection], None], ...]:
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
    return _blank_times(_record(store_steps()))


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
        "Written by ``python -m convmem_graph.store._kept_script`` from the migrations' own scratch run",
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
