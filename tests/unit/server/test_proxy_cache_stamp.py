"""The proxy's cached blocks follow the store across processes (issue 21 item 5).

The running proxy caches each memory's block; a change made by another process (``convmem delete``
from the CLI) is seen through the memory's change stamp in ``cm_memories`` on the next request,
not after ``proxy_cache_ttl_s``. A second :class:`ConvMemory` on the same SQLite file stands for
the other process.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

from convmem_graph import ConvMemory
from convmem_graph.server.app import create_app
from convmem_graph.server.settings import ServeSettings
from tests.unit.server.conftest import make_settings
from tests.unit.server.test_proxy import UPSTREAM, UPSTREAM_KEY, FakeUpstream

MEMORY = "u_stamp"
PLANTED = "我的身份证号是110101199003077777，我对芒果过敏。"


@pytest.fixture
def upstream() -> FakeUpstream:
    return FakeUpstream()


@pytest.fixture
def settings(tmp_path: Path) -> ServeSettings:
    # A TTL far past the test: only the change stamp can make the proxy see the other process.
    return make_settings(
        tmp_path, upstream_url=UPSTREAM, upstream_api_key=UPSTREAM_KEY, proxy_cache_ttl_s=3600
    )


@pytest.fixture
def proxy(settings: ServeSettings, upstream: FakeUpstream) -> Iterator[TestClient]:
    seed = ConvMemory.open(settings.db)
    seed.ingest(MEMORY, [{"role": "user", "content": PLANTED}], source="openai")
    seed.close()
    app = create_app(settings, upstream_transport=httpx.MockTransport(upstream.handler))
    with TestClient(app) as client:
        yield client


def _ask(client: TestClient, upstream: FakeUpstream, text: str, request_id: str) -> str:
    """Send one turn for the memory; return every message text the upstream received, joined."""
    request = {"model": "m", "user": MEMORY, "messages": [{"role": "user", "content": text}]}
    response = client.post("/v1/chat/completions", json=request, headers={"X-Request-Id": request_id})
    assert response.status_code == 200
    sent: list[dict[str, Any]] = upstream.requests[-1]["body"]["messages"]
    return "\n".join(str(m["content"]) for m in sent)


def _wait_stored(client: TestClient, text: str) -> None:
    """Wait (bounded) until the proxied turn is in the store, so no late write re-creates the memory."""
    mem: ConvMemory = client.app.state.mem  # type: ignore[attr-defined]
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        assert client.app.state.worker.wait_idle(30)  # type: ignore[attr-defined]
        if any(m.content == text for m in mem.recent(MEMORY, 50)):
            return
        time.sleep(0.02)
    raise AssertionError("the proxied turn was not stored")


def test_a_delete_by_another_process_removes_the_block_from_the_next_request(
    proxy: TestClient, upstream: FakeUpstream, settings: ServeSettings
) -> None:
    first = _ask(proxy, upstream, "推荐个水果吧", "req-1")
    assert "<user_memory>" in first and "芒果" in first  # cached from here on
    _wait_stored(proxy, "推荐个水果吧")
    assert "<user_memory>" in _ask(proxy, upstream, "再推荐一个", "req-2")
    _wait_stored(proxy, "再推荐一个")

    other = ConvMemory.open(settings.db)  # the CLI's `convmem delete`, another process
    try:
        assert other.delete(MEMORY)
    finally:
        other.close()

    after = _ask(proxy, upstream, "你还记得我吗？", "req-3")
    assert "<user_memory>" not in after
    assert "<recent_turns>" not in after
    assert "110101199003077777" not in after and "芒果" not in after


def test_a_change_by_another_process_shows_in_the_next_request(
    proxy: TestClient, upstream: FakeUpstream, settings: ServeSettings
) -> None:
    assert "杭州" not in _ask(proxy, upstream, "推荐个水果吧", "req-1")
    _wait_stored(proxy, "推荐个水果吧")
    other = ConvMemory.open(settings.db)
    try:
        other.ingest(MEMORY, [{"role": "user", "content": "我住在杭州。"}], source="openai")
    finally:
        other.close()
    assert "杭州" in _ask(proxy, upstream, "周末去哪玩？", "req-2")
