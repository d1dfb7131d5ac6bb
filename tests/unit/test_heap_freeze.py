"""Long-running users freeze the long-lived heap once: the server at start-up, the middleware after a turn.

The collector is a stand-in here (the real ``gc.freeze()`` would freeze the test process's heap;
``tests/conftest.py`` marks the heap frozen for every other test).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from langchain.agents import create_agent
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, HumanMessage

from convmem_graph import _heap
from convmem_graph.memory import ConvMemory
from convmem_graph.server.app import create_app
from convmem_graph.server.settings import ServeSettings


class FakeGC:
    """Records collect/freeze calls instead of acting on this process."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def collect(self) -> int:
        self.calls.append("collect")
        return 0

    def freeze(self) -> None:
        self.calls.append("freeze")

    def get_freeze_count(self) -> int:
        return 0


@pytest.fixture()
def fake_gc(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeGC]:
    gc = FakeGC()
    monkeypatch.setattr(_heap, "gc", gc)
    monkeypatch.setattr(_heap, "_frozen", False)
    yield gc


def test_the_heap_is_frozen_once_after_a_collection(fake_gc: FakeGC) -> None:
    assert _heap.freeze_long_lived() is True
    assert _heap.freeze_long_lived() is False
    assert fake_gc.calls == ["collect", "freeze"]


def test_the_middleware_freezes_after_its_first_turn(fake_gc: FakeGC) -> None:
    with ConvMemory.open("sqlite://") as mem:
        model = GenericFakeChatModel(messages=iter([AIMessage(content="Noted."), AIMessage(content="Sure.")]))
        agent = create_agent(model, tools=[], middleware=[mem.as_middleware(memory_id="u1")])
        assert fake_gc.calls == []
        agent.invoke({"messages": [HumanMessage("I live in Lisbon.")]})
        assert fake_gc.calls == ["collect", "freeze"]
        assert [m.content for m in mem.recent("u1")] == ["I live in Lisbon.", "Noted."]
        agent.invoke({"messages": [HumanMessage("And I like tea.")]})
        assert fake_gc.calls == ["collect", "freeze"]  # once per process


def test_the_server_freezes_at_start_up(fake_gc: FakeGC) -> None:
    app: Any = create_app(ServeSettings(db="sqlite://", _env_file=None))  # type: ignore[call-arg]
    assert fake_gc.calls == []
    with TestClient(app, base_url="http://127.0.0.1:8080") as client:
        assert fake_gc.calls == ["collect", "freeze"]
        assert client.get("/livez").status_code == 200
