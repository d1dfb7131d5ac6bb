"""A LangChain 1.x agent with long-term memory through ``ConvMemory.as_middleware()``.

What it shows:

1. A memory that already knows a few facts (two OpenAI-style messages ingested beforehand).
2. ``create_agent(model, middleware=[mem.as_middleware()], context_schema=...)``, invoked with
   ``context={"memory_id": ...}``: before each model call the middleware adds the
   ``<user_memory>`` block to that request's system message. The model here is a fake
   (``FakeMessagesListChatModel``) that records the messages it receives, so we can print exactly
   what it saw.
3. After the agent finishes a turn, the middleware hands the turn to the memory lifecycle
   (``mode="inline"``). The second turn's memory block therefore contains the fact the user told
   in the first turn, although the agent has no checkpointer and the second invocation carries
   only the new user message.
4. The memory block is added per request, never stored in agent state: the agent's returned
   messages hold no system message.

Run it from the repository root (no network, no API key)::

    python examples/agent_middleware.py                # a temporary database, deleted at exit
    python examples/agent_middleware.py /tmp/agent.db  # keep the database
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path
from typing import Any, TypedDict

from langchain.agents import create_agent
from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
from langchain_core.outputs import ChatResult
from pydantic import Field

from convmem_graph.memory import ConvMemory

MEMORY_ID = "u_demo"


class AgentContext(TypedDict):
    """Run context of the agent; the middleware reads ``memory_id`` from it."""

    memory_id: str


class RecordingChatModel(FakeMessagesListChatModel):
    """A fake chat model that replies from a fixed list and records every prompt it receives."""

    received: list[list[BaseMessage]] = Field(default_factory=list)

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        self.received.append(list(messages))
        return super()._generate(messages, stop=stop, run_manager=run_manager, **kwargs)


def system_text(messages: list[BaseMessage]) -> str:
    """Return the system message of a prompt (empty if there is none)."""
    return next((m.text for m in messages if isinstance(m, SystemMessage)), "")


def section(title: str) -> None:
    """Print a section header."""
    print(f"\n=== {title} ===")


def run(db_path: str) -> None:
    """Run two agent turns against a memory stored in ``db_path``."""
    with ConvMemory.open(db_path) as mem:
        # Earlier conversation, e.g. from another channel: the memory knows name and city.
        mem.ingest(
            MEMORY_ID,
            [
                {"role": "user", "content": "我叫林晓，在杭州工作。"},
                {"role": "assistant", "content": "你好林晓！杭州最近天气怎么样？"},
            ],
        )
        section("memory before the agent runs")
        for fragment in mem.fragments(MEMORY_ID):
            print(f"- {fragment.content}")

        model = RecordingChatModel(
            responses=[
                AIMessage(content="记住了，芒果不碰。那试试草莓或者蓝莓吧？"),
                AIMessage(content="来一碗清淡的番茄鸡蛋面怎么样？"),
            ]
        )
        agent = create_agent(
            model,
            tools=[],
            system_prompt="你是「小雨」，一个温柔的 AI 陪伴伙伴。",
            middleware=[mem.as_middleware()],
            context_schema=AgentContext,
        )
        context: AgentContext = {"memory_id": MEMORY_ID}

        turns = ["我对芒果过敏。推荐个水果吧？", "晚饭吃点什么好？"]
        for number, text in enumerate(turns, start=1):
            result = agent.invoke({"messages": [HumanMessage(content=text)]}, context=context)
            section(f"turn {number}: user")
            print(text)
            section(f"turn {number}: system message the model received")
            print(system_text(model.received[-1]))
            section(f"turn {number}: reply")
            print(result["messages"][-1].text)
            section(f"turn {number}: message types kept in agent state")
            print([m.type for m in result["messages"]])

        section("memory after both turns")
        for fragment in mem.fragments(MEMORY_ID):
            print(f"- {fragment.content}")


def main() -> None:
    """Run on ``argv[1]`` as the SQLite file, or on a temporary one."""
    if len(sys.argv) > 1:
        run(sys.argv[1])
        return
    with tempfile.TemporaryDirectory(prefix="convmem-agent-") as tmp:
        run(str(Path(tmp) / "agent.db"))


if __name__ == "__main__":
    main()
