"""``python -m convmem_graph normalize`` in a child process.

A good file prints its timeline; a bad one exits 2 with one line on stderr.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import FIXTURES


def test_subprocess_console_script(tmp_path: Path) -> None:
    bad = tmp_path / "garbage.json"
    bad.write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00")
    env = {**os.environ, "PYTHONIOENCODING": "utf-8"}
    good = subprocess.run(
        [
            sys.executable,
            "-m",
            "convmem_graph",
            "normalize",
            str(FIXTURES / "tencent_im_roammsg_exchange.json"),
            "--json",
        ],
        capture_output=True,
        text=True,
        encoding="utf-8",
        env=env,
        timeout=120,
    )
    assert good.returncode == 0, good.stderr
    assert len(json.loads(good.stdout)["messages"]) == 11
    proc = subprocess.run(
        [sys.executable, "-m", "convmem_graph", "normalize", str(bad)],
        capture_output=True,
        text=True,
        encoding="utf-8",
        env=env,
        timeout=120,
    )
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert proc.stderr == f"convmem normalize: error: {bad}:1: json: not UTF-8 text (byte 0)\n"
