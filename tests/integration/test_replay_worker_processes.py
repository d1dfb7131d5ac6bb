"""Replay in worker processes.

Forked and spawned workers store the same memories; bad documents are quarantined once; one
worker runs in the caller's process and stores what two processes do.
"""

from __future__ import annotations

import gc
import json
import os
import threading
from pathlib import Path
from typing import Any

import pytest

from convmem_graph.config import MemoryConfig
from convmem_graph.errors import ConvMemError
from convmem_graph.replay import replay_in_processes
from convmem_graph.store import MemoryStore
from tests.unit.replay.test_replayer import USERS, stored, write_archive


def test_forked_and_spawned_workers_replay_the_same(tmp_path: Path) -> None:
    archive = write_archive(tmp_path / "archive", USERS)
    results = []
    for label, busy in (("fork", False), ("spawn", True)):
        db = str(tmp_path / f"{label}.db")
        stop = threading.Event()
        other = threading.Thread(target=stop.wait)
        if busy:
            other.start()  # a second thread makes the parent spawn its workers
        progress: list[int] = []
        try:
            report = replay_in_processes(
                db,
                [archive],
                processes=2,
                config=MemoryConfig(),
                group_by="user",
                batch_messages=4,
                on_progress=progress.append,
            )
        finally:
            stop.set()
            if busy:
                other.join()
        assert report.messages_read == report.new_messages == sum(progress) == 30
        # The workers' per-node times and run counts are summed into the parent's report.
        assert report.runs >= len(USERS) and {"ingest", "normalize", "inject"} <= set(report.node_ms)
        store = MemoryStore.from_url(db)
        results.append(stored(store, USERS))
        store.close()
    assert results[0] == results[1]


@pytest.mark.parametrize("group_by", ["auto", "user"])
def test_worker_processes_quarantine_each_bad_document_once(tmp_path: Path, group_by: str) -> None:
    # Every worker reads every file: a bad line or a document without a user id is seen by all.
    archive = write_archive(tmp_path / "archive", USERS)
    with (archive / "part0.jsonl").open("a", encoding="utf-8") as fh:
        fh.write("{not json\n")
        fh.write(json.dumps({"messages": [{"role": "user", "content": "whose is this?"}]}) + "\n")
    with (archive / "solo.jsonl").open("w", encoding="utf-8") as fh:
        fh.write(json.dumps({"user": "solo", "messages": [{"role": "user", "content": "I live in Oslo."}]}))
        fh.write("\n{broken line of solo's file\n")
    outcomes = []
    for processes in (1, 2, 3):
        db = str(tmp_path / f"p{processes}.db")
        report = replay_in_processes(
            db, [archive], processes=processes, config=MemoryConfig(), group_by=group_by, batch_messages=4
        )
        store = MemoryStore.from_url(db)
        letters = sorted((d.memory_id or "", d.raw[:40]) for d in store.list_dead_letters())
        store.close()
        outcomes.append((dict(report.quarantined), letters))
    assert outcomes[0] == outcomes[1] == outcomes[2]
    quarantined, letters = outcomes[0]
    expected = {"json: unreadable document": 2}
    if group_by == "user":
        expected["no user id in payload"] = 1
    assert quarantined == expected
    # solo.jsonl fed one memory: its bad line is that memory's (deleted with it), by every worker count.
    assert [m for m, _ in letters].count("solo") == 1
    assert len(letters) == sum(expected.values())


def test_worker_processes_leave_one_episodic_segment(tmp_path: Path) -> None:
    """The workers skip the replay's end merge of the episodic index; the parent runs it once after all."""
    from convmem_graph.store.sqlite import SQLITE_EPISODES

    archive = write_archive(tmp_path / "archive", USERS, sessions=4)
    db = str(tmp_path / "seg.db")
    report = replay_in_processes(
        db, [archive], processes=2, config=MemoryConfig(), group_by="user", batch_messages=2
    )
    assert report.new_messages == 40 and report.runs > 2 and report.compact_seconds > 0
    with MemoryStore.from_url(db) as store, store.read() as conn:
        assert SQLITE_EPISODES.segments(conn) == 1


def test_one_worker_runs_in_this_process(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``processes=1`` replays here (as ``convmem replay --concurrency 1``), with what two processes store."""
    from convmem_graph.replay import read as replay_read

    pids = tmp_path / "pids"
    run = replay_read.Replayer.run

    def recorded(self: replay_read.Replayer, paths: Any) -> Any:
        with pids.open("a", encoding="utf-8") as fh:  # a forked worker writes its own pid here too
            fh.write(f"{os.getpid()}\n")
        return run(self, paths)

    monkeypatch.setattr(replay_read.Replayer, "run", recorded)
    archive = write_archive(tmp_path / "archive", USERS)
    progress: list[int] = []
    files: list[int] = []
    frozen = gc.get_freeze_count()
    report = replay_in_processes(
        str(tmp_path / "one.db"),
        [archive],
        processes=1,
        config=MemoryConfig(),
        group_by="user",
        batch_messages=4,
        on_progress=progress.append,
        on_files=files.append,
    )
    assert pids.read_text(encoding="utf-8").split() == [str(os.getpid())]
    assert report.messages_read == report.new_messages == sum(progress) == 30
    assert files and files[-1] == report.files
    assert report.runs >= len(USERS) and report.compact_seconds > 0
    # The replay's freeze of this heap is undone (objects frozen before may have been freed since).
    assert gc.get_freeze_count() <= frozen
    replay_in_processes(
        str(tmp_path / "two.db"),
        [archive],
        processes=2,
        config=MemoryConfig(),
        group_by="user",
        batch_messages=4,
    )
    # Two processes replay elsewhere: this process's pid is still there once. (A forked worker
    # inherits the patch and adds its own pid; a spawned one, used when this process already runs
    # threads, as a long test session may, does not.)
    lines = pids.read_text(encoding="utf-8").split()
    assert lines.count(str(os.getpid())) == 1
    assert len(lines) in (1, 3)
    results = []
    for name in ("one", "two"):
        with MemoryStore.from_url(str(tmp_path / f"{name}.db")) as store:
            results.append(stored(store, USERS))
    assert results[0] == results[1]


def test_one_worker_in_this_process_fails_as_a_worker_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from convmem_graph.replay import read as replay_read

    def broken(self: replay_read.Replayer, paths: Any) -> Any:
        raise ValueError("disk on fire")

    monkeypatch.setattr(replay_read.Replayer, "run", broken)
    archive = write_archive(tmp_path / "archive", USERS)
    frozen = gc.get_freeze_count()
    with pytest.raises(ConvMemError, match="replay worker failed: ValueError: disk on fire"):
        replay_in_processes(str(tmp_path / "one.db"), [archive], processes=1, config=MemoryConfig())
    assert gc.get_freeze_count() <= frozen

    def interrupted(self: replay_read.Replayer, paths: Any) -> Any:
        raise KeyboardInterrupt

    monkeypatch.setattr(replay_read.Replayer, "run", interrupted)
    with pytest.raises(KeyboardInterrupt):
        replay_in_processes(str(tmp_path / "two.db"), [archive], processes=1, config=MemoryConfig())
    assert gc.get_freeze_count() <= frozen
