"""``convmem view`` as a user runs it: a process on loopback that prints the URL of the page."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("fastapi", reason="the server extra (fastapi) is not installed")

import httpx  # noqa: E402

from convmem_graph.memory import ConvMemory  # noqa: E402

pytestmark = pytest.mark.integration


def test_view_prints_a_loopback_url_that_serves_the_memory(tmp_path: Path) -> None:
    db = tmp_path / "view.db"
    with ConvMemory.open(str(db)) as mem:
        mem.ingest("u_view", [{"role": "user", "content": "我对芒果过敏。"}], source="openai")
    env = {**os.environ, "CONVMEM_SERVE_TOKEN": "not-used-by-view", "BROWSER": "true"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "convmem_graph", "view", "u_view", "--db", str(db), "--no-browser"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("convmem viewer: http://127.0.0.1:"), line
        url = line.split()[2]
        assert url.endswith("/memories/u_view")
        response = None
        for _ in range(100):  # the URL is printed before uvicorn accepts; bounded wait
            try:
                response = httpx.get(url, timeout=5)
                break
            except httpx.ConnectError:
                assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
                time.sleep(0.1)
        assert response is not None and response.status_code == 200
        assert "用户对芒果过敏。" in response.text
        # No token on the local viewer, even with CONVMEM_SERVE_TOKEN in the environment.
        root = httpx.get(url.split("/memories/")[0] + "/", timeout=5)
        assert root.status_code == 200 and 'href="/memories/u_view"' in root.text
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)
