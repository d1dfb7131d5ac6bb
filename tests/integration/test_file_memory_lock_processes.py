"""``file_memory_lock`` across processes (issue 21 item 6).

A memory held by another process waits for it; other memories do not.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from convmem_graph.runner import Lifecycle
from convmem_graph.state import RawInput
from convmem_graph.store import MemoryStore
from convmem_graph.store.locks import _bucket_path, file_memory_lock
from convmem_graph.store.write_gate import WriteTimeout, bounded_writes
from tests.unit.store.test_locks import _same_bucket

_HOLDER = """
import sys
from convmem_graph.store.locks import file_memory_lock
with file_memory_lock(sys.argv[1], sys.argv[2]):
    print("held", flush=True)
    sys.stdin.readline()
"""


@pytest.fixture
def other_process(tmp_path: Path) -> Iterator[subprocess.Popen[str]]:
    """Another process holding memory ``m1`` of ``tmp_path/locks`` until a line is written to it."""
    proc = subprocess.Popen(
        [sys.executable, "-c", _HOLDER, str(tmp_path / "locks"), "m1"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate(timeout=10)


def _release(proc: subprocess.Popen[str]) -> None:
    assert proc.stdin is not None
    proc.stdin.write("\n")
    proc.stdin.flush()
    proc.wait(timeout=10)


def test_a_memory_held_by_another_process_waits_for_it(
    tmp_path: Path, other_process: subprocess.Popen[str]
) -> None:
    lock_dir = str(tmp_path / "locks")
    started = time.monotonic()
    with pytest.raises(WriteTimeout, match="another process"), bounded_writes(0.3):
        with file_memory_lock(lock_dir, "m1"):
            pytest.fail("took a memory another process holds")
    assert 0.25 <= time.monotonic() - started < 2
    # An unbounded caller waits, and gets it once the other process lets go.
    got = threading.Event()

    def take() -> None:
        with file_memory_lock(lock_dir, "m1"):
            got.set()

    waiter = threading.Thread(target=take)
    waiter.start()
    assert not got.wait(0.3)
    _release(other_process)
    waiter.join(10)
    assert got.is_set()


def test_other_memories_do_not_wait(tmp_path: Path, other_process: subprocess.Popen[str]) -> None:
    lock_dir = str(tmp_path / "locks")
    other = next(
        f"y{n}" for n in range(1000) if _bucket_path(lock_dir, f"y{n}") != _bucket_path(lock_dir, "m1")
    )
    with bounded_writes(0.3), file_memory_lock(lock_dir, other):
        pass


def test_threads_share_a_bucket_and_the_last_one_releases_it(tmp_path: Path) -> None:
    lock_dir = str(tmp_path / "locks")
    twin = _same_bucket(lock_dir, "m1")
    second_in, let_go = threading.Event(), threading.Event()

    def second() -> None:
        with file_memory_lock(lock_dir, twin):
            second_in.set()
            let_go.wait(30)

    with file_memory_lock(lock_dir, "m1"):
        thread = threading.Thread(target=second)
        thread.start()
        assert second_in.wait(5), "a thread of the holding process waited for its own process"
    # The first thread left; the second still holds the bucket: another process must wait.
    try:
        assert _taken_elsewhere(lock_dir, "m1")
    finally:
        let_go.set()
        thread.join(10)
    assert not _taken_elsewhere(lock_dir, "m1")  # released by the last holder


def test_a_lifecycle_run_on_a_sqlite_file_holds_the_memory_across_processes(tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    store = MemoryStore.from_url(str(db))
    try:
        lifecycle = Lifecycle(store)
        seen: list[bool] = []
        inner = lifecycle.graph

        class Probe:
            """Wraps the graph: while it runs, another process must find the memory taken."""

            def stream(self, *args: object, **kwargs: object) -> Iterator[object]:
                seen.append(_taken_elsewhere(str(db) + "-convmem.locks", "mem_1"))
                yield from inner.stream(*args, **kwargs)  # type: ignore[arg-type]

        lifecycle._graph = Probe()  # type: ignore[assignment]
        lifecycle.run("mem_1", [RawInput([{"role": "user", "content": "I live in Oslo."}])])
        assert seen == [True]
        assert not _taken_elsewhere(str(db) + "-convmem.locks", "mem_1")
    finally:
        store.close()


def _taken_elsewhere(lock_dir: str, memory_id: str) -> bool:
    probe = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from convmem_graph.store.locks import file_memory_lock;"
            "from convmem_graph.store.write_gate import WriteTimeout, bounded_writes\n"
            "try:\n"
            "    with bounded_writes(0.2), file_memory_lock(sys.argv[1], sys.argv[2]): print('free')\n"
            "except WriteTimeout: print('busy')",
            lock_dir,
            memory_id,
        ],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    return probe.stdout.strip() == "busy"
