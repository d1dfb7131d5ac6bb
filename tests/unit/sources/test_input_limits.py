"""Issue 10, finding 4: tiny hostile inputs cost bounded work.

Scaled-down versions of the bombs (the full-size figures are in benchmarks/hostile.py): every one
ends with a clear error naming the file and the limit, fast, and a run's checkpointed state keeps
counts and a capped sample of errors, never the full list.
"""

from __future__ import annotations

import gzip
import json
import logging
import os
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from convmem_graph.errors import SourceFormatError
from convmem_graph.replay import Replayer, discover_files
from convmem_graph.runner import Lifecycle
from convmem_graph.sources import iter_documents, openai_messages, read_payload
from convmem_graph.sources._common import MAX_ITEMS_PER_PAYLOAD
from convmem_graph.sources.files import ReadLimits
from convmem_graph.state import MAX_DEAD_LETTERS_PER_RUN, MAX_ERRORS_KEPT, RawInput
from convmem_graph.store import MemoryStore


def _within(seconds: float, fn: Any) -> Any:
    """Run ``fn`` in a thread; fail (instead of hanging the suite) if it takes longer."""
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:  # noqa: BLE001  # handed back to the test
            box["error"] = exc

    t = threading.Thread(target=target, daemon=True)
    t.start()
    t.join(seconds)
    assert not t.is_alive(), f"still running after {seconds} s"
    if "error" in box:
        raise box["error"]
    return box.get("value")


def test_a_fifo_is_refused_by_name_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "calls.jsonl"
    os.mkfifo(fifo)
    with pytest.raises(SourceFormatError, match="a FIFO, not a regular file") as err:
        _within(5, lambda: list(iter_documents(fifo)))
    assert str(fifo) in str(err.value)


def test_a_jsonl_symlinked_to_dev_zero_is_refused(tmp_path: Path) -> None:
    link = tmp_path / "zero.jsonl"
    link.symlink_to("/dev/zero")
    with pytest.raises(SourceFormatError, match="character device"):
        _within(5, lambda: list(iter_documents(link)))


def test_a_symlink_loop_fails_to_open_with_the_os_error(tmp_path: Path) -> None:
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.symlink_to(b)
    b.symlink_to(a)
    with pytest.raises(OSError, match="symbolic links"):
        _within(5, lambda: list(iter_documents(a)))


def _gz(path: Path, chunk: bytes, times: int) -> Path:
    with gzip.open(path, "wb", compresslevel=9) as f:
        for _ in range(times):
            f.write(chunk)
    return path


def test_gzipped_newlines_stop_at_the_line_limit(tmp_path: Path) -> None:
    bomb = _gz(tmp_path / "nl.jsonl.gz", b"\n" * (1 << 20), 3)  # 3 Mi blank lines, ~3 KB gzipped
    assert bomb.stat().st_size < 20_000
    started = time.perf_counter()
    with pytest.raises(SourceFormatError, match="more than 1000000 lines") as err:
        _within(30, lambda: list(iter_documents(bomb)))
    assert err.value.path == f"{bomb}:1000001"
    assert time.perf_counter() - started < 10


def test_decompressed_size_and_line_limits_are_settings(tmp_path: Path) -> None:
    bomb = _gz(tmp_path / "docs.jsonl.gz", b"{}\n" * 1000, 10)
    with pytest.raises(SourceFormatError, match="more than 100 lines"):
        list(iter_documents(bomb, ReadLimits(max_lines=100)))
    with pytest.raises(SourceFormatError, match="more than 3000 bytes after decompression"):
        list(iter_documents(bomb, ReadLimits(max_file_bytes=3000)))
    whole = _gz(tmp_path / "doc.json.gz", b" " * 10_000, 1)
    with pytest.raises(SourceFormatError, match="larger than 5000 bytes"):
        list(iter_documents(whole, ReadLimits(max_file_bytes=5000)))


def test_a_payload_with_too_many_messages_is_refused_before_reading_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    messages = [{"role": "user", "content": "hi"}] * (MAX_ITEMS_PER_PAYLOAD + 1)
    # Counted, not timed: a wall-clock bound failed under a loaded machine's scheduling.
    read_items: list[int] = []
    item_reader = openai_messages._read_openai_item

    def counting_reader(item: Any, index: int, path: str, ctx: Any) -> Any:
        read_items.append(index)
        return item_reader(item, index, path, ctx)

    monkeypatch.setattr(openai_messages, "_read_openai_item", counting_reader)
    with pytest.raises(SourceFormatError, match=f"exceed the limit of {MAX_ITEMS_PER_PAYLOAD}") as err:
        read_payload({"messages": messages}, "openai")
    assert err.value.path == "$.messages"
    assert read_items == []
    assert len(read_payload(messages[:100], "openai").messages) == 100
    assert read_items == list(range(100))


def test_errors_kept_per_run_are_capped_and_the_checkpoint_stays_small(tmp_path: Path) -> None:
    db = tmp_path / "e.db"
    store = MemoryStore.from_url(str(db))
    from convmem_graph.checkpoints import open_checkpointer

    saver, close = open_checkpointer(str(db))
    life = Lifecycle(store, checkpointer=saver)
    bad = [RawInput({"unknown": i, "pad": "x" * 200}, None, name=f"f.jsonl:{i}") for i in range(3000)]
    result = life.run("m", bad)
    assert result.error_count == 3000 and len(result.errors) == MAX_ERRORS_KEPT
    assert result.dead_letters == 3000
    letters = store.list_dead_letters("m", limit=10_000)
    assert len(letters) == MAX_DEAD_LETTERS_PER_RUN + 1  # and one note counting the rest
    assert any("2000 more bad payloads" in d.raw for d in letters)
    with sqlite3.connect(db) as conn:
        blob = conn.execute(
            "SELECT max(length(checkpoint)) + coalesce((SELECT max(length(value)) FROM writes), 0) "
            "FROM checkpoints"
        ).fetchone()[0]
    assert blob < 50_000, blob  # was the full errors list, three times per run
    close()
    store.close()


def test_replay_follows_symlinked_folders_and_reports_them(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    real = tmp_path / "real"
    real.mkdir()
    (real / "u1.json").write_text(json.dumps([{"role": "user", "content": "hi"}]), encoding="utf-8")
    archive = tmp_path / "archive"
    archive.mkdir()
    (archive / "linked").symlink_to(real, target_is_directory=True)
    (archive / "loop").symlink_to(archive, target_is_directory=True)
    caplog.set_level(logging.WARNING, logger="convmem_graph.replay")
    found = _within(10, lambda: discover_files([archive]))
    assert [f.name for f in found] == ["u1.json"]
    assert "following symlinked folder" in caplog.text and "linked" in caplog.text
    assert "already read" in caplog.text  # the loop is reported, not followed forever


def test_replay_refuses_a_fifo_by_name_and_goes_on(tmp_path: Path) -> None:
    archive = tmp_path / "archive"
    archive.mkdir()
    os.mkfifo(archive / "a_pipe.jsonl")
    (archive / "b_user.json").write_text(json.dumps([{"role": "user", "content": "hello"}]), encoding="utf-8")
    store = MemoryStore.from_url(str(tmp_path / "r.db"))
    report = _within(60, lambda: Replayer(Lifecycle(store), group_by="file").run([archive]))
    assert report.new_messages == 1
    letters = store.list_dead_letters(limit=100)
    assert any("a FIFO" in d.error and "a_pipe.jsonl" in (d.path + d.raw) for d in letters)
    store.close()


def test_replay_quarantines_an_invalid_user_id_with_its_file_named_and_goes_on(tmp_path: Path) -> None:
    archive = tmp_path / "archive.jsonl"
    docs = [
        {"user": "u" * 300, "messages": [{"role": "user", "content": "long id"}]},
        {"user": "mem_\udc00", "messages": [{"role": "user", "content": "surrogate id"}]},
        {"user": "u_fine", "messages": [{"role": "user", "content": "hello"}]},
    ]
    archive.write_text("\n".join(json.dumps(d) for d in docs) + "\n", encoding="utf-8")
    store = MemoryStore.from_url(str(tmp_path / "ids.db"))
    report = Replayer(Lifecycle(store), group_by="user").run([archive])
    assert report.quarantined["invalid memory id"] == 2
    assert [m.memory_id for m in store.list_memories()] == ["u_fine"]
    errors = [d.error for d in store.list_dead_letters(limit=10)]
    assert any(e.startswith(f"{archive}:1: memory id must be at most 255") for e in errors), errors
    assert any(e.startswith(f"{archive}:2: memory id character U+DC00") for e in errors), errors
    store.close()


def test_one_shot_commands_cap_the_documents_they_hold(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from convmem_graph.cli import main
    from convmem_graph.sources import files as files_module

    monkeypatch.setattr(files_module, "DEFAULT_LIMITS", ReadLimits(max_documents=50))
    many = tmp_path / "many.jsonl"
    many.write_text('[{"role": "user", "content": "hi"}]\n' * 60, encoding="utf-8")
    assert main(["ingest", str(many), "--memory", "m", "--db", str(tmp_path / "c.db")]) == 2
    err = capsys.readouterr().err
    assert f"{many}:51" in err and "more than 50 documents" in err
    assert main(["normalize", str(many)]) == 2
    assert "more than 50 documents" in capsys.readouterr().err


def test_replay_abandons_a_file_of_garbage_and_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import convmem_graph.replay.read as replay_module

    monkeypatch.setattr(replay_module, "DEFAULT_LIMITS", ReadLimits(max_bad_documents=20))
    archive = tmp_path / "archive"
    archive.mkdir()
    (archive / "a_garbage.jsonl").write_text("{}\n" * 500, encoding="utf-8")
    (archive / "b_user.json").write_text(json.dumps([{"role": "user", "content": "hello"}]), encoding="utf-8")
    store = MemoryStore.from_url(str(tmp_path / "g.db"))
    report = Replayer(Lifecycle(store), group_by="file").run([archive])
    assert report.documents < 30 and report.new_messages == 1
    errors = [d.error for d in store.list_dead_letters(limit=100)]
    assert any("more than 20 unreadable documents; file abandoned" in e for e in errors)
    store.close()
