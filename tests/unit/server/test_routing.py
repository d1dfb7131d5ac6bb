from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from convmem_graph.cli import main
from convmem_graph.server.app import create_app
from convmem_graph.server.inbox import TaskInfo
from convmem_graph.server.routing import TrtcFields, resolve_task
from convmem_graph.server.settings import ServeSettings, is_loopback
from convmem_graph.signatures import sign_trtc
from tests.unit.server.conftest import TRTC_KEY, make_settings


def test_resolve_task_rules() -> None:
    fresh = TaskInfo("t")
    # Without bot ids a 903 speaker is ambiguous; a 904 speaker is the human.
    assert resolve_task(fresh, TrtcFields(903, "t", "r", "bot"), mode="user", bot_ids=()).memory_id is None
    assert resolve_task(fresh, TrtcFields(904, "t", "r", "u1"), mode="user", bot_ids=()).memory_id == "u1"
    # A 905 names the bot; afterwards another 903 speaker is the human.
    known_bot = resolve_task(fresh, TrtcFields(905, "t", "r", "bot"), mode="user", bot_ids=())
    assert (known_bot.bot_id, known_bot.memory_id) == ("bot", None)
    human = resolve_task(known_bot, TrtcFields(903, "t", "r", "u2"), mode="user", bot_ids=())
    assert (human.human_id, human.memory_id) == ("u2", "u2")
    # Configured bot ids classify a 903 at once; the bot's own sentence never becomes the memory.
    assert (
        resolve_task(fresh, TrtcFields(903, "t", "r", "bot"), mode="user", bot_ids=("bot",)).memory_id is None
    )
    assert (
        resolve_task(fresh, TrtcFields(903, "t", "r", "u3"), mode="user", bot_ids=("bot",)).memory_id == "u3"
    )
    # Room mode and registered tasks.
    assert (
        resolve_task(fresh, TrtcFields(902, "t", "room_9", None), mode="room", bot_ids=()).memory_id
        == "room_9"
    )
    assert (
        resolve_task(fresh, TrtcFields(903, "t", "r", "u4"), mode="task", bot_ids=("bot",)).memory_id is None
    )
    registered = TaskInfo("t", memory_id="mem_x")
    assert (
        resolve_task(registered, TrtcFields(903, "t", "r", "u4"), mode="user", bot_ids=()).memory_id
        == "mem_x"
    )


def _body(
    event: int, user: str | None, text: str = "", ts: int = 1_767_272_400_000, round_id: str = "r-1"
) -> bytes:
    payload: dict[str, Any] = {"RoundId": round_id}
    if user is not None:
        payload.update(UserId=user, Text=text)
    doc = {
        "EventGroupId": 9,
        "EventType": event,
        "CallbackTs": ts + 30,
        "EventInfo": {
            "EventMsTs": ts,
            "TaskId": "task-g",
            "RoomId": "room-g",
            "RoomIdType": 1,
            "Payload": payload,
        },
    }
    return json.dumps(doc, ensure_ascii=False).encode("utf-8")


def test_bot_greeting_before_the_human_waits_then_lands_in_the_humans_memory(tmp_path: Path) -> None:
    settings = make_settings(tmp_path, bot_ids=[])  # no bot ids: the greeting's speaker is unknown
    with TestClient(create_app(settings)) as client:

        def post(body: bytes) -> None:
            r = client.post("/webhooks/trtc", content=body, headers={"Sign": sign_trtc(body, TRTC_KEY)})
            assert r.status_code == 200

        post(_body(903, "bot_x", "你好，我是小雨。", round_id="r-0"))
        assert client.app.state.worker.wait_idle(30)  # type: ignore[attr-defined]
        inbox = client.app.state.inbox  # type: ignore[attr-defined]
        assert inbox.counts() == {"waiting": 1}
        post(_body(904, "u_g", ts=1_767_272_402_000, round_id="r-1"))
        post(_body(903, "u_g", "我对芒果过敏。", ts=1_767_272_403_000, round_id="r-1"))
        post(_body(902, None, ts=1_767_272_404_000))
        assert client.app.state.worker.wait_idle(30)  # type: ignore[attr-defined]
        assert inbox.counts() == {"done": 4}
        turns = [(m.role, m.content) for m in client.app.state.mem.recent("u_g", 10)]  # type: ignore[attr-defined]
    assert turns == [("assistant", "你好，我是小雨。"), ("user", "我对芒果过敏。")]


def test_binding_beyond_loopback_needs_a_token(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("CONVMEM_SERVE_TOKEN", raising=False)
    code = main(["serve", "--host", "0.0.0.0", "--db", str(tmp_path / "x.db")])
    assert code == 2 and "without a token" in capsys.readouterr().err
    assert is_loopback("127.0.0.1") and is_loopback("::1") and not is_loopback("10.0.0.5")


def test_settings_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CONVMEM_TRTC_CALLBACK_KEY", "s3cr3t-key-1")
    monkeypatch.setenv("CONVMEM_SERVE_TOKEN", "s3cr3t-tok")
    monkeypatch.setenv("CONVMEM_BOT_IDS", "a, b")
    monkeypatch.setenv("CONVMEM_PROXY_MEMORY_KEYS", "header:x-user-id")
    s = ServeSettings()
    assert (s.secret("trtc_callback_key"), s.secret("token"), s.bot_ids) == (
        "s3cr3t-key-1",
        "s3cr3t-tok",
        ["a", "b"],
    )
    assert s.proxy_memory_keys == ["header:x-user-id"]
    assert "s3cr3t" not in repr(s)
    monkeypatch.setenv("CONVMEM_PROXY_MEMORY_KEYS", "cookie:x")
    with pytest.raises(ValueError, match="proxy_memory_keys"):
        ServeSettings()
