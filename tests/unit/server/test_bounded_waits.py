"""Bounded waits (issue 21 item 3): a held write lock never hangs ``convmem serve``.

A foreign writer (another file descriptor's ``flock`` on the write gate, another connection's
``BEGIN IMMEDIATE``, a subprocess holding either) makes a request's write give up after
``serve_write_timeout_s`` with a 503 and ``Retry-After``; reads and ``/healthz`` do not wait; a 503'd
webhook stored nothing and its retry after the lock is stored once. ``/healthz`` reports an
unreachable PostgreSQL with 503. The cases with sockets, a live server or another process are in
``tests/integration/test_serve_bounded_waits.py``.
"""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("fastapi", reason="the server extra is not installed (pip install -e '.[server]')")

from fastapi.testclient import TestClient  # noqa: E402

from convmem_graph.server.app import create_app  # noqa: E402
from convmem_graph.server.health import store_busy_response  # noqa: E402
from convmem_graph.signatures import sign_trtc  # noqa: E402
from convmem_graph.store import MemoryStore  # noqa: E402
from convmem_graph.store.locks import memory_lock  # noqa: E402
from convmem_graph.store.write_gate import WriteTimeout, bounded_writes, write_gate  # noqa: E402
from tests.unit.server.conftest import TRTC_KEY, make_settings  # noqa: E402

_DELIVERY = {
    "EventGroupId": 9,
    "EventType": 903,
    "CallbackTs": 1767272403440,
    "EventInfo": {
        "EventMsTs": 1767272403400,
        "TaskId": "v2_bounded_waits_task",
        "RoomId": "convmem_bounded_room",
        "RoomIdType": 1,
        "Payload": {
            "UserId": "user_bounded",
            "Text": "hello",
            "StartTimeMs": 900,
            "EndTimeMs": 2850,
            "RoundId": "r-0001",
        },
    },
}


def _delivery(i: int) -> bytes:
    doc = json.loads(json.dumps(_DELIVERY))
    doc["EventInfo"]["EventMsTs"] += i
    doc["EventInfo"]["Payload"]["Text"] = f"message number {i}"
    doc["EventInfo"]["Payload"]["RoundId"] = f"r-{i:04d}"
    return json.dumps(doc, ensure_ascii=False).encode("utf-8")


def _trtc_headers(body: bytes) -> dict[str, str]:
    return {"Content-Type": "application/json", "SdkAppId": "1400000000", "Sign": sign_trtc(body, TRTC_KEY)}


# -- the write gate, the busy timeout and the memory lock ------------------------------------
@contextmanager
def _foreign_flock(db: Path) -> Iterator[None]:
    """The gate's lock file locked on a descriptor of its own: for flock, another process."""
    import fcntl

    fd = os.open(os.path.realpath(db) + "-convmem.lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def test_gate_wait_is_bounded_and_unbounded_outside(tmp_path: Path) -> None:
    db = tmp_path / "gate.db"
    gate = write_gate(str(db))
    with _foreign_flock(db):
        started = time.monotonic()
        with pytest.raises(WriteTimeout) as caught, bounded_writes(0.3), gate.hold():
            pass
        waited = time.monotonic() - started
        assert 0.25 <= waited < 1.0
        assert caught.value.timeout_s == 0.3
        # Outside a bound the gate waits as before: this thread only gets it once it is free.
        got = threading.Event()

        def writer() -> None:
            with gate.hold():
                got.set()

        thread = threading.Thread(target=writer, daemon=True)
        thread.start()
        assert not got.wait(0.5)
    assert got.wait(5)
    thread.join(5)
    with bounded_writes(0.3), gate.hold():  # free again: taken at once
        pass


def test_gate_wait_behind_a_thread_of_this_process_is_bounded(tmp_path: Path) -> None:
    gate = write_gate(str(tmp_path / "inproc.db"))
    held, release = threading.Event(), threading.Event()

    def holder() -> None:
        with gate.hold():
            held.set()
            release.wait(10)

    thread = threading.Thread(target=holder, daemon=True)
    thread.start()
    assert held.wait(5)
    try:
        with pytest.raises(WriteTimeout, match="this process"), bounded_writes(0.2), gate.hold():
            pass
    finally:
        release.set()
        thread.join(5)


def test_begin_immediate_behind_a_foreign_writer_is_bounded(tmp_path: Path) -> None:
    db = tmp_path / "busy.db"
    store = MemoryStore.from_url(str(db))
    foreign = sqlite3.connect(db, isolation_level=None)
    try:
        foreign.execute("BEGIN IMMEDIATE")  # a program that does not pass the write gate
        started = time.monotonic()
        with pytest.raises(WriteTimeout), bounded_writes(0.4), store.transaction() as conn:
            conn.exec_driver_sql("CREATE TABLE never (k TEXT)")
        assert 0.35 <= time.monotonic() - started < 1.5
        # Readers do not wait for the writer (WAL).
        started = time.monotonic()
        with store.read() as conn:
            assert conn.exec_driver_sql("SELECT count(*) FROM cm_memories").scalar() == 0
        assert time.monotonic() - started < 0.2
        foreign.execute("ROLLBACK")
        # The connection got its 30 s busy timeout back, and writes work again.
        with store.transaction() as conn:
            conn.exec_driver_sql("CREATE TABLE after_lock (k TEXT)")
            assert conn.exec_driver_sql("PRAGMA busy_timeout").scalar() == 30_000
    finally:
        foreign.close()
        store.close()


def test_memory_lock_wait_is_bounded() -> None:
    held, release = threading.Event(), threading.Event()

    def run() -> None:
        with memory_lock("scope-bounded", "mem_1"):
            held.set()
            release.wait(10)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    assert held.wait(5)
    try:
        with pytest.raises(WriteTimeout, match="mem_1"), bounded_writes(0.2):
            with memory_lock("scope-bounded", "mem_1"):
                pass
        with bounded_writes(0.2), memory_lock("scope-bounded", "mem_2"):  # other memories: no wait
            pass
    finally:
        release.set()
        thread.join(5)


# -- the app: 503 with Retry-After, /healthz -----------------------------------------------
def test_webhook_and_task_writes_answer_503_behind_the_gate_and_store_nothing(tmp_path: Path) -> None:
    settings = make_settings(tmp_path, serve_write_timeout_s=0.5)
    body = _delivery(1)
    with TestClient(create_app(settings)) as client:
        with _foreign_flock(tmp_path / "serve.db"):
            started = time.monotonic()
            answer = client.post("/webhooks/trtc", content=body, headers=_trtc_headers(body))
            assert time.monotonic() - started < 2.0
            assert answer.status_code == 503
            assert answer.headers["Retry-After"] == "1"
            assert answer.json()["code"] == 503
            task = client.post("/tasks/trtc", json={"task_id": "t-1", "memory_id": "mem_1"})
            assert task.status_code == 503
            assert task.json()["code"] == "Store.Busy"
            bailian = client.post(
                "/api/v2/apps/memory/add",
                json={"user_id": "u1", "messages": [{"role": "user", "content": "我叫林晓"}]},
            )
            assert bailian.status_code == 503, bailian.text
            assert bailian.json()["code"] == "Store.Busy"
            assert bailian.headers["Retry-After"] == "1"
            health = client.get("/healthz")
            assert health.status_code == 200, health.text
            assert client.get("/livez").json() == {"status": "ok"}
            assert client.app.state.inbox.counts() == {}  # type: ignore[attr-defined]
        retry = client.post("/webhooks/trtc", content=body, headers=_trtc_headers(body))
        assert retry.status_code == 200
        again = client.post("/webhooks/trtc", content=body, headers=_trtc_headers(body))
        assert again.status_code == 200
        counts = client.app.state.inbox.counts()  # type: ignore[attr-defined]
        assert sum(counts.values()) == 1


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("/v1/chat/completions", {"error": {"type": "server_busy", "code": "store_busy"}}),
        ("/webhooks/agora", {"code": 503}),
        ("/api/v2/apps/memory/add", {"code": "Store.Busy"}),
    ],
)
def test_the_503_comes_in_the_callers_error_shape(path: str, expected: dict[str, Any]) -> None:
    from starlette.requests import Request

    request = Request({"type": "http", "method": "POST", "path": path, "headers": [], "query_string": b""})
    answer = asyncio.run(store_busy_response(request, WriteTimeout("locked", 2.5)))
    assert answer.status_code == 503
    assert answer.headers["Retry-After"] == "3"
    body = json.loads(bytes(answer.body))
    for key, value in expected.items():
        if isinstance(value, dict):
            assert value.items() <= body[key].items()
        else:
            assert body[key] == value
    assert "message" in (body["error"] if "error" in body else body)
