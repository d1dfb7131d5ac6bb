"""ConvMemory.as_store(): a LangGraph BaseStore over the memory, used by LangMem's tools and runtime.store."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langgraph.graph import START, StateGraph
from langgraph.runtime import Runtime
from langgraph.store.base import BaseStore
from langmem import create_manage_memory_tool, create_search_memory_tool
from typing_extensions import TypedDict

from convmem_graph import MemoryConfig
from convmem_graph.langgraph_store import ConvMemoryStore
from convmem_graph.memory import ConvMemory

NS = ("memories", "u_1")


@pytest.fixture
def mem(tmp_path: Path) -> Iterator[ConvMemory]:
    m = ConvMemory.open(str(tmp_path / "s.db"), config=MemoryConfig(bot_ids=["bot"]))
    m.ingest(
        "u_1",
        [
            {"role": "user", "content": "I'm allergic to mango."},
            {"role": "user", "content": "I live in Hangzhou."},
        ],
        source="openai",
        session_ended=True,  # a summary is made now
    )
    yield m
    m.close()


@pytest.fixture
def store(mem: ConvMemory) -> ConvMemoryStore:
    return mem.as_store()


def test_namespaces_expose_fragments_variables_summary_and_turns(mem: ConvMemory, store: BaseStore) -> None:
    facts = {i.value["content"]: i for i in store.search(NS)}
    assert set(facts) == {"User is allergic to mango.", "User lives in Hangzhou."}
    fragment = next(f for f in mem.fragments("u_1") if "mango" in f.content)
    item = store.get(NS, fragment.id)
    assert item is not None and item.value["source_message_ids"] == fragment.source_message_ids
    assert store.get((*NS, "variables"), "city") is not None
    assert store.get((*NS, "variables"), "city").value["value"] == "Hangzhou"  # type: ignore[union-attr]
    turns = store.search((*NS, "turns"), query="Hangzhou")
    assert [t.value["content"] for t in turns] == ["I live in Hangzhou."]
    assert turns[0].score == 1.0
    assert [t.value["content"] for t in store.search((*NS, "turns"))] == [
        "I live in Hangzhou.",
        "I'm allergic to mango.",
    ]
    summary, stored = store.get((*NS, "summary"), "summary"), mem.summary("u_1")
    assert summary is not None and stored is not None and summary.value["content"] == stored.text
    assert store.search(("memories", "nobody")) == []
    assert store.get(("memories", "nobody"), "x") is None
    assert set(store.list_namespaces(prefix=("memories",))) == {
        NS,
        (*NS, "variables"),
        (*NS, "summary"),
        (*NS, "turns"),
    }
    assert store.list_namespaces(prefix=("memories",), max_depth=2) == [NS]
    assert store.list_namespaces(suffix=("variables",)) == [(*NS, "variables")]


def test_search_uses_the_ranker_and_filters(store: BaseStore) -> None:
    hits = store.search(NS, query="mango")
    assert [h.value["content"] for h in hits] == ["User is allergic to mango."]
    assert hits[0].score == 1.0
    assert store.search(NS, query="mango", filter={"category": "no such category"}) == []
    assert len(store.search(NS, limit=1)) == 1


def test_put_update_delete_go_through_the_audit_log(mem: ConvMemory, store: BaseStore) -> None:
    store.put(NS, "k-1", {"content": "User keeps a cat named Mochi.", "category": "relation"})
    item = store.get(NS, "k-1")
    assert item is not None and item.value["origin"] == "api" and item.value["category"] == "relation"
    store.put(NS, "k-1", {"content": "User keeps two cats, Mochi and Tofu."})
    assert store.get(NS, "k-1").value["content"] == "User keeps two cats, Mochi and Tofu."  # type: ignore[union-attr]
    fid = next(f.id for f in mem.fragments("u_1") if "cats" in f.content)
    store.delete(NS, "k-1")
    assert store.get(NS, "k-1") is None
    assert [e.action for e in mem.fragment_history("u_1", fid)] == ["add", "update", "delete"]
    # Variables: a put is a manual value, a delete hands the field back to inference.
    store.put((*NS, "variables"), "city", {"value": "Shanghai"})
    assert mem.variables("u_1")["city"].value == "Shanghai"
    store.delete((*NS, "variables"), "city")
    assert mem.variables("u_1")["city"].value == "Hangzhou"


def test_bad_writes_say_what_is_wrong(store: BaseStore) -> None:
    with pytest.raises(ValueError, match="read-only"):
        store.put((*NS, "turns"), "x", {"content": "hi"})
    with pytest.raises(ValueError, match=r"value\['content'\]"):
        store.put(NS, "x", {"text": "no content key"})
    with pytest.raises(ValueError, match="1 to 200 characters"):
        store.put(NS, "x", {"content": "x" * 201})
    with pytest.raises(ValueError, match="is not \\('memories', memory_id\\)"):
        store.search(("elsewhere", "u_1"))


def test_async_batch(store: BaseStore) -> None:
    async def go() -> list[str]:
        await store.aput(NS, "k-2", {"content": "User plays the violin."})
        return [i.value["content"] for i in await store.asearch(NS, query="violin")]

    assert asyncio.run(go()) == ["User plays the violin."]


class ToolCallingFake(FakeMessagesListChatModel):
    """Replays scripted replies; each reply may be a function of the messages so far."""

    script: list[Any]

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> Any:
        return self

    def _generate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kw: Any
    ) -> Any:
        step = self.script.pop(0)
        reply = step(messages) if callable(step) else step
        self.responses = [reply]
        self.i = 0
        return super()._generate(messages, stop, run_manager, **kw)


def _created_id(messages: list[BaseMessage]) -> str:
    tool_reply = next(m for m in reversed(messages) if isinstance(m, ToolMessage))
    found = re.search(r"created memory ([0-9a-f-]{36})", str(tool_reply.content))
    assert found, tool_reply.content
    return found.group(1)


def test_langmem_tools_manage_and_search_convmem_facts(mem: ConvMemory) -> None:
    manage = create_manage_memory_tool(namespace=("memories", "{langgraph_user_id}"))
    search = create_search_memory_tool(namespace=("memories", "{langgraph_user_id}"))

    def call(name: str, args: dict[str, Any], n: int) -> AIMessage:
        return AIMessage("", tool_calls=[{"name": name, "args": args, "id": f"call_{n}"}])

    script: list[Any] = [
        call("manage_memory", {"content": "User prefers oolong tea.", "action": "create"}, 1),
        lambda ms: call(
            "manage_memory",
            {"id": _created_id(ms), "content": "User prefers oolong tea, no sugar.", "action": "update"},
            2,
        ),
        call("search_memory", {"query": "mango"}, 3),
        AIMessage("Noted: oolong without sugar, and no mango."),
    ]
    model = ToolCallingFake(responses=[AIMessage("unused")], script=script)
    agent = create_agent(model, tools=[manage, search], store=mem.as_store())
    out = agent.invoke(
        {"messages": [HumanMessage("I like oolong tea without sugar. Anything I can't eat?")]},
        config={"configurable": {"langgraph_user_id": "u_1"}},
    )
    tool_replies = [m for m in out["messages"] if isinstance(m, ToolMessage)]
    assert "updated memory" in str(tool_replies[1].content)
    found = json.loads(str(tool_replies[2].content))
    assert [f["value"]["content"] for f in found] == ["User is allergic to mango."]
    contents = [f.content for f in mem.fragments("u_1")]
    assert "User prefers oolong tea, no sugar." in contents
    assert "User prefers oolong tea." not in contents
    assert "oolong" in mem.payload("u_1", "openai")[0]["content"]  # the next call start sees it


class AppState(TypedDict, total=False):
    user_id: str
    answer: str


def test_app_nodes_read_the_memory_through_runtime_store(mem: ConvMemory) -> None:
    def recall(state: AppState, runtime: Runtime[None]) -> AppState:
        assert runtime.store is not None
        hits = runtime.store.search(("memories", state["user_id"]), query="where does the user live")
        return {"answer": hits[0].value["content"]}

    g = StateGraph(AppState)
    g.add_node("recall", recall)
    g.add_edge(START, "recall")
    app = g.compile(store=mem.as_store())
    assert app.invoke({"user_id": "u_1"})["answer"] == "User lives in Hangzhou."
