from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from convmem_graph import ConvMemory, MemoryConfig
from convmem_graph.server.app import create_app
from convmem_graph.signatures import sign_agora_v1, sign_agora_v2, sign_trtc
from tests.conftest import load_fixture
from tests.unit.server.conftest import AGORA_SECRET, BOT, TRTC_KEY, make_settings


def _post_trtc(client: TestClient, raw: str | bytes, *, sign: str | None = "auto") -> Any:
    body = raw.encode("utf-8") if isinstance(raw, str) else raw
    headers = {"Content-Type": "application/json", "SdkAppId": "1400000000"}
    if sign == "auto":
        headers["Sign"] = sign_trtc(body, TRTC_KEY)
    elif sign is not None:
        headers["Sign"] = sign
    return client.post("/webhooks/trtc", content=body, headers=headers)


def _drain(client: TestClient) -> None:
    state = client.app.state  # type: ignore[attr-defined]
    # Under load the cause of a failure is in the inbox: what was still pending, waiting or failed.
    assert state.worker.wait_idle(30), f"worker not idle after 30 s; inbox {state.inbox.counts()}"


def _turns(mem: ConvMemory, memory_id: str) -> list[tuple[str, str, str]]:
    return [(m.role, m.content, m.source) for m in mem.recent(memory_id, 100)]


def test_signed_call_out_of_order_with_retries_equals_file_ingest(
    client: TestClient, trtc_call: dict[str, Any], tmp_path: Path
) -> None:
    bodies = [d["raw_body"] for d in trtc_call["deliveries"]]
    shuffled = bodies + random.Random(7).sample(bodies, 6)  # retries
    random.Random(13).shuffle(shuffled)
    for raw in shuffled:
        assert _post_trtc(client, raw).status_code == 200
    _drain(client)
    served: ConvMemory = client.app.state.mem  # type: ignore[attr-defined]

    with ConvMemory.open(str(tmp_path / "file.db"), config=MemoryConfig(bot_ids=[BOT])) as ref:
        ref.ingest("u_10086", {"deliveries": trtc_call["deliveries"]}, source="trtc", session_ended=True)
        expected = [(role, content) for role, content, _ in _turns(ref, "u_10086")]
        expected_summary = ref.summary("u_10086")
        expected_facts = sorted(f.content for f in ref.fragments("u_10086"))
    got = [(role, content) for role, content, _ in _turns(served, "u_10086")]
    assert got == expected
    assert sorted(f.content for f in served.fragments("u_10086")) == expected_facts
    # The 902 ended the session: the summary was refreshed as with --session-ended.
    summary = served.summary("u_10086")
    assert summary is not None and expected_summary is not None
    assert summary.text == expected_summary.text


def test_late_middle_sentence_lands_in_time_order(client: TestClient) -> None:
    def body(ts: int, text: str) -> str:
        return json.dumps(
            {
                "EventGroupId": 9,
                "EventType": 903,
                "CallbackTs": ts + 40,
                "EventInfo": {
                    "EventMsTs": ts,
                    "TaskId": "task-late",
                    "RoomId": "room-1",
                    "RoomIdType": 1,
                    "Payload": {"UserId": "u_late", "Text": text, "RoundId": "r-1"},
                },
            },
            ensure_ascii=False,
        )

    for ts, text in ((1_767_272_400_000, "第一句。"), (1_767_272_402_000, "第三句。")):
        assert _post_trtc(client, body(ts, text)).status_code == 200
        _drain(client)
    assert _post_trtc(client, body(1_767_272_401_000, "第二句。")).status_code == 200
    _drain(client)
    mem: ConvMemory = client.app.state.mem  # type: ignore[attr-defined]
    assert [m.content for m in mem.recent("u_late", 10)] == ["第一句。第二句。第三句。"]
    # A retry of the middle sentence (new CallbackTs) changes nothing.
    retry = json.loads(body(1_767_272_401_000, "第二句。"))
    retry["CallbackTs"] += 10_000
    assert _post_trtc(client, json.dumps(retry, ensure_ascii=False)).status_code == 200
    _drain(client)
    assert [m.content for m in mem.recent("u_late", 10)] == ["第一句。第二句。第三句。"]


@pytest.mark.parametrize("sign", [None, "", "bm90IHRoZSBzaWduYXR1cmU=", "auto-wrong-key"])
def test_forged_or_unsigned_trtc_delivery_is_refused_and_stores_nothing(
    client: TestClient, trtc_call: dict[str, Any], sign: str | None
) -> None:
    raw = trtc_call["deliveries"][3]["raw_body"]
    if sign == "auto-wrong-key":
        sign = sign_trtc(raw.encode(), "not-the-key")
    response = _post_trtc(client, raw, sign=sign)
    assert response.status_code == 401
    assert client.app.state.inbox.counts() == {}  # type: ignore[attr-defined]


def test_body_over_the_cap_is_413(client: TestClient) -> None:
    big = b'{"EventGroupId": 9, "pad": "' + b"x" * (1024 * 1024) + b'"}'
    assert _post_trtc(client, big).status_code == 413
    assert client.app.state.inbox.counts() == {}  # type: ignore[attr-defined]


def test_signed_ignored_and_unreadable_deliveries_get_200(client: TestClient) -> None:
    assert _post_trtc(client, b"not json").status_code == 200
    ignored = json.dumps({"EventGroupId": 9, "EventType": 909, "EventInfo": {"TaskId": "t9", "Payload": {}}})
    assert _post_trtc(client, ignored).status_code == 200
    counts = client.app.state.inbox.counts()  # type: ignore[attr-defined]
    assert counts.get("failed") == 1


def test_agora_103_is_ingested_into_the_labelled_memory(client: TestClient) -> None:
    doc = load_fixture("agora_webhook_103_agent_history.json")
    raw = json.dumps(doc, ensure_ascii=False).encode("utf-8")
    memory_id = doc["payload"]["labels"]["memory_id"]
    headers = {"Content-Type": "application/json", "Agora-Signature-V2": sign_agora_v2(raw, AGORA_SECRET)}
    assert client.post("/webhooks/agora", content=raw, headers=headers).status_code == 200
    # A retry (new notifyMs, same noticeId) signed with V1 only.
    doc["notifyMs"] += 5000
    raw2 = json.dumps(doc, ensure_ascii=False).encode("utf-8")
    headers2 = {"Content-Type": "application/json", "Agora-Signature": sign_agora_v1(raw2, AGORA_SECRET)}
    assert client.post("/webhooks/agora", content=raw2, headers=headers2).status_code == 200
    _drain(client)
    mem: ConvMemory = client.app.state.mem  # type: ignore[attr-defined]
    assert len(mem.recent(memory_id, 100)) > 0
    assert client.app.state.inbox.counts() == {"done": 1}  # type: ignore[attr-defined]
    bad = {"Content-Type": "application/json", "Agora-Signature-V2": "00" * 32}
    assert client.post("/webhooks/agora", content=raw, headers=bad).status_code == 401


def test_agora_other_events_are_acknowledged_and_ignored(client: TestClient) -> None:
    raw = json.dumps({"noticeId": "n1", "productId": 17, "eventType": 111, "payload": {}}).encode()
    headers = {"Agora-Signature-V2": sign_agora_v2(raw, AGORA_SECRET)}
    assert client.post("/webhooks/agora", content=raw, headers=headers).status_code == 200
    assert client.app.state.inbox.counts() == {}  # type: ignore[attr-defined]


def test_room_mapping_and_registered_tasks(tmp_path: Path, trtc_call: dict[str, Any]) -> None:
    settings = make_settings(tmp_path, trtc_memory_from="task")
    with TestClient(create_app(settings)) as client:
        for d in trtc_call["deliveries"]:
            assert _post_trtc(client, d["raw_body"]).status_code == 200
        _drain(client)
        inbox = client.app.state.inbox  # type: ignore[attr-defined]
        assert set(inbox.counts()) == {"waiting"}
        task_id = json.loads(trtc_call["deliveries"][0]["raw_body"])["EventInfo"]["TaskId"]
        assert client.post("/tasks/trtc", json={"task_id": task_id, "memory_id": "mem_x"}).status_code == 200
        _drain(client)
        assert set(inbox.counts()) == {"done"}
        assert len(client.app.state.mem.recent("mem_x", 100)) > 0  # type: ignore[attr-defined]


def test_pending_deliveries_survive_a_restart(tmp_path: Path, trtc_call: dict[str, Any]) -> None:
    settings = make_settings(tmp_path)
    app = create_app(settings)
    # No lifespan (no worker): deliveries are acknowledged and only stored, as before a crash.
    client = TestClient(app)
    for d in trtc_call["deliveries"]:
        assert _post_trtc(client, d["raw_body"]).status_code == 200
    assert app.state.inbox.pending_count == len(trtc_call["deliveries"]) - 1  # one retry
    app.state.mem.close()
    with TestClient(create_app(settings)) as again:
        _drain(again)
        assert len(again.app.state.mem.recent("u_10086", 100)) > 0  # type: ignore[attr-defined]


def test_agora_cap_fits_a_long_history_and_refuses_a_mebibyte(client: TestClient) -> None:
    doc = load_fixture("agora_webhook_103_agent_history.json")
    item = {
        "role": "user",
        "content": "我今天跑了八公里，配速六分半。" * 4,
        "turn_id": 1,
        "timestamp": 1767268809870,
    }
    doc["payload"]["contents"] = [dict(item, turn_id=i) for i in range(1024)]
    raw = json.dumps(doc, ensure_ascii=False).encode("utf-8")
    assert 64 * 1024 < len(raw) < 512 * 1024
    headers = {"Agora-Signature-V2": sign_agora_v2(raw, AGORA_SECRET)}
    assert client.post("/webhooks/agora", content=raw, headers=headers).status_code == 200
    big = b'{"pad": "' + b"x" * (1024 * 1024) + b'"}'
    headers = {"Agora-Signature-V2": sign_agora_v2(big, AGORA_SECRET)}
    assert client.post("/webhooks/agora", content=big, headers=headers).status_code == 413


def test_a_signed_delivery_outside_the_replay_window_is_refused(tmp_path: Path) -> None:
    import time

    app = create_app(make_settings(tmp_path, webhook_tolerance_ms=300_000))
    now_ms = int(time.time() * 1000)
    body = {
        "EventGroupId": 9,
        "EventType": 903,
        "CallbackTs": now_ms,
        "EventInfo": {"TaskId": "t_window", "RoomId": "r", "EventMsTs": now_ms, "UserId": "u_w"},
    }
    with TestClient(app) as client:
        stale = {**body, "CallbackTs": now_ms - 24 * 3600 * 1000}
        assert _post_trtc(client, json.dumps(stale)).status_code == 401
        assert _post_trtc(client, json.dumps(body)).status_code == 200
        agora_stale = json.dumps({"noticeId": "n1", "eventType": 999, "notifyMs": now_ms - 3600 * 1000})
        raw = agora_stale.encode()
        headers = {"Agora-Signature-V2": sign_agora_v2(raw, AGORA_SECRET), "Content-Type": "application/json"}
        assert client.post("/webhooks/agora", content=raw, headers=headers).status_code == 401
        fresh = json.dumps({"noticeId": "n2", "eventType": 999, "notifyMs": now_ms}).encode()
        headers["Agora-Signature-V2"] = sign_agora_v2(fresh, AGORA_SECRET)
        assert client.post("/webhooks/agora", content=fresh, headers=headers).status_code == 200
