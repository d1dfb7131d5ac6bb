"""``file_memory_lock``: a memory's runs on one SQLite file take turns across processes (issue 21 item 6)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from convmem_graph.store.locks import _bucket_path, file_memory_lock
from convmem_graph.store.write_gate import bounded_writes

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="flock: POSIX only")


def _same_bucket(lock_dir: str, memory_id: str) -> str:
    """Another memory id whose lock file is the one of ``memory_id``."""
    target = _bucket_path(lock_dir, memory_id)
    return next(f"x{n}" for n in range(100_000) if _bucket_path(lock_dir, f"x{n}") == target)


def test_nested_holds_of_one_bucket_in_one_thread_do_not_deadlock(tmp_path: Path) -> None:
    lock_dir = str(tmp_path / "locks")
    twin = _same_bucket(lock_dir, "m1")
    with bounded_writes(1.0):
        with (
            file_memory_lock(lock_dir, "m1"),
            file_memory_lock(lock_dir, twin),
            file_memory_lock(lock_dir, "m1"),
        ):
            pass
        with file_memory_lock(lock_dir, "m1"):  # all released: taken again at once
            pass
