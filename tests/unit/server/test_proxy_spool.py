"""The proxy's turn spool (issue 21 item 4): a turn answered 200 during an outage is stored later, once.

The outage is simulated: the app's ``Inbox.add`` raises ``sqlalchemy.exc.OperationalError`` (what a
dropped PostgreSQL connection or a SQLite lock past its wait raises) until the test "recovers" it.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select
from sqlalchemy.exc import OperationalError

from convmem_graph import ConvMemory
from convmem_graph.server.app import create_app
from convmem_graph.server.inbox import Inbox, inbox_table
from convmem_graph.server.settings import ServeSettings
from convmem_graph.server.spool import QUARANTINE_NAME, SpooledTurn, TurnSpool
from tests.unit.server.conftest import make_settings
from tests.unit.server.test_proxy import UPSTREAM, UPSTREAM_KEY, FakeUpstream

MEMORY = "u_spool"


class Outage:
    """Makes an app's ``Inbox.add`` fail like a database that is down, until :meth:`recover`."""

    def __init__(self, inbox: Inbox, monkeypatch: pytest.MonkeyPatch) -> None:
        self.down = True
        self.failed = 0
        real: Callable[..., bool] = inbox.add

        def add(*args: Any, **kwargs: Any) -> bool:
            if self.down:
                self.failed += 1
                raise OperationalError(
                    "INSERT INTO cm_serve_inbox", {}, Exception("server closed the connection")
                )
            return real(*args, **kwargs)

        monkeypatch.setattr(inbox, "add", add)

    def recover(self) -> None:
        self.down = False


def _settings(tmp_path: Path) -> ServeSettings:
    # A short retry so the test sees the flusher's passes; the default waits a second.
    return make_settings(
        tmp_path, upstream_url=UPSTREAM, upstream_api_key=UPSTREAM_KEY, proxy_spool_retry_s=0.05
    )


@contextmanager
def _serve(settings: ServeSettings) -> Iterator[TestClient]:
    app = create_app(settings, upstream_transport=httpx.MockTransport(FakeUpstream().handler))
    with TestClient(app) as client:
        yield client


def _request(i: int) -> dict[str, Any]:
    return {
        "model": "m",
        "user": MEMORY,
        "stream": i % 2 == 0,  # streamed and non-streamed turns are recorded on two paths
        "messages": [{"role": "user", "content": f"第{i}句：我今天去了第{i}个地方。"}],
    }


def _send(client: TestClient, n: int, first: int = 0) -> None:
    for i in range(first, first + n):
        headers = {"X-Request-Id": f"req-{i}"}
        if i % 2 == 0:
            with client.stream("POST", "/v1/chat/completions", json=_request(i), headers=headers) as response:
                assert response.status_code == 200
                b"".join(response.iter_raw())
        else:
            response = client.post("/v1/chat/completions", json=_request(i), headers=headers)
            assert response.status_code == 200


def _wait(condition: Callable[[], bool], timeout: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def _inbox_rows(client: TestClient) -> int:
    mem: ConvMemory = client.app.state.mem  # type: ignore[attr-defined]
    with mem.store.read() as conn:
        query = select(func.count()).select_from(inbox_table).where(inbox_table.c.vendor == "proxy")
        return int(conn.execute(query).scalar_one())


def _spool_dir(settings: ServeSettings) -> Path:
    # Unset CONVMEM_PROXY_SPOOL_DIR: next to the SQLite file.
    return Path(settings.db + ".proxy-spool")


def _spool_files(settings: ServeSettings) -> list[Path]:
    return sorted(_spool_dir(settings).glob("turns-*.jsonl"))


def _stored_user_texts(client: TestClient) -> list[str]:
    assert client.app.state.worker.wait_idle(30)  # type: ignore[attr-defined]
    mem: ConvMemory = client.app.state.mem  # type: ignore[attr-defined]
    return [m.content for m in mem.recent(MEMORY, 1000) if m.role == "user"]


def _spool_some_turns(settings: ServeSettings, n: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Run a server whose database stays down until it stops: its ``n`` turns stay spooled."""
    with _serve(settings) as client:
        outage = Outage(client.app.state.inbox, monkeypatch)  # type: ignore[attr-defined]
        _send(client, n)
        flusher = client.app.state.proxy_spool  # type: ignore[attr-defined]
        assert _wait(lambda: flusher.spool.pending == n)
        assert outage.failed >= 1
    monkeypatch.undo()


def test_turns_answered_during_an_outage_are_stored_once_after_recovery(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    n = 24
    settings = _settings(tmp_path)
    with _serve(settings) as client:
        outage = Outage(client.app.state.inbox, monkeypatch)  # type: ignore[attr-defined]
        flusher = client.app.state.proxy_spool  # type: ignore[attr-defined]
        _send(client, n)  # every one answered 200 while the inbox is down
        assert _wait(lambda: flusher.spool.pending == n)
        assert _inbox_rows(client) == 0
        assert _spool_files(settings), "the turns are on disk, not only in memory"
        time.sleep(0.3)  # several failed flusher passes: none may store or lose a turn
        assert flusher.spool.pending == n and _inbox_rows(client) == 0
        outage.recover()
        assert _wait(lambda: flusher.spool.pending == 0 and _inbox_rows(client) == n)
        # Turns after the recovery go straight to the inbox again.
        _send(client, 2, first=n)
        assert _wait(lambda: _inbox_rows(client) == n + 2)
        texts = _stored_user_texts(client)
        expected = [_request(i)["messages"][0]["content"] for i in range(n + 2)]
        assert sorted(texts) == sorted(expected), "every turn stored exactly once"
        assert texts == expected, "in the order they were answered"
        assert not _spool_files(settings)


def test_a_restart_stores_the_turns_an_earlier_process_spooled(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = _settings(tmp_path)
    _spool_some_turns(settings, 6, monkeypatch)
    assert _spool_files(settings), "the stopped server left its spooled turns on disk"
    with _serve(settings) as client:
        # Flushed at start-up, before the first request is served.
        assert _inbox_rows(client) == 6
        assert not _spool_files(settings)
        assert len(_stored_user_texts(client)) == 6


def test_a_corrupt_spool_line_is_quarantined_and_the_rest_stored(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = _settings(tmp_path)
    _spool_some_turns(settings, 3, monkeypatch)
    # Each flusher pass closes the file being appended to, so the turns may be in several files.
    files = _spool_files(settings)
    good = [line for path in files for line in path.read_bytes().splitlines(keepends=True)]
    assert len(good) == 3
    for path in files[1:]:
        path.unlink()
    spool_file = files[0]
    torn = good[0][: len(good[0]) // 2] + b"\n"  # a write cut short by a crash
    wrong = json.dumps({"v": 1, "vendor": "proxy"}).encode() + b"\n"  # JSON, but not a turn
    spool_file.write_bytes(good[0] + torn + b"\xff\xfe\n" + good[1] + wrong + good[2])
    with _serve(settings) as client:
        assert _inbox_rows(client) == 3
        assert len(_stored_user_texts(client)) == 3
    assert not _spool_files(settings)
    quarantined = (_spool_dir(settings) / QUARANTINE_NAME).read_text(encoding="utf-8").splitlines()
    assert len(quarantined) == 3
    assert {json.loads(line)["file"] for line in quarantined} == {spool_file.name}


def test_the_file_of_a_live_process_is_left_to_it(tmp_path: Path) -> None:
    # Two spools on one directory stand for two processes: a file's flock is held by its writer.
    writer, other = TurnSpool(tmp_path), TurnSpool(tmp_path)
    writer.append(SpooledTurn(vendor="proxy", key="proxy:k1", body="{}", memory_id="m"))
    stored: list[str] = []

    def add(turn: SpooledTurn) -> bool:
        stored.append(turn.key)
        return True

    assert other.flush(add).stored == 0
    writer.close()  # its process is gone: the file stays, unlocked
    assert other.flush(add).stored == 1
    assert stored == ["proxy:k1"] and not list(tmp_path.glob("turns-*.jsonl"))


def test_a_turn_the_database_refuses_is_quarantined_not_retried_forever(tmp_path: Path) -> None:
    spool = TurnSpool(tmp_path)
    spool.append(SpooledTurn(vendor="proxy", key="proxy:bad", body="{}", memory_id="m"))
    spool.append(SpooledTurn(vendor="proxy", key="proxy:ok", body="{}", memory_id="m"))

    def add(turn: SpooledTurn) -> bool:
        if turn.key == "proxy:bad":
            raise ValueError("a value the database refuses")
        return True

    result = spool.flush(add)
    assert (result.stored, result.quarantined, result.left) == (1, 1, 0)
    assert spool.flush(add).stored == 0


def test_a_full_spool_answers_503_before_the_upstream_and_loses_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # CONVMEM_PROXY_SPOOL_MAX_TURNS: with 3 turns spooled the 4th request is refused before the
    # upstream sees it (an answer that could not be kept is never given); after recovery all 3 are
    # stored and requests are answered again.
    cap = 3
    settings = make_settings(
        tmp_path,
        upstream_url=UPSTREAM,
        upstream_api_key=UPSTREAM_KEY,
        proxy_spool_retry_s=0.05,
        proxy_spool_max_turns=cap,
    )
    upstream = FakeUpstream()
    app = create_app(settings, upstream_transport=httpx.MockTransport(upstream.handler))
    with TestClient(app) as client:
        outage = Outage(client.app.state.inbox, monkeypatch)  # type: ignore[attr-defined]
        flusher = client.app.state.proxy_spool  # type: ignore[attr-defined]
        _send(client, cap)
        assert _wait(lambda: flusher.spool.pending == cap) and flusher.spool.full
        seen = len(upstream.requests)
        refused = client.post("/v1/chat/completions", json=_request(cap), headers={"X-Request-Id": "req-x"})
        assert refused.status_code == 503
        assert refused.headers["Retry-After"] == "5"
        error = refused.json()["error"]
        assert error["code"] == "store_busy" and "CONVMEM_PROXY_SPOOL_MAX_TURNS" in error["message"]
        assert len(upstream.requests) == seen, "the upstream was not called for the refused request"
        assert flusher.spool.pending == cap
        outage.recover()
        assert _wait(lambda: flusher.spool.pending == 0 and _inbox_rows(client) == cap)
        assert not flusher.spool.full
        _send(client, 1, first=cap)  # answered again once the spool drained
        assert _wait(lambda: _inbox_rows(client) == cap + 1)
        expected = [_request(i)["messages"][0]["content"] for i in range(cap + 1)]
        assert _stored_user_texts(client) == expected


def test_the_cap_is_read_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CONVMEM_PROXY_SPOOL_MAX_TURNS", "7")
    assert ServeSettings(_env_file=None).proxy_spool_max_turns == 7  # type: ignore[call-arg]
    monkeypatch.setenv("CONVMEM_PROXY_SPOOL_MAX_TURNS", "0")
    with pytest.raises(ValueError, match="proxy_spool_max_turns"):
        ServeSettings(_env_file=None)  # type: ignore[call-arg]
