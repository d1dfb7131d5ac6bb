"""The memory proxy tells the model the truth once: one memory block, no turn twice, turns kept apart.

- A TRTC call start puts the memory block inside ``LLMConfig.SystemPrompt`` and an Agora join puts
  it into ``llm.system_messages``; every request of that call reaches the proxy with that (stale)
  block, which the proxy cuts out before adding the current one.
- The recent turns the proxy adds leave out the turns the request itself carries.
- Proxied turns are keyed in the inbox by memory and request id, hashed.
- A request naming no memory is flagged (header, one WARNING per caller) or refused by a setting.
"""

from __future__ import annotations

import json
import logging
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

from convmem_graph import ConvMemory
from convmem_graph.server.app import create_app
from convmem_graph.server.proxy import MEMORY_HEADER, _WarnedCallers, inject_memory
from convmem_graph.server.settings import ServeSettings
from tests.unit.server.test_proxy import UPSTREAM_KEY, FakeUpstream, _settings

MEMORY = "mem_u10086"
PERSONA = "你是「小雨」，一个温柔、幽默的 AI 陪伴伙伴，用简短口语化的中文聊天。"
STALE_FACT = "用户对芒果过敏。"
FRESH_FACT = "用户下个月搬去成都。"
TRTC_LLM = {
    "LLMType": "openai",
    "Model": "qwen-plus",
    "APIKey": "sk-REDACTED",
    "APIUrl": "http://convmem.example/v1/chat/completions",
    "Streaming": True,
    "MetaInfo": {"memory_id": MEMORY},
}


def _seed(settings: ServeSettings) -> dict[str, Any]:
    """Seed the memory and build the call-start payloads of it *before* a newer fact is added."""
    mem = ConvMemory.open(settings.db)
    try:
        mem.ingest(
            MEMORY,
            [
                {"role": "user", "content": "明天早上 7 点提醒我去跑步"},
                {"role": "assistant", "content": "好的，明早 7 点叫你！"},
            ],
            source="openai",
        )
        mem.add_fragment(MEMORY, STALE_FACT, category="health")
        payloads = {
            placement: json.loads(
                mem.payload(
                    MEMORY,
                    "trtc-llmconfig",
                    persona=PERSONA,
                    recent_placement=placement,
                    llm=TRTC_LLM,
                )
            )
            for placement in ("system_prompt", "user_messages")
        }
        agora_llm = mem.payload(
            MEMORY,
            "agora-llm",
            persona=PERSONA,
            params={"model": "qwen-plus", "memory_id": MEMORY},
            llm={"url": "http://convmem.example/v1/chat/completions"},
        )
        agora_custom = mem.payload(MEMORY, "agora-custom", persona=PERSONA, params={"memory_id": MEMORY})
        # Learned after the call started: only the proxy's block can know it.
        mem.add_fragment(MEMORY, FRESH_FACT, category="plan")
    finally:
        mem.close()
    return {"trtc": payloads, "agora_llm": agora_llm, "agora_custom": agora_custom}


@pytest.fixture
def upstream() -> FakeUpstream:
    return FakeUpstream()


@pytest.fixture
def env(tmp_path: Path, upstream: FakeUpstream, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    monkeypatch.delenv("CONVMEM_SERVE_TOKEN", raising=False)
    settings = _settings(tmp_path)
    payloads = _seed(settings)
    app = create_app(settings, upstream_transport=httpx.MockTransport(upstream.handler))
    app.state.settings_db = settings.db
    with TestClient(app) as client:
        yield client, payloads


def _wire_text(body: dict[str, Any]) -> str:
    return json.dumps(body["messages"], ensure_ascii=False)


def _one_block(body: dict[str, Any]) -> str:
    """Assert the request carries exactly one memory block and return the message holding it."""
    wire = _wire_text(body)
    assert wire.count("<user_memory>") == 1, wire
    assert wire.count("</user_memory>") == 1, wire
    holders = [m for m in body["messages"] if "<user_memory>" in json.dumps(m, ensure_ascii=False)]
    assert len(holders) == 1 and holders[0]["role"] == "system"
    content = holders[0]["content"]
    assert isinstance(content, str)
    assert FRESH_FACT in content  # the current block, not the call start's
    return content


def _trtc_messages(config: dict[str, Any], turns: list[dict[str, str]], user: str) -> list[dict[str, Any]]:
    """What TRTC sends to ``LLMConfig.APIUrl``: SystemPrompt, UserMessages and History, the turn."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": config["SystemPrompt"]}]
    messages += [{"role": m["Role"], "content": m["Content"]} for m in config.get("UserMessages", [])]
    return [*messages, *turns, {"role": "user", "content": user}]


def test_trtc_history_0_system_prompt_block_and_recent_turns_are_replaced(
    env: Any, upstream: FakeUpstream
) -> None:
    client, payloads = env
    config = payloads["trtc"]["system_prompt"]
    prompt = config["SystemPrompt"]
    # The call start's SystemPrompt: persona, then the block (without the fresh fact), then turns.
    assert prompt.startswith(PERSONA + "\n<user_memory>") and "<recent_turns>" in prompt
    assert STALE_FACT in prompt and FRESH_FACT not in prompt
    body = {"model": "qwen-plus", "stream": True, **config["MetaInfo"]}
    body["messages"] = _trtc_messages(config, [], "我最近在忙搬家")
    with client.stream("POST", "/v1/chat/completions", json=body) as response:
        assert response.status_code == 200
        assert response.headers[MEMORY_HEADER] == "used"
        b"".join(response.iter_raw())
    sent = upstream.requests[-1]["body"]
    block = _one_block(sent)
    wire = _wire_text(sent)
    assert wire.count("<recent_turns>") == 1 and "<recent_turns>" in block
    assert wire.count("明天早上 7 点提醒我去跑步") == 1  # a stored turn once, not twice
    # The persona stays word for word, in its own message, first.
    assert sent["messages"][0] == {"role": "system", "content": PERSONA}
    assert sent["messages"][-1] == {"role": "user", "content": "我最近在忙搬家"}


def test_trtc_user_messages_and_history_block_inside_the_prompt_is_cut(
    env: Any, upstream: FakeUpstream
) -> None:
    client, payloads = env
    config = payloads["trtc"]["user_messages"]
    # The block embedded between the persona and instructions a team appended after it.
    config["SystemPrompt"] += "\n回答不超过两句话。"
    history = [
        {"role": "user", "content": "我最近在忙搬家"},
        {"role": "assistant", "content": "辛苦啦，搬去哪里？"},
    ]
    body = {"model": "qwen-plus", **config["MetaInfo"], "messages": _trtc_messages(config, history, "成都")}
    response = client.post("/v1/chat/completions", json=body, headers={"X-Request-Id": "r-1"})
    assert response.status_code == 200 and response.headers[MEMORY_HEADER] == "used"
    sent = upstream.requests[-1]["body"]
    _one_block(sent)
    assert sent["messages"][0] == {"role": "system", "content": PERSONA + "\n回答不超过两句话。"}
    # The request carries its turns (UserMessages, History): the proxy adds none of its own.
    assert "<recent_turns>" not in _wire_text(sent)
    assert sent["messages"][2:] == body["messages"][1:]


@pytest.mark.parametrize("vendor", ["agora_llm", "agora_custom"])
def test_agora_system_messages_carry_one_block(env: Any, upstream: FakeUpstream, vendor: str) -> None:
    client, payloads = env
    if vendor == "agora_llm":
        llm = payloads["agora_llm"]
        # Agora sends system_messages, its own history of the call, then the turn; params merged in.
        messages = [*llm["system_messages"], {"role": "user", "content": "我最近在忙搬家"}]
        body = {**llm["params"], "messages": messages}
    else:
        messages = [*payloads["agora_custom"], {"role": "user", "content": "我最近在忙搬家"}]
        body = {"model": "qwen-plus", "memory_id": MEMORY, "messages": messages}
    assert sum("<user_memory>" in m["content"] for m in messages) == 1  # the stale one
    response = client.post("/v1/chat/completions", json=body)
    assert response.status_code == 200
    sent = upstream.requests[-1]["body"]
    _one_block(sent)
    assert sent["messages"][0] == {"role": "system", "content": PERSONA}
    assert STALE_FACT in _wire_text(sent)  # still known: now from the current block


def test_block_inside_list_of_parts_content(env: Any, upstream: FakeUpstream) -> None:
    client, payloads = env
    prompt = payloads["trtc"]["user_messages"]["SystemPrompt"]
    stale_block = prompt[len(PERSONA) + 1 :]
    system = {
        "role": "system",
        "content": [
            {"type": "text", "text": prompt},
            {"type": "text", "text": stale_block},
            {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}},
        ],
    }
    developer = {"role": "developer", "content": [{"type": "text", "text": stale_block}]}
    body = {"memory_id": MEMORY, "messages": [system, developer, {"role": "user", "content": "在吗"}]}
    assert client.post("/v1/chat/completions", json=body).status_code == 200
    sent = upstream.requests[-1]["body"]
    _one_block(sent)
    assert sent["messages"][0] == {
        "role": "system",
        "content": [{"type": "text", "text": PERSONA}, system["content"][2]],
    }
    assert [m["role"] for m in sent["messages"]] == ["system", "system", "user"]  # developer dropped


def test_inject_memory_cuts_regions_and_keeps_everything_else() -> None:
    stale = "<user_memory>\n旧\n</user_memory>"
    turns = "<recent_turns>\n用户: 旧\n</recent_turns>"
    messages = [
        {"role": "system", "content": f"甲。\n{stale}\n乙。"},
        {"role": "system", "content": stale},
        {"role": "developer", "content": f"{stale}\n{turns}"},
        {"role": "user", "content": f"我说的 {stale} 原样保留"},  # the user's own text is never touched
    ]
    out = inject_memory(messages, "<user_memory>新</user_memory>")
    assert out == [
        {"role": "system", "content": "甲。\n乙。"},
        {"role": "developer", "content": turns},  # stale turns stay unless the block replaces them
        {"role": "system", "content": "<user_memory>新</user_memory>"},
        messages[3],
    ]
    out = inject_memory(messages, "<user_memory>新</user_memory>", replace_turns=True)
    assert [m["content"] for m in out] == [
        "甲。\n乙。",
        "<user_memory>新</user_memory>",
        messages[3]["content"],
    ]
    # A memory with nothing to inject (new, or deleted): the stale block is cut all the same.
    assert inject_memory(messages[:2], "") == [{"role": "system", "content": "甲。\n乙。"}]
    # An unclosed tag is not a block we wrote: left alone.
    assert inject_memory([{"role": "system", "content": "<user_memory> 标签"}], "") == [
        {"role": "system", "content": "<user_memory> 标签"}
    ]
    assert messages[0]["content"] == f"甲。\n{stale}\n乙。"  # the input is not modified


def _drain(client: TestClient) -> None:
    assert client.app.state.worker.wait_idle(30)  # type: ignore[attr-defined]


def _wait_for(client: TestClient, memory_id: str, count: int) -> list[Any]:
    mem: ConvMemory = client.app.state.mem  # type: ignore[attr-defined]
    deadline = time.monotonic() + 30
    while True:
        _drain(client)
        found = mem.recent(memory_id, 50)
        if len(found) >= count or time.monotonic() > deadline:
            return found
        time.sleep(0.05)


def test_recent_turns_leave_out_what_the_request_already_carries(env: Any, upstream: FakeUpstream) -> None:
    client, _ = env
    mem: ConvMemory = client.app.state.mem
    # The current sentence reached the store first (a TRTC 903 before the LLM call).
    mem.ingest(MEMORY, [{"role": "user", "content": "我今天  有点累"}], source="openai")
    client.app.state.worker.listeners[0]([MEMORY])  # what the worker does after a batch
    body = {"memory_id": MEMORY, "messages": [{"role": "user", "content": "我今天 有点累"}]}
    assert client.post("/v1/chat/completions", json=body, headers={"X-Request-Id": "q-1"}).status_code == 200
    block = _one_block(upstream.requests[-1]["body"])
    assert "有点累" not in block and "明天早上 7 点提醒我去跑步" in block
    # The same request retried after its turn was stored: its own turns are not quoted back.
    _wait_for(client, MEMORY, 5)
    assert client.post("/v1/chat/completions", json=body, headers={"X-Request-Id": "q-1"}).status_code == 200
    block = _one_block(upstream.requests[-1]["body"])
    assert "好的，记住了" not in block and "有点累" not in block
    # A new request: the previous answer is an earlier turn now and is quoted.
    assert client.post("/v1/chat/completions", json=body, headers={"X-Request-Id": "q-2"}).status_code == 200
    assert "好的，记住了" in _one_block(upstream.requests[-1]["body"])


def test_inbox_keys_are_scoped_by_memory_and_never_cut(env: Any) -> None:
    client, _ = env
    prefix = "trtc-" + "r" * 200  # longer than the 128 characters a key holds
    body = {"messages": [{"role": "user", "content": "第一句"}]}
    for n, memory_id in ((1, "m_long"), (2, "m_long")):
        headers = {"X-Request-Id": f"{prefix}-{n}", "X-User-Id": memory_id}
        response = client.post("/v1/chat/completions", json=body, headers=headers)
        assert response.status_code == 200
    assert len(_wait_for(client, "m_long", 4)) == 4  # two turns, not one
    for memory_id in ("m_a", "m_b"):
        headers = {"X-Request-Id": "shared-request-id", "X-User-Id": memory_id}
        assert client.post("/v1/chat/completions", json=body, headers=headers).status_code == 200
    for memory_id in ("m_a", "m_b"):
        assert [m.content for m in _wait_for(client, memory_id, 2)] == ["第一句", "好的，记住了。"]
    with sqlite3.connect(client.app.state.settings_db) as conn:
        keys = [k for (k,) in conn.execute("SELECT delivery_key FROM cm_serve_inbox WHERE vendor = 'proxy'")]
    assert len(keys) == 4 and all(len(k) == len("proxy:") + 64 for k in keys)


def test_a_request_without_memory_is_flagged_and_warned_once_per_caller(
    env: Any, upstream: FakeUpstream, caplog: pytest.LogCaptureFixture
) -> None:
    client, _ = env
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    caplog.set_level(logging.WARNING, logger="convmem_graph.server.proxy")
    for key in ("Bearer agent-a", "Bearer agent-a", "Bearer agent-b"):
        response = client.post("/v1/chat/completions", json=body, headers={"Authorization": key})
        assert response.status_code == 200 and response.headers[MEMORY_HEADER] == "none"
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 2, warnings  # agent-a once, agent-b once
    assert all("body:memory_id" in w and "header:x-user-id" in w for w in warnings)
    assert not any("agent-a" in w or "agent-b" in w for w in warnings)  # the key itself never logged
    assert len(upstream.requests) == 3
    # Upstream errors say it too.
    upstream.status = 500
    upstream.error_body = b"boom"
    response = client.post("/v1/chat/completions", json={**body, "user": MEMORY})
    assert response.status_code == 500 and response.headers[MEMORY_HEADER] == "used"


def test_warned_callers_are_bounded() -> None:
    warned = _WarnedCallers(max_entries=2)
    assert [warned.first(c) for c in ("a", "b", "a", "c")] == [True, True, False, True]
    assert warned.first("a") is False  # recently seen, kept
    assert warned.first("b") is True  # the oldest, forgotten past the bound


def test_require_memory_refuses_with_an_openai_error(
    tmp_path: Path, upstream: FakeUpstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CONVMEM_PROXY_REQUIRE_MEMORY", "true")
    assert ServeSettings(_env_file=None).proxy_require_memory is True
    settings = _settings(tmp_path)
    assert settings.proxy_require_memory is True  # read from the environment
    app = create_app(settings, upstream_transport=httpx.MockTransport(upstream.handler))
    with TestClient(app) as client:
        body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
        response = client.post("/v1/chat/completions", json=body)
        assert response.status_code == 400
        assert response.headers[MEMORY_HEADER] == "none"
        error = response.json()["error"]
        assert set(error) == {"message", "type", "param", "code"}
        assert error["code"] == "memory_id_required" and error["type"] == "invalid_request_error"
        for key in settings.proxy_memory_keys:
            assert key in error["message"]
        assert upstream.requests == []
        # A request naming its memory goes through.
        response = client.post("/v1/chat/completions", json=body, headers={"X-User-Id": "u_1"})
        assert response.status_code == 200 and response.headers[MEMORY_HEADER] == "used"
        assert upstream.requests[-1]["headers"]["authorization"] == f"Bearer {UPSTREAM_KEY}"
