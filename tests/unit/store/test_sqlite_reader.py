"""The read-only call start: the store's payload for every vendor, and the cases it hands back."""

from __future__ import annotations

import json
import shutil
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from convmem_graph.cli import main
from convmem_graph.cli.inject import VENDORS
from convmem_graph.memory import ConvMemory
from convmem_graph.store._stamp import SCHEMA_STAMP
from convmem_graph.store.sqlite_reader import SqliteSnapshotReader
from tests.conftest import FIXTURES

#: The example options of every Agora vendor (join, update, custom LLM messages).
AGORA_OPTIONS = {
    key: value
    for key, value in json.loads(
        (Path(__file__).parents[3] / "examples" / "options" / "agora.json").read_text("utf-8")
    ).items()
    if not key.startswith("_")
}
TRTC_OPTIONS = {
    "sdk_app_id": 1400000000,
    "room_id": "room_1",
    "agent_config": {"UserId": "ai_bot", "UserSig": "sig", "TargetUserId": "u_1"},
    "tts_config": {"TTSType": "flow", "VoiceId": "v1"},
}


def _vendor_options(vendor: str) -> dict[str, Any]:
    if vendor == "trtc":
        return dict(TRTC_OPTIONS)
    return dict(AGORA_OPTIONS) if vendor.startswith("agora") else {}


@pytest.fixture(scope="module")
def db_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A file with memory ``m1`` (TRTC call and a chat, with facts, a summary, a snapshot)."""
    path = tmp_path_factory.mktemp("reader") / "m.db"
    with ConvMemory.open(str(path), clock=lambda: 1_767_300_000_000) as mem:
        mem.ingest("m1", json.loads((FIXTURES / "trtc_callbacks_one_call.json").read_text("utf-8")))
        mem.ingest(
            "m1",
            [
                {"role": "user", "content": "我住在杭州，我对芒果过敏。昨天我去了西湖跑步。"},
                {"role": "assistant", "content": "好的，记住了：芒果过敏。"},
                {"role": "user", "content": "My sister Anna plays the violin on Fridays."},
                {"role": "assistant", "content": "Lovely, the violin!"},
            ],
            source="openai",
        )
        assert mem.store.load_snapshot("m1") is not None
    # Closed: the write-ahead log is folded into the file, so the file alone is the database.
    assert not path.with_name("m.db-wal").exists()
    return path


@pytest.fixture
def db(tmp_path: Path, db_template: Path) -> Path:
    """A fresh copy of :func:`db_template` per test (built once: every test starts from the same file)."""
    path = tmp_path / "m.db"
    shutil.copyfile(db_template, path)
    return path


@pytest.fixture
def no_store(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Fail if the command opens the store (the read-only path must serve it)."""

    def refuse(*args: Any, **kwargs: Any) -> ConvMemory:
        raise AssertionError("the store was opened")

    monkeypatch.setattr(ConvMemory, "open", refuse)
    yield


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def _store_payload(db: Path, vendor: str, options: dict[str, Any]) -> Any:
    with ConvMemory.open(str(db)) as mem:
        return json.loads(json.dumps(mem.payload("m1", vendor, **options), ensure_ascii=False, default=str))


@pytest.mark.parametrize("vendor", VENDORS)
@pytest.mark.parametrize("query", [None, "芒果", "violin sister", "西湖 昨天"])
def test_the_read_only_payload_is_the_stores(
    db: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    vendor: str,
    query: str | None,
) -> None:
    options = _vendor_options(vendor)
    if query is not None:
        options["query"] = query
    expected = _store_payload(db, vendor, options)
    argv = ["inject", "m1", "--vendor", vendor, "--db", str(db)]
    if query is not None:
        argv += ["--query", query]
    if _vendor_options(vendor):
        file = tmp_path / "options.json"
        file.write_text(json.dumps(_vendor_options(vendor)), encoding="utf-8")
        argv += ["--options", str(file)]
    monkeypatch.setattr(ConvMemory, "open", lambda *a, **k: pytest.fail("the store was opened"))
    code, out, err = _cli(capsys, *argv)
    assert (code, err) == (0, "")
    got = json.loads(out)
    assert got == expected
    if query == "violin sister":  # the episodic search ran: a quoted turn is in the block
        assert "Anna" in json.dumps(got, ensure_ascii=False)


def test_the_episodic_search_is_the_stores(db: Path) -> None:
    with ConvMemory.open(str(db)) as mem, SqliteSnapshotReader.open(db) as reader:  # type: ignore[union-attr]
        for query in ("芒果", "violin", "杭州 西湖", "nothing matches this"):
            assert reader.search_episodes("m1", query, limit=12) == mem.store.search_episodes(
                "m1", query, limit=12
            )
        assert reader.load_snapshot("m1") == mem.store.load_snapshot("m1")
        assert reader.load_snapshot("nobody") is None


def _tree(root: Path) -> dict[str, bytes]:
    """Every path under ``root`` (the database, its WAL files, the lock directory) and its bytes."""
    return {
        str(p.relative_to(root)): p.read_bytes() if p.is_file() else b"<dir>" for p in sorted(root.rglob("*"))
    }


def test_reading_writes_nothing(db: Path, no_store: None, capsys: pytest.CaptureFixture[str]) -> None:
    before = _tree(db.parent)
    assert _cli(capsys, "inject", "m1", "--vendor", "openai", "--query", "芒果", "--db", str(db))[0] == 0
    assert _tree(db.parent) == before


@pytest.mark.parametrize("case", ["missing", "directory", "not sqlite", "other stamp", "empty sqlite"])
def test_files_it_cannot_serve_give_none(tmp_path: Path, db: Path, case: str) -> None:
    path = tmp_path / "x.db"
    if case == "directory":
        path.mkdir()
    elif case == "not sqlite":
        path.write_bytes(b"this is not a database" * 100)
    elif case == "other stamp":
        path.write_bytes(db.read_bytes())
        with sqlite3.connect(path) as conn:
            conn.execute(f"PRAGMA user_version = {SCHEMA_STAMP + 1}")
    elif case == "empty sqlite":
        sqlite3.connect(path).close()
    assert SqliteSnapshotReader.open(path) is None
    assert case == "directory" or not path.exists() or path.is_file()


def test_a_memory_without_a_snapshot_is_built_by_the_store(
    db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with sqlite3.connect(db) as conn:  # a change cleared it
        conn.execute("DELETE FROM cm_snapshots")
    code, out, _ = _cli(capsys, "inject", "m1", "--vendor", "openai", "--query", "芒果", "--db", str(db))
    assert code == 0 and "芒果" in out
    with SqliteSnapshotReader.open(db) as reader:  # type: ignore[union-attr]
        assert reader.load_snapshot("m1") is not None  # and cached again for the next call start


def test_an_older_file_goes_through_the_store(db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    expected = _store_payload(db, "openai", {"query": "杭州"})
    with sqlite3.connect(db) as conn:
        conn.execute("PRAGMA user_version = 0")
    code, out, _ = _cli(capsys, "inject", "m1", "--vendor", "openai", "--query", "杭州", "--db", str(db))
    assert code == 0 and json.loads(out) == expected
    with sqlite3.connect(db) as conn:  # the store set it up and stamped it
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_STAMP


def test_errors_are_the_same_on_both_paths(db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for path in (str(db), f"sqlite:///{db}"):  # both read-only (a path and a URL)
        code, out, err = _cli(capsys, "inject", "nobody", "--vendor", "openai", "--db", path)
        assert (code, out, err) == (2, "", "convmem inject: nobody: no such memory\n")
        code, out, err = _cli(capsys, "inject", "x" * 300, "--vendor", "openai", "--db", path)
        assert code == 2 and out == "" and err.startswith("convmem inject: ") and "memory_id" in err
        code, out, err = _cli(capsys, "inject", "m1", "--vendor", "trtc", "--recent", "99", "--db", path)
        assert code == 2 and out == "" and err.startswith("convmem inject: trtc: ")
