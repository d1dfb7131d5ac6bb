"""The ``convmem`` traps a new user fell into (issue 26, item 5), each a case that failed before.

Paging that says so, ids never cut, a confirmation before ``delete``, one prefix per error line
with the file name, shell option names in messages, ``view`` refusing an unknown memory.
"""

from __future__ import annotations

import io
import json
import shutil
import sys
from pathlib import Path

import pytest

from convmem_graph.cli import main
from convmem_graph.memory import ConvMemory

LONG_ID = "tenant_acme-prod.user_" + "x" * 50 + "_0123456789"


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def _ids(db: Path) -> list[str]:
    with ConvMemory.open(str(db)) as mem:
        return [i.memory_id for i in mem.memories(limit=1000)]


@pytest.fixture(scope="module")
def db_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Three memories, the last with a 82-character id."""
    path = tmp_path_factory.mktemp("cli") / "mem.db"
    with ConvMemory.open(str(path)) as mem:
        for memory_id in ("m1", "m2", LONG_ID):
            mem.ingest(memory_id, [{"role": "user", "content": "我住在杭州。"}], source="openai")
    return path


@pytest.fixture
def db(tmp_path: Path, db_template: Path) -> Path:
    """A fresh copy of :func:`db_template` per test (built once per module)."""
    path = tmp_path / "mem.db"
    shutil.copyfile(db_template, path)
    return path


# -- memories: paging that says so ------------------------------------------------------------


def test_memories_page_says_how_many_more(capsys: pytest.CaptureFixture[str], db: Path) -> None:
    code, out, err = _run(capsys, "memories", "--limit", "2", "--db", str(db))
    assert code == 0
    assert [line.split("\t")[0] for line in out.splitlines()] == ["m1", "m2"]
    assert err == "1 more (of 3): --offset 2 for the next page, --all for every one\n"
    code, out, err = _run(capsys, "memories", "--limit", "2", "--offset", "2", "--db", str(db))
    assert (code, err) == (0, "")
    assert [line.split("\t")[0] for line in out.splitlines()] == [LONG_ID]


def test_memories_all_lists_past_the_default_page(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = tmp_path / "many.db"
    with ConvMemory.open(str(path)) as mem:
        for n in range(103):
            mem.ingest(f"u{n:03d}", [{"role": "user", "content": "你好"}], source="openai")
    code, out, err = _run(capsys, "memories", "--db", str(path))
    assert code == 0 and len(out.splitlines()) == 100
    assert err.startswith("3 more (of 103): --offset 100")
    code, out, err = _run(capsys, "memories", "--all", "--db", str(path))
    assert (code, err) == (0, "")
    assert len(out.splitlines()) == 103


def test_memories_limit_has_help(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["memories", "--help"])
    out = capsys.readouterr().out
    assert "--limit N" in out and "memories per page" in out and "--all" in out


def test_memories_refuses_a_negative_limit(capsys: pytest.CaptureFixture[str], db: Path) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["memories", "--limit", "-1", "--db", str(db)])
    assert exc.value.code == 2
    assert "--limit: must be 0 or more, got -1" in capsys.readouterr().err


# -- memories: ids never cut ------------------------------------------------------------------


def test_memories_piped_prints_whole_ids(capsys: pytest.CaptureFixture[str], db: Path) -> None:
    code, out, _ = _run(capsys, "memories", "--db", str(db))
    assert code == 0
    rows = [line.split("\t") for line in out.splitlines()]
    assert [r[0] for r in rows] == ["m1", "m2", LONG_ID]
    assert all(len(r) == 5 and r[1] == "1" for r in rows)


def test_memories_json_keeps_whole_ids(capsys: pytest.CaptureFixture[str], db: Path) -> None:
    code, out, _ = _run(capsys, "memories", "--json", "--db", str(db))
    assert code == 0 and [m["memory_id"] for m in json.loads(out)] == ["m1", "m2", LONG_ID]


def test_memories_table_in_a_narrow_terminal_keeps_whole_ids(
    capsys: pytest.CaptureFixture[str], db: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "60")
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True)
    code, out, _ = _run(capsys, "memories", "--db", str(db))
    assert code == 0
    assert LONG_ID in out  # on one line, not folded or shortened with an ellipsis
    assert "…" not in out


# -- delete: a confirmation -------------------------------------------------------------------


def _stdin(monkeypatch: pytest.MonkeyPatch, text: str, *, tty: bool) -> None:
    stdin = io.StringIO(text)
    stdin.isatty = lambda: tty  # type: ignore[method-assign]
    monkeypatch.setattr(sys, "stdin", stdin)


def test_delete_without_a_terminal_needs_yes(
    capsys: pytest.CaptureFixture[str], db: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _stdin(monkeypatch, "y\n", tty=False)  # a "y" in a pipe is not a confirmation
    code, out, err = _run(capsys, "delete", "m1", "--db", str(db))
    assert (code, out) == (2, "")
    assert err == "convmem delete: m1: not deleted: no terminal to confirm on; add --yes to delete it\n"
    assert "m1" in _ids(db)
    code, out, err = _run(capsys, "delete", "m1", "--yes", "--db", str(db))
    assert (code, out, err) == (0, "deleted m1\n", "")
    assert "m1" not in _ids(db)


@pytest.mark.parametrize(
    ("answer", "deleted"), [("y\n", True), ("yes\n", True), ("\n", False), ("n\n", False)]
)
def test_delete_on_a_terminal_asks(
    capsys: pytest.CaptureFixture[str], db: Path, monkeypatch: pytest.MonkeyPatch, answer: str, deleted: bool
) -> None:
    _stdin(monkeypatch, answer, tty=True)
    code, out, err = _run(capsys, "delete", "m2", "--db", str(db))
    assert err.startswith("delete memory m2 (1 messages, ")
    assert "[y/N]" in err
    assert ("m2" not in _ids(db)) is deleted
    assert (code, out) == ((0, "deleted m2\n") if deleted else (1, ""))


def test_delete_of_an_unknown_memory_asks_nothing(
    capsys: pytest.CaptureFixture[str], db: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _stdin(monkeypatch, "y\n", tty=True)
    code, out, err = _run(capsys, "delete", "nobody", "--db", str(db))
    assert (code, out, err) == (2, "", "convmem delete: nobody: no such memory\n")


# -- errors: one prefix, the file, shell options ----------------------------------------------


def test_inject_error_has_one_vendor_prefix(capsys: pytest.CaptureFixture[str], db: Path) -> None:
    code, out, err = _run(capsys, "inject", "m1", "--vendor", "trtc", "--db", str(db))
    assert (code, out) == (2, "")
    assert err.startswith("convmem inject: trtc: StartAIConversation needs sdk_app_id")
    assert "trtc: trtc:" not in err and err.count("\n") == 1


def test_import_error_names_the_file_first(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    bad = tmp_path / "not_an_export.json"
    bad.write_text(json.dumps({"format": "something-else"}), encoding="utf-8")
    code, out, err = _run(capsys, "import", str(bad), "--db", str(tmp_path / "i.db"))
    assert (code, out) == (2, "")
    assert err == f"convmem import: {bad}: $.format: not a convmem export: must be 'convmem-memory'\n"


def test_import_over_an_existing_memory_names_the_shell_option(
    capsys: pytest.CaptureFixture[str], db: Path, tmp_path: Path
) -> None:
    exported = tmp_path / "m1.json"
    assert _run(capsys, "export", "m1", "-o", str(exported), "--db", str(db))[0] == 0
    code, out, err = _run(capsys, "import", str(exported), "--db", str(db))
    assert (code, out) == (2, "")
    assert err == "convmem import: m1: exists; add --replace to overwrite it\n"
    assert "replace=True" not in err
    code, out, _ = _run(capsys, "import", str(exported), "--replace", "--db", str(db))
    assert (code, out) == (0, "imported m1\n")


# -- view refuses like show -------------------------------------------------------------------


def test_view_of_an_unknown_memory_refuses_like_show(
    capsys: pytest.CaptureFixture[str], db: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("uvicorn")
    import uvicorn

    def no_serving(*_args: object, **_kwargs: object) -> None:
        raise AssertionError("the viewer was served for an unknown memory")

    monkeypatch.setattr(uvicorn.Server, "run", no_serving)  # the old code served a 404 page forever
    for command in ("show", "view"):
        code, out, err = _run(
            capsys, command, "u_99999", "--db", str(db), *(["--no-browser"] * (command == "view"))
        )
        assert (code, out, err) == (2, "", f"convmem {command}: u_99999: no such memory\n")


def test_view_of_a_missing_database_creates_nothing(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("uvicorn")
    import uvicorn

    monkeypatch.setattr(uvicorn.Server, "run", lambda *_a, **_k: None)
    typo = tmp_path / "typo.db"
    code, out, err = _run(capsys, "view", "--db", str(typo), "--no-browser")
    assert (code, out, err) == (2, "", f"convmem view: {typo}: no such database\n")
    assert list(tmp_path.iterdir()) == []
