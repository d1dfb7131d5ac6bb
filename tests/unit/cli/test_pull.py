"""Issue 20, item 6: an IM pull cursor belongs to the memory it fed, and goes with it on delete.

``convmem pull im --memory X`` keeps the newest pulled time per (user, bot); the cursor row now
names ``X``. A database of an older version (no memory column, cursors keyed by the user only)
is upgraded when the store opens (migration 1), and a delete still finds the user's cursor rows.
"""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any

from sqlalchemy import select, text

from convmem_graph import ConvMemory
from convmem_graph.cli.pull import pull_im
from convmem_graph.store.registry import pull_cursors
from tests.conftest import load_fixture

USER, BOT = "u_10086", "@RBT#xiaoyu"


class FakeIM:
    """Answers ``admin_getroammsg`` with the bundled pages (the IM client's own tests use cassettes)."""

    def get_roam_messages(self, user: str, bot: str, **_window: Any) -> dict[str, Any]:
        return {"pages": load_fixture("tencent_im_roammsg_exchange.json")["pages"]}


def _cursors(mem: ConvMemory) -> list[tuple[Any, ...]]:
    with mem.store.read() as conn:
        return [tuple(r) for r in conn.execute(select(pull_cursors.c["user_id", "bot_id", "memory_id"]))]


def test_a_pull_into_another_memory_is_forgotten_with_that_memory(tmp_path: Path) -> None:
    with ConvMemory.open(str(tmp_path / "pull.db")) as mem:
        pages, stored = pull_im(
            mem, USER, BOT, memory_id="mem_lin", since=0, until=1767268799, client=FakeIM()
        )
        assert pages == 2 and stored > 0
        assert _cursors(mem) == [(USER, BOT, "mem_lin")]
        mem.delete(USER)  # the user's id is not the memory this pull fed
        assert _cursors(mem) == [(USER, BOT, "mem_lin")]
        mem.delete("mem_lin")
        assert _cursors(mem) == []


def test_an_older_cursor_table_is_upgraded_and_its_rows_deleted_by_user(tmp_path: Path) -> None:
    db = tmp_path / "old.db"
    with closing(sqlite3.connect(db)) as conn, conn:
        # The table as an older version made it: no memory column.
        conn.execute(
            "CREATE TABLE cm_im_pull_cursors (user_id VARCHAR(256) NOT NULL, bot_id VARCHAR(256) "
            "NOT NULL, last_time INTEGER NOT NULL, PRIMARY KEY (user_id, bot_id))"
        )
        conn.execute("INSERT INTO cm_im_pull_cursors VALUES ('u_old', 'bot', 1), (?, ?, 2)", (USER, BOT))
    with ConvMemory.open(str(db)) as mem:  # migration 1 adds the memory column, NULL in these rows
        mem.delete("u_old")  # found by the user id
        with mem.store.read() as conn:
            assert [r[0] for r in conn.execute(text("SELECT user_id FROM cm_im_pull_cursors"))] == [USER]
        pull_im(mem, USER, BOT, since=0, until=1767268799, client=FakeIM())
        assert _cursors(mem) == [(USER, BOT, USER)]
        mem.delete(USER)
        assert _cursors(mem) == []
