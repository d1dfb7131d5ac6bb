"""Issue 10, finding 4 in the test suite: every bomb of ``benchmarks/hostile.py`` (at a tenth of the
original size, one round) ends within 300 MB peak RSS and 10 s beyond start-up and decompression,
each ``convmem`` command in its own process. The full-size figures are in benchmarks/README.md.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.benchmark_scripts import load_benchmark

pytestmark = pytest.mark.integration

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "hostile.py"


def test_every_bomb_is_bounded(tmp_path: Path) -> None:
    hostile = load_benchmark("hostile")
    out = tmp_path / "figures.json"
    # The script runs in a fresh process, as a user runs it: a child's peak RSS (wait4) counts the
    # pages of the process it was forked from, and this pytest process may hold hundreds of MB.
    args = ["--rounds", "1", "--scale", "0.1", "--json", str(out), "--workdir", str(tmp_path)]
    code = subprocess.run([sys.executable, str(SCRIPT), *args], check=False, timeout=900).returncode
    rows = json.loads(out.read_text(encoding="utf-8"))
    over = [r for r in rows if not r["bounded"]]
    assert code == 0 and not over, over
    by_name = {r["input"]: r for r in rows}
    assert all(r["rss_mb"] <= hostile.RSS_LIMIT_MB for r in rows)
    # The refusals are clear errors, not crashes.
    assert by_name["FIFO .jsonl"]["exit"] == 2 and "a FIFO" in by_name["FIFO .jsonl"]["stderr"][0]
    assert "character device" in by_name[".jsonl -> /dev/zero"]["stderr"][0]
    assert by_name["256 MiB newlines .jsonl.gz"]["exit"] == 2
