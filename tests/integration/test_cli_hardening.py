"""Issue 10, finding 7: an unreachable model endpoint ends in one line and exit 1, no traceback."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])  # closed again when the block ends: nothing listens there


def test_unreachable_model_is_one_line_and_exit_1(tmp_path: Path) -> None:
    chat = tmp_path / "chat.json"
    chat.write_text(json.dumps([{"role": "user", "content": "I live in Lyon."}]), encoding="utf-8")
    env = {
        **os.environ,
        "OPENAI_BASE_URL": f"http://127.0.0.1:{_closed_port()}/v1",
        "OPENAI_API_KEY": "sk-test-not-a-key",
    }
    args = ["ingest", str(chat), "--memory", "m", "--model", "gpt-test", "--db", str(tmp_path / "m.db")]
    done = subprocess.run(
        [sys.executable, "-m", "convmem_graph", *args], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 1, done.stderr[-2000:]
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("convmem ingest: model error:"), done.stderr[-2000:]
    assert "Traceback" not in done.stderr and "sk-test-not-a-key" not in done.stderr
