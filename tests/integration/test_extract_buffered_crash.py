"""Turns waiting for a batched model extraction survive a SIGKILL of the process that received them."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

from tests.unit.nodes.test_extract_buffered import NOW, CountingModelExtractor, _open

_CHILD = """
import os, signal, sys
from tests.unit.nodes.test_extract_buffered import CountingModelExtractor, _open, _turn, NOW
extractor = CountingModelExtractor()
mem = _open(sys.argv[1], extractor, [NOW + 10_000])
mem.ingest("m", _turn(0), source="openai")
mem.ingest("m", _turn(1), source="openai")
assert extractor.batches == []
os.kill(os.getpid(), signal.SIGKILL)  # dies with two turns waiting: nothing closed or flushed
"""


def test_turns_waiting_for_extraction_survive_a_crash(tmp_path: Path) -> None:
    db = str(tmp_path / "crash.db")
    root = str(Path(__file__).resolve().parents[2])
    child = subprocess.run(
        [sys.executable, "-c", _CHILD, db], cwd=root, capture_output=True, text=True, timeout=120
    )
    assert child.returncode == -signal.SIGKILL, child.stderr
    second = CountingModelExtractor()
    with _open(db, second, [NOW + 10_000]) as again:
        again.ingest("m", [], session_ended=True)
        assert second.batches == [["第0句话", "第1句话"]]
        assert sorted(f.content for f in again.fragments("m")) == ["用户说过：第0句话", "用户说过：第1句话"]
