"""The ``convmem`` command without surprises (issue 12, item 7): missing paths and databases exit 2
with one error format, reads never create anything, global options before the command, --version."""

from __future__ import annotations

import argparse
import json
import re
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from convmem_graph.cli import _named_command, build_parser, main
from convmem_graph.memory import ConvMemory
from tests.conftest import FIXTURES

#: ``convmem <cmd>: <what>: <why>``, one line.
ERROR_LINE = re.compile(r"^convmem [a-z]+: [^:\n]+: [^\n]+\n$")


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def _files(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


@pytest.fixture(scope="module")
def db_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A database with one ingested memory ``m1`` (TRTC call of the fixtures)."""
    path = tmp_path_factory.mktemp("cli") / "mem.db"
    with ConvMemory.open(str(path)) as mem:
        mem.ingest("m1", json.loads((FIXTURES / "trtc_callbacks_one_call.json").read_text("utf-8")))
    return path


@pytest.fixture
def db(tmp_path: Path, db_template: Path) -> Path:
    """A fresh copy of :func:`db_template` per test (built once per module)."""
    path = tmp_path / "mem.db"
    shutil.copyfile(db_template, path)
    return path


def test_replay_of_a_missing_path_exits_2_and_creates_nothing(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    missing = str(tmp_path / "archive_typo")
    code, out, err = _run(capsys, "replay", missing, "--no-progress", "--db", str(tmp_path / "r.db"))
    assert (code, out) == (2, "")
    assert err == f"convmem replay: {missing}: no such file or directory\n"
    assert _files(tmp_path) == []


def test_ingest_of_a_missing_file_exits_2_and_creates_nothing(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    missing = str(tmp_path / "missing.json")
    code, _, err = _run(capsys, "ingest", missing, "--memory", "m1", "--db", str(tmp_path / "i.db"))
    assert code == 2
    assert ERROR_LINE.match(err) and err.startswith(f"convmem ingest: {missing}: ")
    assert _files(tmp_path) == []


@pytest.mark.parametrize(
    "argv",
    [
        ("show", "m1"),
        ("memories",),
        ("inject", "m1", "--vendor", "openai"),
        ("export", "m1"),
        ("variables", "list", "m1"),
        ("variables", "set", "m1", "city", "上海"),
        ("variables", "clear", "m1", "city"),
        ("delete", "m1"),
    ],
)
def test_commands_on_a_missing_database_create_no_file(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, argv: tuple[str, ...]
) -> None:
    typo = str(tmp_path / "typo.db")
    code, out, err = _run(capsys, *argv, "--db", typo)
    assert (code, out) == (2, "")
    assert err == f"convmem {argv[0]}: {typo}: no such database\n"
    assert _files(tmp_path) == []  # no database, no lock file


@pytest.mark.parametrize(
    "argv",
    [
        ("show", "nobody"),
        ("inject", "nobody", "--vendor", "trtc"),
        ("export", "nobody"),
        ("variables", "list", "nobody"),
        ("variables", "set", "nobody", "city", "上海"),
        ("variables", "clear", "nobody", "city"),
        ("delete", "nobody"),
    ],
)
def test_unknown_memory_is_one_error_and_never_created(
    capsys: pytest.CaptureFixture[str], db: Path, argv: tuple[str, ...]
) -> None:
    code, out, err = _run(capsys, *argv, "--db", str(db))
    assert (code, out) == (2, "")
    assert err == f"convmem {argv[0]}: nobody: no such memory\n"
    with ConvMemory.open(str(db)) as mem:
        assert [i.memory_id for i in mem.memories()] == ["m1"]


def test_variables_clear_needs_a_manual_value(capsys: pytest.CaptureFixture[str], db: Path) -> None:
    code, out, err = _run(capsys, "variables", "clear", "m1", "nosuchvar", "--db", str(db))
    assert (code, out) == (2, "")
    assert err == "convmem variables: nosuchvar: no manual value in memory 'm1'\n"
    assert _run(capsys, "variables", "set", "m1", "city", "上海", "--db", str(db))[0] == 0
    code, out, err = _run(capsys, "variables", "clear", "m1", "city", "--db", str(db))
    assert (code, out, err) == (0, "cleared manual value of city\n", "")
    # Cleared once: a second clear has nothing to clear.
    assert _run(capsys, "variables", "clear", "m1", "city", "--db", str(db))[0] == 2


def test_global_db_before_the_command(capsys: pytest.CaptureFixture[str], db: Path) -> None:
    code, out, err = _run(capsys, "--db", str(db), "show", "m1", "--json")
    assert (code, err) == (0, "")
    assert json.loads(out)["memory_id"] == "m1"
    # The command's own --db wins over the global one.
    code, out, _ = _run(capsys, "--db", str(db.parent / "other.db"), "memories", "--json", "--db", str(db))
    assert code == 0 and [m["memory_id"] for m in json.loads(out)] == ["m1"]


def test_global_db_default_comes_from_the_environment(
    capsys: pytest.CaptureFixture[str], db: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CONVMEM_DB", str(db))
    code, out, _ = _run(capsys, "memories", "--json")
    assert code == 0 and [m["memory_id"] for m in json.loads(out)] == ["m1"]


def test_global_option_a_command_does_not_take_is_refused(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code, out, err = _run(capsys, "--model", "qwen-plus", "show", "m1", "--db", str(tmp_path / "x.db"))
    assert (code, out) == (2, "")
    assert err == "convmem show: --model: not an option of this command\n"
    assert _files(tmp_path) == []


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    from importlib.metadata import version

    with pytest.raises(SystemExit) as stop:
        main(["--version"])
    assert stop.value.code == 0
    assert capsys.readouterr().out == f"convmem {version('convmem-graph')}\n"


def test_wholly_rejected_file_is_a_dead_letter_not_a_memory(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    bad, db = tmp_path / "bad.json", tmp_path / "r.db"
    bad.write_text('{"foo": 1}', encoding="utf-8")
    code, out, err = _run(capsys, "ingest", str(bad), "--memory", "m1", "--db", str(db), "--json")
    assert code == 2
    doc = json.loads(out)
    assert (doc["ingested"], doc["dead_letters"], doc["error_count"]) == (0, 1, 1)
    assert err.count(str(bad)) == 1 and err.count("\n") == 1
    assert err.startswith(f"convmem ingest: {bad}: auto: $: unrecognized payload")
    with ConvMemory.open(str(db)) as mem:
        assert mem.memories() == []  # no empty memory
        (letter,) = mem.store.list_dead_letters("m1")
    assert (letter.raw, letter.path) == ('{"foo": 1}', "$")


def test_a_wholly_rejected_ingest_stores_dead_letters_as_a_run_would(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The same cap and raw form as the ingest node: a bare JSON string is kept as the string.
    monkeypatch.setattr("convmem_graph.state.MAX_DEAD_LETTERS_PER_RUN", 3)
    bad, db = tmp_path / "bad.jsonl", tmp_path / "r.db"
    bad.write_text("\n".join(json.dumps(f"not a payload {i}") for i in range(5)), encoding="utf-8")
    code, out, _ = _run(capsys, "ingest", str(bad), "--memory", "m1", "--db", str(db), "--json")
    assert code == 2 and json.loads(out)["dead_letters"] == 5
    with ConvMemory.open(str(db)) as mem:
        assert mem.memories() == []
        raws = sorted(d.raw for d in mem.store.list_dead_letters("m1"))
    assert raws[1:] == [f"not a payload {i}" for i in range(3)]
    assert raws[0].startswith("2 more bad payloads or items")


def test_ingest_counts_each_skipped_reason_once(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    from collections import Counter

    files = [
        str(FIXTURES / "trtc_callbacks_one_call.json"),
        str(FIXTURES / "tencent_im_roammsg_exchange.json"),
    ]
    code, out, _ = _run(capsys, "normalize", *files, "--json")
    assert code == 0
    expected = Counter(str(s["reason"]) for s in json.loads(out)["skipped"])
    code, out, err = _run(
        capsys, "ingest", *files, "--memory", "m1", "--db", str(tmp_path / "s.db"), "--json"
    )
    assert (code, err) == (0, "")
    doc = json.loads(out)
    assert doc["skipped"] == dict(expected)
    assert doc["skipped"]["event_type_ignored"] == 8


@pytest.fixture
def shanghai_time(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Local time is Asia/Shanghai (UTC+8, no daylight saving) for the test."""
    import time

    monkeypatch.setenv("TZ", "Asia/Shanghai")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def _shanghai(ms: int) -> str:
    from datetime import datetime
    from zoneinfo import ZoneInfo

    return datetime.fromtimestamp(ms / 1000, ZoneInfo("Asia/Shanghai")).strftime("%Y-%m-%d %H:%M:%S")


def test_tables_print_local_times_and_json_keeps_epoch_ms(
    capsys: pytest.CaptureFixture[str], db: Path, shanghai_time: None
) -> None:
    code, out, _ = _run(capsys, "memories", "--json", "--db", str(db))
    assert code == 0
    (info,) = json.loads(out)
    assert isinstance(info["updated_at"], int) and info["updated_at"] > 1_600_000_000_000
    code, table, _ = _run(capsys, "memories", "--db", str(db))
    assert code == 0
    assert _shanghai(info["updated_at"]) in table and _shanghai(info["created_at"]) in table
    assert str(info["updated_at"]) not in table

    code, out, _ = _run(capsys, "show", "m1", "--json", "--recent", "3", "--db", str(db))
    recent = json.loads(out)["recent"]
    assert all(isinstance(m["timestamp_ms"], int) for m in recent)
    code, table, _ = _run(capsys, "show", "m1", "--recent", "3", "--db", str(db))
    assert code == 0
    # The TRTC call of the fixtures: 2026-01-01 13:00 UTC is 21:00 in Shanghai.
    assert [_shanghai(m["timestamp_ms"]) in table for m in recent] == [True] * 3
    assert "2026-01-01 21:00:" in table
    assert not any(str(m["timestamp_ms"]) in table for m in recent)


def test_worker_progress_sends_files_done_when_they_change() -> None:
    from convmem_graph.replay import ReplayReport, _ProgressSender

    sent: list[tuple[str, object]] = []

    class Sink:
        def put(self, item: tuple[str, object]) -> None:
            sent.append(item)

    sender = _ProgressSender(Sink(), interval_s=0, worker=1)
    for files, n in ((1, 5), (1, 2), (2, 3), (3, 0)):
        sender(n, ReplayReport(files=files))
    # The file being read is not done: files started minus one.
    assert sent == [("progress", 5), ("progress", 2), ("progress", 3), ("files", (1, 1)), ("files", (1, 2))]


def _command_help(parser: argparse.ArgumentParser, command: str) -> str:
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices[command].format_help()


def test_a_command_parsed_alone_is_the_command_of_the_full_parser() -> None:
    # A run registers only the command it names; its options and help must be the same.
    full = build_parser()
    sub = next(a for a in full._actions if isinstance(a, argparse._SubParsersAction))
    assert len(sub.choices) >= 15
    for command in sub.choices:
        assert _command_help(build_parser(command), command) == _command_help(full, command)


@pytest.mark.parametrize(
    ("argv", "command"),
    [
        (["inject", "m1"], "inject"),
        (["--db", "inject", "show", "m1"], "show"),  # a --db value named like a command
        (["-vv", "--model=x", "--db=y", "memories"], "memories"),
        (["--", "show"], "show"),
        (["--version"], None),
        ([], None),
    ],
)
def test_the_named_command_skips_global_options(argv: list[str], command: str | None) -> None:
    assert _named_command(argv) == command


def test_an_unknown_command_still_lists_every_command(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["bogus"])
    err = capsys.readouterr().err
    assert "invalid choice: 'bogus'" in err and "'inject'" in err and "'import'" in err
