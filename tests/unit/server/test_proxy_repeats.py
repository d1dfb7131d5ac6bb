"""Issue 20, done-when: real turns through the memory proxy are never dropped as copies of each other.

As the official ``openai`` SDK sends them (no ``X-Request-Id``: the proxy names each request):
six sequential requests saying "好的" answered with the same reply store six user and six
assistant turns; eight concurrent requests with distinct texts store sixteen. (Before issue 20 the
text window kept 4 of 6 user turns, 2 of 6 replies and 3 of 8 concurrent replies.)
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

from fastapi.testclient import TestClient

from convmem_graph import ConvMemory
from tests.unit.server.test_proxy import FakeUpstream, proxy, upstream  # noqa: F401 - fixtures

MEMORY = "mem_repeats"


def _ask(client: TestClient, text: str) -> None:
    body = {"model": "m", "user": MEMORY, "messages": [{"role": "user", "content": text}]}
    response = client.post("/v1/chat/completions", json=body)
    assert response.status_code == 200
    assert response.json()["choices"][0]["message"]["content"] == "好的，记住了。"


def _stored(client: TestClient, expect: int) -> list[tuple[str, str]]:
    mem: ConvMemory = client.app.state.mem  # type: ignore[attr-defined]
    deadline = time.monotonic() + 30  # turns reach the inbox just after the answer: bounded wait
    while True:
        assert client.app.state.worker.wait_idle(30)  # type: ignore[attr-defined]
        rows = [(m.role, m.content) for m in mem.recent(MEMORY, 100)]
        if len(rows) >= expect or time.monotonic() > deadline:
            return rows
        time.sleep(0.05)


def test_six_sequential_identical_replies_store_six(proxy: TestClient, upstream: FakeUpstream) -> None:  # noqa: F811
    for _ in range(6):
        _ask(proxy, "好的")
    rows = _stored(proxy, 12)
    assert rows.count(("user", "好的")) == 6
    assert rows.count(("assistant", "好的，记住了。")) == 6
    assert len(rows) == 12


def test_eight_concurrent_distinct_turns_store_sixteen(proxy: TestClient, upstream: FakeUpstream) -> None:  # noqa: F811
    texts = [f"第{k}个问题：明天几点出发？" for k in range(8)]
    with ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(lambda text: _ask(proxy, text), texts))
    rows = _stored(proxy, 16)
    assert sorted(text for role, text in rows if role == "user") == sorted(texts)
    assert rows.count(("assistant", "好的，记住了。")) == 8
    assert len(rows) == 16
