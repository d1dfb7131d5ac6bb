"""Issue 10, finding 3: ``ConvMemory.delete`` (and ``convmem delete``) forgets everything.

A replayed archive leaves dead letters (a bad line carrying an ID-card number) and replay progress
rows (paths naming the user). After the delete, every table of the database, checkpoints
included, is scanned for the memory id and the planted text, on SQLite and on PostgreSQL
(``backend_url``).
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
from sqlalchemy import Engine, inspect, text

from convmem_graph.memory import ConvMemory
from convmem_graph.replay import Replayer, forget_replay_file

T0 = 1_767_268_800_000


def scan(engine: Engine, needles: list[str]) -> dict[str, list[str]]:
    """Return, per needle, the tables holding it anywhere in any column (text or bytes)."""
    found: dict[str, list[str]] = {n: [] for n in needles}
    with engine.connect() as conn:
        for table in inspect(conn).get_table_names():
            for row in conn.execute(text(f'SELECT * FROM "{table}"')):
                for value in row:
                    blob = value if isinstance(value, bytes | memoryview) else str(value).encode()
                    for needle in needles:
                        if needle.encode() in bytes(blob) and table not in found[needle]:
                            found[needle].append(table)
    return found


def _archive(root: Path, user: str, planted: str) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    path = root / f"{user}.jsonl"
    good = [
        {
            "user": user,
            "messages": [
                {"role": "user", "content": "I live in Lyon and I like tea.", "timestamp": T0},
                {"role": "assistant", "content": "Noted!", "timestamp": T0 + 1000},
            ],
        },
        {
            "user": user,
            "messages": [{"role": "user", "content": "I'm allergic to peanuts.", "timestamp": T0 + 5000}],
        },
    ]
    lines = [json.dumps(d) for d in good]
    lines.insert(1, '{"user": "' + user + '", "messages": [ my id card is ' + planted + " }")  # not JSON
    lines.append(json.dumps({"user": user, "messages": [{"role": "user", "content": 7, "note": planted}]}))
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


class TestDelete:
    """On each backend (``backend_url``: the database of the store and checkpoints)."""

    @pytest.fixture
    def url(self, backend_url: str) -> str:
        return backend_url

    def test_delete_leaves_no_trace_in_any_table(self, url: str, tmp_path: Path) -> None:
        run = uuid.uuid4().hex[:8]
        user, other = f"u_probe_{run}", f"u_keep_{run}"
        planted, kept = f"1101011990{run[:6]}77", f"2202022000{run[:6]}88"
        archive = tmp_path / "archive"
        _archive(archive, user, planted)
        _archive(archive, other, kept)
        mem = ConvMemory.open(url)
        try:
            report = Replayer(mem.lifecycle, group_by="auto").run([archive])
            assert report.new_messages == 6 and report.quarantined
            before = scan(mem.store.engine, [user, planted])
            assert "cm_dead_letters" in before[planted] and "cm_replay_progress" in before[user]
            assert mem.delete(user) is True
            after = scan(mem.store.engine, [user, planted, other, kept])
            assert after[user] == [] and after[planted] == [], after
            assert after[other] and after[kept]  # the other memory is untouched
        finally:
            mem.close()

    def test_unattributable_file_rows_are_purged_by_file(self, url: str, tmp_path: Path) -> None:
        run = uuid.uuid4().hex[:8]
        shared = tmp_path / "shared" / f"two_users_{run}.jsonl"
        shared.parent.mkdir()
        planted = f"33030319{run}"
        docs = [
            json.dumps(
                {"user": f"a_{run}", "messages": [{"role": "user", "content": "hi", "timestamp": T0}]}
            ),
            "{ broken " + planted,
            json.dumps(
                {"user": f"b_{run}", "messages": [{"role": "user", "content": "yo", "timestamp": T0}]}
            ),
        ]
        shared.write_text("\n".join(docs) + "\n", encoding="utf-8")
        mem = ConvMemory.open(url)
        try:
            Replayer(mem.lifecycle, group_by="auto").run([shared])
            assert scan(mem.store.engine, [planted])[planted] == ["cm_dead_letters"]
            assert forget_replay_file(mem.store, shared) >= 2  # the progress row and the dead letter
            found = scan(mem.store.engine, [planted, shared.name])
            assert found == {planted: [], shared.name: []}, found
        finally:
            mem.close()
