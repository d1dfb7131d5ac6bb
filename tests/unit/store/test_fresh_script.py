"""The generated set-up script of a new SQLite store (``store/_fresh_script.py``).

A new store plays the script kept in the package instead of running the migrations on a scratch
database first (the ~50 ms of CPU every new process paid before its first new file). These tests
hold the kept script to what the migrations record now, check that a new file opens without the
scratch run and comes out the same as one set up by it, and that another stamp falls back to it.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from convmem_graph.store import MemoryStore
from convmem_graph.store import _fresh_script as kept
from convmem_graph.store import _fresh_sqlite as fresh
from convmem_graph.store._kept_script import recorded_store_script
from convmem_graph.store._stamp import SCHEMA_STAMP

REGENERATE = "python -m convmem_graph.store._kept_script && ruff format convmem_graph/store/_fresh_script.py"


def _canonical(script: Sequence[tuple[str, Any]]) -> list[tuple[str, tuple[Any, ...]]]:
    """The script with each run of consecutive ``CREATE INDEX`` sorted.

    SQLAlchemy creates a table's indexes from a set, so their order follows the process's string
    hashes; any order gives the same schema.
    """
    out: list[tuple[str, tuple[Any, ...]]] = []
    run: list[tuple[str, tuple[Any, ...]]] = []
    for statement, parameters in [*script, ("", ())]:
        item = (statement, tuple(parameters or ()))
        if statement.startswith("CREATE INDEX "):
            run.append(item)
            continue
        out.extend(sorted(run))
        run = []
        out.append(item)
    return out[:-1]


def _contents(path: Path) -> dict[str, Any]:
    """Schema objects and every table's rows of a SQLite file (the migration records without their time)."""
    with closing(sqlite3.connect(path)) as conn:
        schema = sorted(
            conn.execute("SELECT type, name, tbl_name, sql FROM sqlite_master WHERE name NOT LIKE 'sqlite_%'")
        )
        tables = [
            name
            for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")
            if not name.startswith(("sqlite_", "cm_episodes_"))
        ]
        rows = {}
        for name in tables:
            if name == "cm_episodes":
                continue  # contentless FTS5: its rows are read through its shadow tables above
            got = sorted(map(repr, conn.execute(f'SELECT * FROM "{name}"')))
            if name == "cm_schema_migrations":
                got = sorted(map(repr, conn.execute("SELECT version, name FROM cm_schema_migrations")))
            rows[name] = got
        shadow = {
            name: sorted(map(repr, conn.execute(f'SELECT * FROM "{name}"')))
            for (name,) in conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' AND name LIKE 'cm_episodes_%'"
            )
        }
        version = conn.execute("PRAGMA user_version").fetchone()
    return {"schema": schema, "rows": rows, "fts5": shadow, "user_version": version}


def test_the_kept_script_is_what_the_migrations_record_now() -> None:
    assert kept.STAMP == SCHEMA_STAMP, f"the schema changed: regenerate the kept script ({REGENERATE})"
    assert _canonical(kept.SCRIPT) == _canonical(recorded_store_script()), (
        f"the migrations record another script: regenerate the kept one ({REGENERATE})"
    )


def test_a_new_file_opens_without_the_scratch_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def no_scratch_run(steps: object) -> list[tuple[str, Any]]:
        raise AssertionError("a new store ran the migrations on a scratch database")

    monkeypatch.setattr(fresh, "_scripts", {})
    monkeypatch.setattr(fresh, "_record", no_scratch_run)
    with MemoryStore.from_url(str(tmp_path / "kept.sqlite")) as store:
        assert store.list_memories() == []
    with MemoryStore.from_url(":memory:") as store:
        assert store.list_memories() == []


def test_the_kept_script_sets_up_what_the_scratch_run_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(fresh, "_scripts", {})
    MemoryStore.from_url(str(tmp_path / "kept.sqlite")).close()
    monkeypatch.setattr(fresh, "_scripts", {})
    monkeypatch.setattr(kept, "STAMP", SCHEMA_STAMP + 1)
    MemoryStore.from_url(str(tmp_path / "recorded.sqlite")).close()
    assert _contents(tmp_path / "kept.sqlite") == _contents(tmp_path / "recorded.sqlite")
    assert _contents(tmp_path / "kept.sqlite")["user_version"] == (SCHEMA_STAMP,)


def test_a_script_of_another_stamp_is_not_played(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    recorded: list[object] = []
    record = fresh._record

    def counted(steps: Any) -> list[tuple[str, Any]]:
        recorded.append(steps)
        return record(steps)

    monkeypatch.setattr(fresh, "_scripts", {})
    monkeypatch.setattr(fresh, "_record", counted)
    monkeypatch.setattr(kept, "STAMP", SCHEMA_STAMP - 1)
    monkeypatch.setattr(kept, "SCRIPT", (("CREATE TABLE stale (x)", ()),))
    MemoryStore.from_url(str(tmp_path / "other.sqlite")).close()
    assert len(recorded) == 1
    with closing(sqlite3.connect(tmp_path / "other.sqlite")) as conn:
        assert conn.execute("SELECT count(*) FROM sqlite_master WHERE name = 'stale'").fetchone() == (0,)
