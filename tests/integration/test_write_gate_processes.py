"""The SQLite write gate across processes.

Spawned processes take turns; a forked child waits for its parent.
"""

from __future__ import annotations

import multiprocessing as mp
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from convmem_graph.store.write_gate import write_gate


def _hold_and_record(db: str, rounds: int, out: Any) -> None:
    """Child process body: hold the gate ``rounds`` times and report the intervals held."""
    gate = write_gate(db)
    spans = []
    for _ in range(rounds):
        with gate.hold():
            start = time.monotonic()
            time.sleep(0.01)
            spans.append((start, time.monotonic()))
    out.put(spans)


@pytest.mark.skipif(sys.platform == "win32", reason="flock is POSIX-only; Windows gets the in-process lock")
def test_processes_take_turns(tmp_path: Path) -> None:
    db = str(tmp_path / "p.db")
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    procs = [ctx.Process(target=_hold_and_record, args=(db, 15, out)) for _ in range(2)]
    for p in procs:
        p.start()
    spans = sorted(s for _ in procs for s in out.get(timeout=60))
    for p in procs:
        p.join(30)
    assert len(spans) == 30
    for (_, end), (start, _) in zip(spans, spans[1:], strict=False):
        assert start >= end  # no two holds overlap


@pytest.mark.skipif(not hasattr(mp, "get_context") or sys.platform != "linux", reason="fork start method")
def test_a_forked_child_waits_for_its_parent(tmp_path: Path) -> None:
    db = str(tmp_path / "f.db")
    gate = write_gate(db)
    ctx = mp.get_context("fork")
    out = ctx.Queue()
    with gate.hold():
        child = ctx.Process(target=_hold_and_record, args=(db, 1, out))
        child.start()
        time.sleep(0.3)
        released = time.monotonic()
    [(start, _end)] = out.get(timeout=30)
    child.join(10)
    # The child opened its own lock file description, so the parent's hold excluded it.
    assert start >= released
