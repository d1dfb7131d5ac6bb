"""The lifecycle's state and context compose with an app's: MessagesState, context subclasses, schemas."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.runtime import Runtime
from pydantic import TypeAdapter

from convmem_graph import ConvMemory
from convmem_graph.errors import SourceFormatError
from convmem_graph.graph import build_memory_graph
from convmem_graph.nodes import extract, ingest, normalize
from convmem_graph.state import MemoryContext, MemoryState, RawInput
from convmem_graph.store import MemoryStore


class ChatState(MessagesState, MemoryState):
    """An app's state: its own chat messages plus the lifecycle's keys."""


@dataclass(kw_only=True)
class AppContext(MemoryContext):
    user_name: str  # a required field of the app's own


def build_chat_graph() -> Any:
    def reply(state: ChatState, runtime: Runtime[AppContext]) -> dict[str, Any]:
        return {"messages": [AIMessage(f"Nice to meet you, {runtime.context.user_name}.")]}

    g = StateGraph(ChatState, context_schema=AppContext)
    g.add_node("reply", reply)
    g.add_node("ingest", ingest)
    g.add_node("normalize", normalize)
    g.add_node("extract", extract)
    g.add_edge(START, "reply")
    g.add_edge("reply", "ingest")
    g.add_edge("ingest", "normalize")
    g.add_edge("normalize", "extract")
    g.add_edge("extract", END)
    return g.compile(checkpointer=InMemorySaver())


def test_messages_state_composes_and_ingest_reads_new_messages() -> None:
    store = MemoryStore.from_url("sqlite://")
    graph = build_chat_graph()
    cfg: Any = {"configurable": {"thread_id": "chat-1"}}
    ctx = AppContext(store=store, user_name="Lin")
    first = {"memory_id": "u_1", "messages": [HumanMessage("I live in Hangzhou.")]}
    out = graph.invoke(first, cfg, context=ctx)
    assert len(out["new_message_ids"]) == 2  # the user's message and the reply
    assert [f.content for f in store.list_fragments("u_1", status="active")] == ["User lives in Hangzhou."]
    second = {"memory_id": "u_1", "messages": [HumanMessage("I'm allergic to mango.")]}
    out = graph.invoke(second, cfg, context=ctx)
    assert len(out["new_message_ids"]) == 2  # only this turn: the earlier two were read already
    assert len(out["messages"]) == 4
    assert len(store.recent_messages("u_1", 10)) == 4
    store.close()


def test_messages_without_ids_are_read_again_without_duplicates() -> None:
    store = MemoryStore.from_url("sqlite://")
    history = [{"role": "user", "content": "I like tea."}, {"role": "assistant", "content": "Noted."}]
    state: Any = {"memory_id": "u_1", "messages": history}
    ctx = MemoryContext(store=store)
    # MemoryState has no "messages" key, so call the node directly as a composed graph would.
    runtime: Any = Runtime(context=ctx)
    assert ingest(state, runtime).get("messages_cursor") is None
    assert len(ctx.inbox) == 1 and len(ctx.inbox[0].messages) == 2
    store.close()


def test_context_subclass_can_add_required_fields() -> None:
    with pytest.raises(TypeError, match="user_name"):
        AppContext(db_url="sqlite://")  # type: ignore[call-arg]
    assert AppContext(user_name="Lin", db_url="sqlite://").user_name == "Lin"


def test_schemas_resolve_for_studio() -> None:
    graph = build_memory_graph().compile()
    assert graph.get_input_jsonschema()["properties"]["memory_id"]["type"] == "string"
    assert "payloads" in graph.get_output_jsonschema()["properties"]
    context = graph.get_context_jsonschema()
    assert context is not None
    assert {"db_url", "config", "inputs", "vendors", "inject_options"} <= set(context["properties"])
    assert "store" not in context["properties"]  # services are not JSON
    TypeAdapter(ChatState).json_schema()  # pydantic accepts the composed TypedDict


def test_context_from_json_opens_no_store_until_a_node_needs_it(tmp_path: Any) -> None:
    db = tmp_path / "lazy.db"
    doc = [{"role": "user", "content": "hi"}]
    ctx = MemoryContext(db_url=str(db), config={"bot_ids": ["bot"]}, inputs=[doc])
    assert not db.exists()  # building the context (on the server's event loop) touched no file
    assert isinstance(ctx.inputs[0], RawInput)
    assert ctx.config.bot_ids == ["bot"]
    assert ctx.store is ctx.store  # opened once, on first use
    assert db.exists()


def test_ingest_of_an_unrecognized_payload_raises_and_stores_nothing() -> None:
    with ConvMemory.open("sqlite://") as mem:
        with pytest.raises(SourceFormatError):
            mem.ingest("u_1", {"hello": "world"})
        with pytest.raises(SourceFormatError):
            mem.ingest("u_1", {"MsgList": "not a list"}, source="tencent_im")
        assert mem.memories() == []
        # A batch of RawInput keeps quarantining (batch replay, the CLI and the server rely on it).
        result = mem.ingest("u_1", [RawInput({"hello": "world"}, name="bad.json")])
        assert result.dead_letters == 1 and result.errors[0]["name"] == "bad.json"
