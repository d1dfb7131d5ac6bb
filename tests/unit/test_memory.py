"""ConvMemory: the per-memory API, vendor payloads, middleware and chat-history adapter."""

from __future__ import annotations

import asyncio
import json
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage

from convmem_graph import MemoryConfig, MemoryNotFoundError
from convmem_graph.memory import ConvMemory
from tests.conftest import load_fixture

SEEN: list[list[BaseMessage]] = []


class RecordingModel(FakeMessagesListChatModel):
    """A fake chat model that records the messages of every call."""

    def _generate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kw: Any
    ) -> Any:
        SEEN.append(list(messages))
        return super()._generate(messages, stop, run_manager, **kw)


@pytest.fixture
def mem(tmp_path: Path) -> Iterator[ConvMemory]:
    m = ConvMemory.open(str(tmp_path / "m.db"), config=MemoryConfig(bot_ids=["ai_xiaoyu_bot"]))
    yield m
    m.close()


def test_ingest_and_read_back(mem: ConvMemory) -> None:
    result = mem.ingest("u1", [{"role": "user", "content": "我对芒果过敏，我住在杭州。"}])
    assert result.new_messages == 1
    assert any("芒果" in f.content for f in mem.fragments("u1"))
    assert mem.variables("u1")["city"].value == "杭州"
    assert mem.info("u1").message_count == 1
    assert [m.memory_id for m in mem.memories()] == ["u1"]


def test_manual_variable_wins_and_clear_returns_to_inference(mem: ConvMemory) -> None:
    mem.ingest("u1", [{"role": "user", "content": "I live in Berlin."}])
    assert mem.variables("u1")["city"].value == "Berlin"
    mem.set_variable("u1", "city", "Munich")
    mem.ingest("u1", [{"role": "user", "content": "I live in Berlin, by the way."}])
    assert mem.variables("u1")["city"].value == "Munich"
    assert mem.variables("u1")["city"].origin == "manual"
    block = mem.payload("u1", "openai")[0]["content"]
    assert "Munich" in block and "Berlin" not in block.split("[fact]")[0]
    mem.clear_variable("u1", "city")
    assert mem.variables("u1")["city"].value == "Berlin"
    assert mem.variables("u1")["city"].origin == "inferred"


def test_defined_schema_replaces_default(mem: ConvMemory) -> None:
    mem.define_variables(
        "u1", [{"name": "pet_name", "description": "name of the user's pet", "infer": False}]
    )
    mem.set_variable("u1", "pet_name", "年糕")
    assert mem.variables("u1")["pet_name"].value == "年糕"
    assert [s.name for s in mem.store.get_specs("u1")] == ["pet_name"]


def test_hand_added_fragment_reaches_the_next_payload(mem: ConvMemory) -> None:
    mem.ingest("u1", [{"role": "user", "content": "I like green tea."}])
    fragment = mem.add_fragment("u1", "User's sister is called Anna.", category="relation")
    text = mem.payload("u1", "openai")[0]["content"]
    assert "Anna" in text
    mem.delete_fragment("u1", fragment.id)
    assert "Anna" not in mem.payload("u1", "openai")[0]["content"]


def test_vendor_payloads_from_the_story(mem: ConvMemory) -> None:
    mem.ingest("mem_u10086", load_fixture("tencent_im_roammsg_exchange.json"))
    trtc = mem.payload(
        "mem_u10086",
        "trtc",
        persona="你是「小雨」。",
        sdk_app_id=1400000000,
        room_id="room_1",
        agent_config={"UserId": "ai_xiaoyu_bot", "UserSig": "sig", "TargetUserId": "u_10086"},
        tts_config={"TTSType": "flow", "VoiceId": "v1"},
        recent_turns=4,
    )
    assert isinstance(trtc["LLMConfig"], str)
    llm = json.loads(trtc["LLMConfig"])
    assert llm["SystemPrompt"].startswith("你是「小雨」。")
    assert "<user_memory>" in llm["SystemPrompt"] and "杭州" in llm["SystemPrompt"]
    assert len(llm["UserMessages"]) == 4 and set(llm["UserMessages"][0]) == {"Role", "Content"}
    update = mem.payload("mem_u10086", "agora-update", params={"model": "qwen-plus"})
    assert update["properties"]["llm"]["params"] == {"model": "qwen-plus"}
    custom = mem.payload("mem_u10086", "agora-custom", recent_turns=2)
    assert "metadata" in custom[-1] and "timestamp" in custom[-1]
    standard = mem.payload("mem_u10086", "agora-standard", recent_turns=2)
    assert set(standard[-1]) == {"role", "content"}
    with pytest.raises(ValueError, match="params"):
        mem.payload("mem_u10086", "agora-update")
    with pytest.raises(ValueError, match="unknown option"):
        mem.payload("mem_u10086", "openai", colour="red")


def test_unknown_memory_and_delete(mem: ConvMemory) -> None:
    with pytest.raises(MemoryNotFoundError):
        mem.payload("nobody", "openai")
    mem.ingest("u1", [{"role": "user", "content": "I like tea."}])
    assert mem.delete("u1")
    with pytest.raises(MemoryNotFoundError):
        mem.info("u1")
    assert not mem.delete("u1")


def test_async_twins(mem: ConvMemory) -> None:
    async def go() -> Any:
        await mem.aingest("u1", [{"role": "user", "content": "My name is Ada."}])
        return await mem.apayload("u1", "openai")

    messages = asyncio.run(go())
    assert "Ada" in messages[0]["content"]


def _agent(mem: ConvMemory, reply: str, **kw: Any) -> Any:
    model = RecordingModel(responses=[AIMessage(content=reply)])
    middleware = mem.as_middleware(persona="You are Rain.", **kw)
    return create_agent(model, tools=[], system_prompt="Be brief.", middleware=[middleware]), middleware


def test_middleware_injects_memory_and_records_the_turn(mem: ConvMemory) -> None:
    mem.ingest("u1", [{"role": "user", "content": "I'm allergic to mango."}])
    SEEN.clear()
    agent, _ = _agent(mem, "Then no mango smoothie for you.")
    out = agent.invoke({"messages": [HumanMessage("Suggest a smoothie")]}, context={"memory_id": "u1"})
    system = SEEN[0][0]
    assert isinstance(system, SystemMessage)
    assert system.content.startswith("Be brief.")
    assert "<user_memory>" in system.content and "mango" in system.content
    # Nothing of the memory block is stored in agent state.
    assert all("<user_memory>" not in str(m.content) for m in out["messages"])
    recent = [(m.role, m.content) for m in mem.recent("u1")]
    assert recent[-2:] == [("user", "Suggest a smoothie"), ("assistant", "Then no mango smoothie for you.")]


def test_middleware_background_mode_and_async(mem: ConvMemory) -> None:
    agent, middleware = _agent(mem, "Noted!", memory_id="u2", mode="background")

    async def go() -> None:
        await agent.ainvoke({"messages": [HumanMessage("I live in Lisbon.")]})

    asyncio.run(go())
    middleware.flush(timeout=30)
    assert mem.variables("u2")["city"].value == "Lisbon"


def test_middleware_without_memory_id_is_a_no_op(mem: ConvMemory) -> None:
    SEEN.clear()
    agent, _ = _agent(mem, "Hi!")
    agent.invoke({"messages": [HumanMessage("Hello")]})
    assert "<user_memory>" not in str(SEEN[0][0].content)
    assert mem.memories() == []


def test_chat_history_adapter_without_deprecation_noise(mem: ConvMemory) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        history = mem.as_chat_history("u3")
        history.add_messages([HumanMessage("My name is Zoe.", id="h1"), AIMessage("Hi Zoe!", id="a1")])
        assert [m.content for m in history.messages] == ["My name is Zoe.", "Hi Zoe!"]
    assert mem.variables("u3")["name"].value == "Zoe"
    history.clear()  # the chat window only: facts and variables stay
    assert history.messages == []
    assert mem.variables("u3")["name"].value == "Zoe"


def test_an_inferred_value_goes_when_its_facts_go(mem: ConvMemory) -> None:
    mem.ingest("u1", [{"role": "user", "content": "I live in Berlin."}])
    mem.set_variable("u1", "name", "Ada")
    (fact,) = [f for f in mem.fragments("u1") if "Berlin" in f.content]
    mem.delete_fragment("u1", fact.id)
    assert "city" not in mem.variables("u1")
    assert mem.variables("u1")["name"].value == "Ada"  # manual values are never touched
    assert any(a.object_id == "city" and a.after is None for a in mem.store.list_audit("u1"))
