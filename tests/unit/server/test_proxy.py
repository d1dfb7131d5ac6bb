from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

from convmem_graph import ConvMemory
from convmem_graph.server.app import create_app
from convmem_graph.server.settings import ServeSettings
from tests.unit.server.conftest import make_settings

UPSTREAM = "http://upstream.invalid/v1/chat/completions"
UPSTREAM_KEY = "sk-upstream-test"


def _chunk(delta: dict[str, str]) -> bytes:
    doc = {"id": "c1", "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": delta}]}
    return b"data: " + json.dumps(doc, ensure_ascii=False).encode("utf-8") + b"\n\n"


CHUNKS = [
    _chunk({"role": "assistant"}),
    _chunk({"content": "那就"}),
    _chunk({"content": "吃苹果吧。"}),
    b"data: [DONE]\n\n",
]


class FakeUpstream:
    """An httpx transport standing in for the model: records requests, checks the key."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.status = 200
        self.error_body = b""

    def handler(self, request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        self.requests.append({"headers": dict(request.headers), "body": body})
        if request.headers.get("authorization") != f"Bearer {UPSTREAM_KEY}":
            return httpx.Response(401, json={"error": {"message": "bad key", "type": "auth", "code": None}})
        if self.status != 200:
            return httpx.Response(self.status, content=self.error_body)
        if body.get("stream"):

            async def chunks() -> AsyncIterator[bytes]:
                for chunk in CHUNKS:
                    yield chunk

            return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=chunks())
        answer = {
            "id": "c2",
            "object": "chat.completion",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "好的，记住了。"}}],
        }
        return httpx.Response(200, json=answer)


@pytest.fixture
def upstream() -> FakeUpstream:
    return FakeUpstream()


def _settings(tmp_path: Path, **extra: Any) -> ServeSettings:
    return make_settings(tmp_path, upstream_url=UPSTREAM, upstream_api_key=UPSTREAM_KEY, **extra)


@pytest.fixture
def proxy(tmp_path: Path, upstream: FakeUpstream, monkeypatch: pytest.MonkeyPatch) -> Iterator[TestClient]:
    monkeypatch.delenv("CONVMEM_SERVE_TOKEN", raising=False)
    settings = _settings(tmp_path)
    seed = ConvMemory.open(settings.db)
    seed.ingest("u_1", [{"role": "user", "content": "我对芒果过敏。"}], source="openai")
    seed.close()
    app = create_app(settings, upstream_transport=httpx.MockTransport(upstream.handler))
    with TestClient(app) as client:
        yield client


def _drain(client: TestClient) -> None:
    assert client.app.state.worker.wait_idle(30)  # type: ignore[attr-defined]


def test_streamed_turn_gets_memory_passes_bytes_through_and_is_recorded(
    proxy: TestClient, upstream: FakeUpstream
) -> None:
    request = {
        "model": "qwen-plus",
        "stream": True,
        "user": "u_1",
        "messages": [
            {"role": "system", "content": "你是「小雨」。"},
            {"role": "user", "content": "推荐个水果  吧"},
        ],
    }
    with proxy.stream("POST", "/v1/chat/completions", json=request) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        received = b"".join(response.iter_raw())
    assert received == b"".join(CHUNKS)
    sent = upstream.requests[0]
    assert sent["headers"]["authorization"] == f"Bearer {UPSTREAM_KEY}"
    messages = sent["body"]["messages"]
    assert messages[0] == {"role": "system", "content": "你是「小雨」。"}
    assert messages[1]["role"] == "system" and messages[1]["content"].startswith("<user_memory>")
    assert "芒果" in messages[1]["content"]
    assert messages[2] == {"role": "user", "content": "推荐个水果  吧"}
    # Apart from the injected message, the body goes upstream unchanged.
    assert {k: v for k, v in sent["body"].items() if k != "messages"} == {
        k: v for k, v in request.items() if k != "messages"
    }
    mem: ConvMemory = proxy.app.state.mem  # type: ignore[attr-defined]
    expected = [("user", "推荐个水果  吧", False), ("assistant", "那就吃苹果吧。", False)]
    # The turn is handed to the inbox when the stream has closed, which can be just after the
    # client read its last byte: wait (bounded) for it rather than for an idle worker alone.
    deadline = time.monotonic() + 30
    while True:
        _drain(proxy)
        turns = [(m.role, m.content, m.interrupted) for m in mem.recent("u_1", 10)]
        if turns[-2:] == expected or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert turns[-2:] == expected


def test_memory_id_from_trtc_header_and_meta_info_non_streaming(
    proxy: TestClient, upstream: FakeUpstream
) -> None:
    request = {"model": "m", "messages": [{"role": "user", "content": "我住在杭州。"}]}
    headers = {"X-User-Id": "u_2", "X-Request-Id": "req-1", "X-Task-Id": "t"}
    response = proxy.post("/v1/chat/completions", json=request, headers=headers)
    assert response.status_code == 200
    assert response.json()["choices"][0]["message"]["content"] == "好的，记住了。"
    # A retry of the same TRTC request id is one turn.
    assert proxy.post("/v1/chat/completions", json=request, headers=headers).status_code == 200
    # MetaInfo keys arrive in the body; the proxy-only key does not go upstream.
    meta = {**request, "memory_id": "mem_meta"}
    assert proxy.post("/v1/chat/completions", json=meta).status_code == 200
    assert "memory_id" not in upstream.requests[-1]["body"]
    _drain(proxy)
    mem: ConvMemory = proxy.app.state.mem  # type: ignore[attr-defined]
    assert [m.content for m in mem.recent("u_2", 10)] == ["我住在杭州。", "好的，记住了。"]
    assert [m.content for m in mem.recent("mem_meta", 10)] == ["我住在杭州。", "好的，记住了。"]


@pytest.mark.parametrize("stream", [False, True])
def test_upstream_errors_come_back_with_status_and_openai_shape(
    proxy: TestClient, upstream: FakeUpstream, stream: bool
) -> None:
    upstream.status = 429
    upstream.error_body = b'{"error": {"message": "rate limited", "type": "rate_limit", "code": "429"}}'
    request = {"model": "m", "stream": stream, "user": "u_1", "messages": [{"role": "user", "content": "hi"}]}
    response = proxy.post("/v1/chat/completions", json=request)
    assert response.status_code == 429
    assert response.json()["error"]["message"] == "rate limited"
    upstream.status = 502
    upstream.error_body = b"<html>bad gateway</html>"
    response = proxy.post("/v1/chat/completions", json=request)
    assert response.status_code == 502
    error = response.json()["error"]
    assert error["type"] == "upstream_error" and "bad gateway" in error["message"]
    _drain(proxy)
    mem: ConvMemory = proxy.app.state.mem  # type: ignore[attr-defined]
    assert [m.content for m in mem.recent("u_1", 10)] == ["我对芒果过敏。"]  # nothing recorded


def test_bad_requests_are_openai_errors(proxy: TestClient) -> None:
    response = proxy.post("/v1/chat/completions", content=b"{not json")
    assert response.status_code == 400 and "error" in response.json()
    response = proxy.post("/v1/chat/completions", json={"messages": "hi"})
    assert response.status_code == 400 and response.json()["error"]["code"] == "invalid_messages"


def test_token_guards_the_proxy_but_not_the_webhooks(tmp_path: Path, upstream: FakeUpstream) -> None:
    settings = _settings(tmp_path, token="s3cret")
    app = create_app(settings, upstream_transport=httpx.MockTransport(upstream.handler))
    request = {"model": "m", "user": "u_9", "messages": [{"role": "user", "content": "hi"}]}
    with TestClient(app) as client:
        assert client.post("/v1/chat/completions", json=request).status_code == 401
        wrong = {"Authorization": "Bearer nope"}
        assert client.post("/v1/chat/completions", json=request, headers=wrong).status_code == 401
        good = {"Authorization": "Bearer s3cret"}
        assert client.post("/v1/chat/completions", json=request, headers=good).status_code == 200
        assert upstream.requests[-1]["headers"]["authorization"] == f"Bearer {UPSTREAM_KEY}"
        assert client.get("/healthz").status_code == 200
        # Webhooks have their signatures instead: an unsigned one is 401 for the signature.
        response = client.post("/webhooks/trtc", content=b"{}")
        assert response.status_code == 401 and "Sign" in response.json()["detail"]


def test_full_backlog_answers_503_with_retry_after(tmp_path: Path, upstream: FakeUpstream) -> None:
    settings = _settings(tmp_path, queue_max=1)
    app = create_app(settings, upstream_transport=httpx.MockTransport(upstream.handler))
    client = TestClient(app)  # no lifespan: nothing drains the inbox
    app.state.inbox.add("proxy", "k", '{"messages": []}', memory_id="u")
    request = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    response = client.post("/v1/chat/completions", json=request)
    assert response.status_code == 503
    assert response.headers["retry-after"] == "5"
    assert upstream.requests == []
    app.state.mem.close()


def test_a_client_that_goes_away_mid_stream_leaves_an_interrupted_turn(
    tmp_path: Path, upstream: FakeUpstream
) -> None:
    async def slow(request: httpx.Request) -> httpx.Response:
        async def chunks() -> AsyncIterator[bytes]:
            for chunk in CHUNKS:
                yield chunk
                await asyncio.sleep(0.3)

        return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=chunks())

    app = create_app(_settings(tmp_path), upstream_transport=httpx.MockTransport(slow))
    request = {
        "model": "m",
        "stream": True,
        "user": "u_cut",
        "messages": [{"role": "user", "content": "讲个故事"}],
    }
    with TestClient(app) as client:
        with client.stream("POST", "/v1/chat/completions", json=request) as response:
            assert response.status_code == 200
            for _ in zip(range(2), response.iter_raw(), strict=False):
                pass  # the first two chunks, then hang up
        deadline = time.monotonic() + 20
        mem: ConvMemory = app.state.mem
        while len(mem.recent("u_cut", 10)) < 2 and time.monotonic() < deadline:
            app.state.worker.wait_idle(1)
        turns = mem.recent("u_cut", 10)
    assert [(m.role, m.content) for m in turns][0] == ("user", "讲个故事")
    # What was streamed before the hang-up, marked interrupted.
    assert (turns[1].role, turns[1].content, turns[1].interrupted) == ("assistant", "那就", True)
