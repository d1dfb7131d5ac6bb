"""``convmem replay --concurrency 2`` shows files done of the total, messages, rate and ETA (issue 12)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from convmem_graph.cli import main
from tests.conftest import FIXTURES

pytestmark = pytest.mark.integration


def test_worker_processes_report_files_done_of_total(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    archive = tmp_path / "archive"
    archive.mkdir()
    for name in (
        "trtc_callbacks_one_call.json",
        "tencent_im_roammsg_exchange.json",
        "agora_history_response.json",
    ):
        (archive / name).write_bytes((FIXTURES / name).read_bytes())
    monkeypatch.setenv("TTY_COMPATIBLE", "1")  # rich draws its progress bar as on a terminal
    monkeypatch.setenv("COLUMNS", "200")
    argv = [
        "replay",
        str(archive),
        "--concurrency",
        "2",
        "--bot-id",
        "ai_xiaoyu_bot",
        "--db",
        str(tmp_path / "p.db"),
    ]
    code = main(argv)
    out, err = capsys.readouterr()
    assert code == 0 and out.startswith("replayed 3 files")
    frames = [f.strip() for f in re.split(r"\r|\n", re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", err)) if f.strip()]
    assert re.search(r" \?/3 files 0 messages", frames[0]), frames[0]
    assert re.search(r" 3/3 files 29 messages \d+ msg/s \d+:\d\d:\d\d ETA 0:00:00$", frames[-1]), frames[-1]
