"""``convmem inject --db sqlite:///file`` takes the read-only path as ``--db file`` does (issue 24 item 3).

The fast reader served plain paths only, and ``sqlite:///`` URLs (what ``--help`` shows) went
through SQLAlchemy and the full store: ~0.51 s instead of ~0.30 s a call start.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from convmem_graph.cli import main
from convmem_graph.memory import ConvMemory
from convmem_graph.store.urls import sqlite_file, sqlite_path

LOCATIONS = [
    "sqlite:///a.db",
    "sqlite:////tmp/x/a.db",
    "sqlite:///a%20b.db",
    "sqlite:///sub/../a+b.db",
    "sqlite+pysqlite:///x.db",
    "sqlite:///%E8%8A%92%E6%9E%9C.db",
    "plain/path.db",
    "/abs/path.db",
    "  sqlite:///spaced.db  ",
]
DECLINED = [
    "sqlite://",
    "sqlite:///:memory:",
    ":memory:",
    "sqlite:///a.db?mode=ro",
    "sqlite:///file:x?mode=memory&uri=true",
    "sqlite://host/a.db",
    "postgresql://u@db/app",
    "sqlite+aiosqlite:///a.db",
]


@pytest.mark.parametrize("location", LOCATIONS)
def test_the_file_is_the_one_the_store_opens(location: str) -> None:
    assert sqlite_file(location) == sqlite_path(location)


@pytest.mark.parametrize("location", DECLINED)
def test_locations_with_options_are_left_to_the_store(location: str) -> None:
    assert sqlite_file(location) is None


def test_a_sqlite_url_is_served_read_only(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    db = tmp_path / "m.db"
    with ConvMemory.open(str(db), clock=lambda: 1_767_300_000_000) as mem:
        mem.ingest(
            "m1",
            [
                {"role": "user", "content": "我住在杭州，我对芒果过敏。"},
                {"role": "assistant", "content": "好的，记住了。"},
            ],
            source="openai",
        )
        expected: Any = json.loads(json.dumps(mem.payload("m1", "openai", query="芒果"), ensure_ascii=False))

    def refuse(*args: Any, **kwargs: Any) -> ConvMemory:
        raise AssertionError("the store was opened")

    monkeypatch.setattr(ConvMemory, "open", refuse)
    for url in (f"sqlite:///{db}", f"sqlite+pysqlite:///{db}"):
        code = main(["inject", "m1", "--vendor", "openai", "--query", "芒果", "--db", url])
        out, err = capsys.readouterr()
        assert (code, err) == (0, "") and json.loads(out) == expected
