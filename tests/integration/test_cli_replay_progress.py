"""``convmem replay`` progress on stderr: files done of total, messages, rate and time left."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.conftest import FIXTURES
from tests.unit.cli.test_errors_and_options import _run


def test_replay_progress_shows_files_done_of_total_messages_rate_and_eta(
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
    code, out, err = _run(
        capsys, "replay", str(archive), "--db", str(tmp_path / "p.db"), "--bot-id", "ai_xiaoyu_bot"
    )
    assert code == 0 and out.startswith("replayed 3 files")
    frames = [f.strip() for f in re.split(r"\r|\n", re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", err)) if f.strip()]
    # The total is known (counted first) before the first file is read ...
    assert re.search(r" \?/3 files 0 messages 0 msg/s \d+:\d\d:\d\d ETA", frames[0]), frames[0]
    # ... and the last frame has every file done, the messages, a rate and the time left.
    assert re.search(r" 3/3 files 29 messages \d+ msg/s \d+:\d\d:\d\d ETA 0:00:00$", frames[-1]), frames[-1]
