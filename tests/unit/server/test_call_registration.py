"""Issue 20, item 3: a call registered at start routes its webhooks, 103 and LLM requests to its memory.

``start_call`` runs with fake vendor clients that keep the body they are sent (the vendor HTTP
itself has cassette tests in ``tests/unit/clients``). Then the server gets the call's traffic
with nothing naming the memory: no ``CONVMEM_BOT_IDS``, a 103 without labels, a proxy request
with only TRTC's ``X-Task-Id``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

from convmem_graph import ConvMemory
from convmem_graph.cli.call import start_call
from convmem_graph.server.app import create_app
from convmem_graph.server.calls import CALL_PARAM, agora_task_id, tag_call_options
from convmem_graph.server.inbox import Inbox
from convmem_graph.server.proxy import MEMORY_HEADER
from convmem_graph.signatures import sign_agora_v2, sign_trtc
from tests.conftest import load_fixture
from tests.unit.server.conftest import AGORA_SECRET, TRTC_KEY, make_settings
from tests.unit.server.test_proxy import UPSTREAM, UPSTREAM_KEY, FakeUpstream

MEMORY = "mem_lin_xiao"


class FakeTRTC:
    """Keeps the StartAIConversation body; answers a task id."""

    def __init__(self) -> None:
        self.bodies: list[dict[str, Any]] = []

    def start_ai_conversation(self, body: dict[str, Any]) -> str:
        self.bodies.append(body)
        return "task-registered-1"


class FakeAgora:
    """Keeps the join body; answers an agent id."""

    def __init__(self) -> None:
        self.bodies: list[dict[str, Any]] = []

    def join(self, body: dict[str, Any]) -> dict[str, Any]:
        self.bodies.append(body)
        return {"agent_id": "AGENT-REG-1", "status": "RUNNING"}


def _trtc_options() -> dict[str, Any]:
    body = load_fixture("trtc_start_ai_conversation_request.json")["body"]
    return {
        "sdk_app_id": body["SdkAppId"],
        "room_id": body["RoomId"],
        "room_id_type": 1,
        "agent_config": body["AgentConfig"],
        "tts_config": json.loads(body["TTSConfig"]),
        "llm": {
            "LLMType": "openai",
            "Model": "qwen-plus",
            "APIUrl": "http://convmem.example/v1/chat/completions",
        },
    }


def _agora_options() -> dict[str, Any]:
    join = load_fixture("agora_join_request.json")
    properties = {k: v for k, v in join["properties"].items() if k not in ("llm", "labels")}
    return {"name": "reg-agent", "properties": properties, "llm": {"url": "http://convmem.example/v1/chat"}}


def test_tagging_keeps_what_the_team_set() -> None:
    tagged = tag_call_options("trtc", {"llm": {"MetaInfo": {"memory_id": "theirs", "x": 1}}}, "ours")
    assert tagged["llm"]["MetaInfo"] == {"memory_id": "theirs", "x": 1}
    options = {"properties": {"labels": {"memory_id": "theirs"}}, "params": {"model": "m"}}
    tagged = tag_call_options("agora", options, "ours")
    assert tagged["properties"]["labels"] == {"memory_id": "theirs"}
    assert tagged["params"] == {"memory_id": "ours", "model": "m"}
    assert options == {"properties": {"labels": {"memory_id": "theirs"}}, "params": {"model": "m"}}


def test_trtc_call_start_registers_task_bot_and_human_and_tags_meta_info(tmp_path: Path) -> None:
    db = str(tmp_path / "calls.db")
    client = FakeTRTC()
    with ConvMemory.open(db) as mem:
        task_id = start_call(mem, "trtc", MEMORY, _trtc_options(), client=client)
        info = Inbox(mem.store).task(task_id)
    agent = client.bodies[0]["AgentConfig"]
    assert info is not None
    assert (info.memory_id, info.bot_id, info.human_id) == (MEMORY, agent["UserId"], agent["TargetUserId"])
    assert json.loads(client.bodies[0]["LLMConfig"])["MetaInfo"] == {"memory_id": MEMORY}


def test_no_memory_tag_leaves_the_options_alone(tmp_path: Path) -> None:
    client = FakeTRTC()
    with ConvMemory.open(str(tmp_path / "calls.db")) as mem:
        start_call(mem, "trtc", MEMORY, _trtc_options(), client=client, tag=False)
    assert "MetaInfo" not in json.loads(client.bodies[0]["LLMConfig"])


def _bot_sentence(task_id: str, bot: str) -> bytes:
    doc = {
        "EventGroupId": 9,
        "EventType": 903,
        "CallbackTs": 1767272403440,
        "EventInfo": {
            "EventMsTs": 1767272403400,
            "TaskId": task_id,
            "RoomId": "room-x",
            "RoomIdType": 1,
            "Payload": {"UserId": bot, "Text": "林晓，我在呢～", "RoundId": "r-0001"},
        },
    }
    return json.dumps(doc, ensure_ascii=False).encode("utf-8")


@pytest.fixture
def served(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    for var in ("CONVMEM_SERVE_TOKEN", "CONVMEM_BOT_IDS"):
        monkeypatch.delenv(var, raising=False)
    upstream = FakeUpstream()
    settings = make_settings(
        tmp_path,
        bot_ids=[],  # nothing but the registration says who the bot is
        trtc_memory_from="task",
        upstream_url=UPSTREAM,
        upstream_api_key=UPSTREAM_KEY,
    )
    return settings, upstream


def test_a_registered_trtc_call_routes_its_first_bot_sentence_and_its_llm_requests(served: Any) -> None:
    settings, upstream = served
    trtc = FakeTRTC()
    with ConvMemory.open(settings.db) as mem:
        task_id = start_call(mem, "trtc", MEMORY, _trtc_options(), client=trtc)
    bot = trtc.bodies[0]["AgentConfig"]["UserId"]
    app = create_app(settings, upstream_transport=httpx.MockTransport(upstream.handler))
    with TestClient(app) as client:
        raw = _bot_sentence(task_id, bot)
        headers = {"Content-Type": "application/json", "Sign": sign_trtc(raw, TRTC_KEY)}
        assert client.post("/webhooks/trtc", content=raw, headers=headers).status_code == 200
        # An LLM request that names nothing but the task (TRTC's own header).
        answer = client.post(
            "/v1/chat/completions",
            json={"model": "qwen-plus", "messages": [{"role": "user", "content": "我回来啦"}]},
            headers={"X-Task-Id": task_id, "X-Request-Id": "req-1"},
        )
        assert answer.status_code == 200 and answer.headers[MEMORY_HEADER] == "used"
        assert app.state.worker.wait_idle(30)
        turns = app.state.mem.recent(MEMORY, 10)
    # The welcome sentence, alone and before any 905, is the bot's; the proxy turn is stored too.
    assert ("assistant", "林晓，我在呢～") in [(m.role, m.content) for m in turns]
    assert "我回来啦" in [m.content for m in turns if m.role == "user"]


def test_a_registered_agora_agent_routes_a_103_without_labels(served: Any) -> None:
    settings, _upstream = served
    agora = FakeAgora()
    with ConvMemory.open(settings.db) as mem:
        agent_id = start_call(mem, "agora", MEMORY, _agora_options(), client=agora)
        assert Inbox(mem.store).task(agora_task_id(agent_id)) is not None
    sent = agora.bodies[0]["properties"]
    assert sent["labels"] == {"memory_id": MEMORY}
    assert sent["llm"]["params"]["memory_id"] == MEMORY
    doc = load_fixture("agora_webhook_103_agent_history.json")
    doc["payload"]["agent_id"] = agent_id
    del doc["payload"]["labels"]
    raw = json.dumps(doc, ensure_ascii=False).encode("utf-8")
    app = create_app(settings)
    with TestClient(app) as client:
        headers = {"Content-Type": "application/json", "Agora-Signature-V2": sign_agora_v2(raw, AGORA_SECRET)}
        assert client.post("/webhooks/agora", content=raw, headers=headers).status_code == 200
        assert app.state.worker.wait_idle(30)
        assert len(app.state.mem.recent(MEMORY, 100)) > 5
        # Another agent's 103 without labels is kept for a human, not guessed.
        doc["payload"]["agent_id"] = "AGENT-NOT-REGISTERED"
        doc["noticeId"] = "another-notice"
        raw = json.dumps(doc, ensure_ascii=False).encode("utf-8")
        headers = {"Content-Type": "application/json", "Agora-Signature-V2": sign_agora_v2(raw, AGORA_SECRET)}
        assert client.post("/webhooks/agora", content=raw, headers=headers).status_code == 200
        assert app.state.inbox.counts() == {"done": 1, "failed": 1}


def test_the_registration_routes_take_the_speakers(served: Any) -> None:
    settings, _upstream = served
    app = create_app(settings)
    with TestClient(app) as client:
        body = {"task_id": "t-9", "memory_id": MEMORY, "bot_id": "bot-9", "human_id": "u-9"}
        assert client.post("/tasks/trtc", json=body).status_code == 200
        assert client.post("/tasks/agora", json={"agent_id": "A-9", "memory_id": MEMORY}).status_code == 200
        assert client.post("/tasks/trtc", json={**body, "speaker": "x"}).status_code == 422
        info = app.state.inbox.task("t-9")
        assert (info.memory_id, info.bot_id, info.human_id) == (MEMORY, "bot-9", "u-9")
        assert app.state.inbox.task(agora_task_id("A-9")).memory_id == MEMORY


def test_an_agora_call_names_itself_in_every_custom_llm_request(served: Any) -> None:
    # Issue 20, gap 3: the join's llm.params carry the channel; Agora merges them into each request
    # body; the proxy stores its turns with the channel and the model never sees the key.
    settings, upstream = served
    agora = FakeAgora()
    with ConvMemory.open(settings.db) as mem:
        start_call(mem, "agora", MEMORY, _agora_options(), client=agora)
    sent = agora.bodies[0]["properties"]
    params = sent["llm"]["params"]
    assert params == {"memory_id": MEMORY, CALL_PARAM: sent["channel"]}
    body = {**load_fixture("agora_custom_llm_request.json"), **params, "stream": False}
    app = create_app(settings, upstream_transport=httpx.MockTransport(upstream.handler))
    with TestClient(app) as client:
        answer = client.post("/v1/chat/completions", json=body)
        assert answer.status_code == 200 and answer.headers[MEMORY_HEADER] == "used"
        assert app.state.worker.wait_idle(30)
        turns = app.state.mem.recent(MEMORY, 10)
    forwarded = upstream.requests[-1]["body"]
    assert CALL_PARAM not in forwarded and "memory_id" not in forwarded
    by_role = {m.role: m for m in turns if m.channel == "api"}
    assert by_role["user"].content == "对对，还有我下个月要去成都出差。"
    assert by_role["user"].metadata["rtc_channel"] == sent["channel"]
    answered = by_role["assistant"].metadata
    assert answered["rtc_channel"] == sent["channel"]
    # When the request was sent and answered: the store tells a cut answer's round by it.
    assert answered["request_ms"] <= answered["answered_ms"]


def test_a_bad_call_name_is_refused_naming_the_field(served: Any) -> None:
    settings, upstream = served
    app = create_app(settings, upstream_transport=httpx.MockTransport(upstream.handler))
    body = {"messages": [{"role": "user", "content": "hi"}], "memory_id": MEMORY, CALL_PARAM: "room\x01"}
    with TestClient(app) as client:
        answer = client.post("/v1/chat/completions", json=body)
    assert answer.status_code == 400 and answer.json()["error"]["param"] == CALL_PARAM
    assert upstream.requests == []  # nothing reached the model
