"""Async without blocking, loud failures, search/update/history and the chat-history window."""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from blockbuster import BlockBuster, BlockingError, blockbuster_ctx
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, HumanMessage

from convmem_graph import MemoryConfig
from convmem_graph.errors import NotFoundError
from convmem_graph.integrations import MissingMemoryIdError
from convmem_graph.memory import ConvMemory
from tests.unit.test_memory import SEEN, RecordingModel


@pytest.fixture
def mem(tmp_path: Path) -> Iterator[ConvMemory]:
    m = ConvMemory.open(str(tmp_path / "m.db"), config=MemoryConfig(bot_ids=["bot"]))
    yield m
    m.close()


def agent_for(mem: ConvMemory, reply: str, **kw: Any) -> tuple[Any, Any]:
    middleware = mem.as_middleware(**kw)
    model = RecordingModel(responses=[AIMessage(content=reply)])
    return create_agent(model, tools=[], system_prompt="Be brief.", middleware=[middleware]), middleware


@pytest.fixture
def blocking_guard() -> Iterator[BlockBuster]:
    """Blockbuster on the event loop: sqlite3, file and socket calls made there raise BlockingError."""
    with blockbuster_ctx() as bb:
        yield bb


def test_blockbuster_catches_a_sqlite_call_on_the_loop(mem: ConvMemory, blocking_guard: BlockBuster) -> None:
    """The guard works here (so the next test can fail): a direct store read on the loop is caught."""

    async def go() -> None:
        mem.recent("u1")

    with pytest.raises(BlockingError):
        asyncio.run(go())


@pytest.mark.parametrize("mode", ["inline", "background"])
def test_async_agent_touches_no_database_on_the_event_loop(
    mem: ConvMemory, mode: str, blocking_guard: BlockBuster
) -> None:
    blocking_guard.deactivate()
    mem.ingest("u1", [{"role": "user", "content": "I'm allergic to mango."}], source="openai")
    agent, middleware = agent_for(mem, "No mango then.", mode=mode)
    SEEN.clear()
    blocking_guard.activate()

    async def go() -> Any:
        request = {"messages": [HumanMessage("Suggest a smoothie")]}
        return await agent.ainvoke(request, context={"memory_id": "u1"})

    asyncio.run(go())
    blocking_guard.deactivate()
    middleware.flush(timeout=30)
    assert "mango" in str(SEEN[0][0].content)  # the memory was injected
    assert [m.content for m in mem.recent("u1", 2)] == ["Suggest a smoothie", "No mango then."]


def test_missing_memory_id_warns_once(mem: ConvMemory, caplog: pytest.LogCaptureFixture) -> None:
    agent, _ = agent_for(mem, "Hi!")
    with caplog.at_level(logging.WARNING, logger="convmem_graph"):
        agent.invoke({"messages": [HumanMessage("Hello")]}, context={"user_id": "u1"})
        agent.invoke({"messages": [HumanMessage("Hello again")]}, context={"user_id": "u1"})
    warnings = [r.getMessage() for r in caplog.records if "no memory id" in r.getMessage()]
    assert len(warnings) == 1
    assert "resolve_memory_id" in warnings[0] and "dict" in warnings[0]
    assert mem.memories() == []


def test_missing_memory_id_can_raise(mem: ConvMemory) -> None:
    agent, _ = agent_for(mem, "Hi!", on_missing_memory_id="raise")
    with pytest.raises(MissingMemoryIdError, match="no memory id"):
        agent.invoke({"messages": [HumanMessage("Hello")]}, context={"user_id": "u1"})
    # A resolver for the app's own context key fixes it.
    agent, _ = agent_for(
        mem, "Hi!", on_missing_memory_id="raise", resolve_memory_id=lambda rt: rt.context["user_id"]
    )
    agent.invoke({"messages": [HumanMessage("I live in Lisbon.")]}, context={"user_id": "u1"})
    assert mem.variables("u1")["city"].value == "Lisbon"


def test_chat_history_clear_keeps_the_long_term_memory(mem: ConvMemory) -> None:
    history = mem.as_chat_history("u3")
    history.add_messages([HumanMessage("My name is Zoe.", id="h1"), AIMessage("Hi Zoe!", id="a1")])
    history.clear()
    assert history.messages == []
    assert mem.variables("u3")["name"].value == "Zoe"  # facts and variables stay
    assert "Zoe" in mem.payload("u3", "openai")[0]["content"]
    assert mem.snapshot("u3").recent == []  # the call-start snapshot lost the turns too
    mem.as_chat_history("nobody").clear()  # an unknown memory is not created
    assert [m.memory_id for m in mem.memories()] == ["u3"]


def test_search_update_and_history(mem: ConvMemory) -> None:
    mem.ingest(
        "u1",
        [
            {"role": "user", "content": "I'm allergic to mango."},
            {"role": "user", "content": "I live in Hangzhou."},
            {"role": "user", "content": "我喜欢跑步。"},
        ],
        source="openai",
    )
    hits = mem.search("u1", "mango allergy")
    assert [h.fragment.content for h in hits] == ["User is allergic to mango."]
    assert hits[0].score == 1.0
    assert [h.fragment.content for h in mem.search("u1", "跑步")] == ["用户喜欢跑步。"]
    assert mem.search("u1", "quantum physics") == []
    assert len(mem.search("u1", "", k=2)) == 2  # blank query: the newest facts
    with pytest.raises(ValueError, match="k must be at least 1"):
        mem.search("u1", "mango", k=0)

    fid = hits[0].fragment.id
    updated = mem.update_fragment("u1", fid, content="User is allergic to mango and kiwi.")
    assert updated.content == "User is allergic to mango and kiwi."
    assert "kiwi" in mem.payload("u1", "openai")[0]["content"]  # the snapshot was rebuilt
    mem.delete_fragment("u1", fid)
    history = mem.fragment_history("u1", fid)
    assert [e.action for e in history] == ["add", "update", "delete"]
    assert history[1].before is not None and "kiwi" not in str(history[1].before)
    assert "kiwi" in str(history[1].after)
    with pytest.raises(NotFoundError):
        mem.update_fragment("u1", "no-such-fragment", content="x")


def test_every_public_method_has_an_async_twin(mem: ConvMemory) -> None:
    public = {
        name
        for name, fn in inspect.getmembers(ConvMemory, inspect.isfunction)
        if not name.startswith("_") and not name.startswith("a") or name in {"add_fragment"}
    }
    missing = {
        name
        for name in public - {"as_middleware", "as_chat_history", "as_store", "open"}
        if not inspect.iscoroutinefunction(getattr(ConvMemory, f"a{name}", None))
    }
    assert missing == set()

    async def go() -> None:
        await mem.aingest("u1", [{"role": "user", "content": "I like tea."}], source="openai")
        assert [i.memory_id for i in await mem.amemories()] == ["u1"]
        assert (await mem.ainfo("u1")).memory_id == "u1"
        await mem.adefine_variables("u1", [{"name": "drink", "description": "favourite drink"}])
        await mem.aset_variable("u1", "drink", "tea")
        assert (await mem.avariables("u1"))["drink"].value == "tea"
        await mem.aclear_variable("u1", "drink")
        fragment = await mem.aadd_fragment("u1", "User has a cat.")
        assert fragment.id in {f.id for f in await mem.afragments("u1")}
        assert (await mem.asearch("u1", "cat"))[0].fragment.id == fragment.id
        await mem.aupdate_fragment("u1", fragment.id, content="User has two cats.")
        assert len(await mem.afragment_history("u1", fragment.id)) == 2
        await mem.adelete_fragment("u1", fragment.id)
        assert len(await mem.arecent("u1")) == 1
        assert (await mem.asnapshot("u1")).memory_id == "u1"
        assert await mem.asummary("u1") == mem.summary("u1")
        await mem.aingest_messages("u1", [HumanMessage("I live in Oslo.")])
        assert await mem.adelete("u1")

    asyncio.run(go())
