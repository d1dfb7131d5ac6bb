"""A fake chat model that counts its calls in flight, and a replay archive whose notes show order.

Shared by the unit and PostgreSQL tests of model calls at once in replay
(``tests/unit/extractors/test_model_concurrency.py``,
``tests/integration/test_model_concurrency_postgres.py``).
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from langchain_core.language_models import BaseChatModel, LanguageModelInput
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.runnables import Runnable
from langchain_core.utils.function_calling import convert_to_openai_tool
from pydantic import ConfigDict, Field

from convmem_graph.config import MemoryConfig
from convmem_graph.extractors.llm import LLMExtractor, LLMSummarizer
from convmem_graph.runner import Lifecycle
from convmem_graph.store import MemoryStore

__all__ = [
    "CONFIG",
    "EMPTY_ANSWER",
    "NOTE",
    "T0",
    "USERS",
    "InFlightFake",
    "Limited",
    "fully_extracted",
    "llm_lifecycle",
    "write_archive",
]

T0 = 1_767_268_800_000
USERS = ["ana", "bo", "chen", "dee", "eli", "fay"]
NOTE = re.compile(r"(\w+) says note (\d+)")
EMPTY_ANSWER: dict[str, Any] = {"facts": [], "variables": []}
CONFIG = MemoryConfig(extract_after_user_messages=1)  # what convmem replay uses: extract at once


def write_archive(folder: Path, users: Sequence[str], sessions: int) -> Path:
    """JSON Lines of OpenAI-style requests; every user message says whose note number it is."""
    folder.mkdir(parents=True, exist_ok=True)
    with (folder / "archive.jsonl").open("w", encoding="utf-8") as fh:
        for s in range(sessions):
            for k, user in enumerate(users):
                base = T0 + s * 86_400_000 + k * 1000
                messages = [
                    {"role": "user", "content": f"{user} says note {s:03d}", "timestamp": base},
                    {"role": "assistant", "content": "Noted.", "timestamp": base + 500},
                ]
                fh.write(json.dumps({"user": user, "messages": messages}) + "\n")
    return folder


class InFlightFake(BaseChatModel):
    """Answers extraction calls with no facts and summary calls with a sentence; counts calls in flight.

    Each call holds until ``hold_until`` calls are in flight at once (or ``hold_s`` passed, so a
    replay that never gets there fails the assertion instead of hanging), then every later call
    goes straight through. Extraction prompts' notes are recorded in the order the calls came.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    hold_until: int = 1
    hold_s: float = 10.0
    state: dict[str, Any] = Field(default_factory=dict)

    def model_post_init(self, __context: Any) -> None:
        self.state.update(cond=threading.Condition(), in_flight=0, peak=0, released=False, notes=[], calls=0)

    @property
    def _llm_type(self) -> str:
        return "in-flight-fake"

    def _generate(
        self, messages: list[BaseMessage], stop: list[str] | None = None, run_manager: Any = None, **kw: Any
    ) -> ChatResult:
        st = self.state
        cond: threading.Condition = st["cond"]
        with cond:
            st["calls"] += 1
            st["in_flight"] += 1
            st["peak"] = max(st["peak"], st["in_flight"])
            if st["in_flight"] >= self.hold_until:
                st["released"] = True
            cond.notify_all()
            cond.wait_for(lambda: st["released"], timeout=self.hold_s)
            if kw.get("tools"):
                st["notes"].extend(NOTE.findall(messages[-1].text))
        try:
            if kw.get("tools"):
                name = kw["tools"][0]["function"]["name"]
                call = {"name": name, "args": EMPTY_ANSWER, "id": "call_fake"}
                return ChatResult(generations=[ChatGeneration(message=AIMessage("", tool_calls=[call]))])
            return ChatResult(generations=[ChatGeneration(message=AIMessage("The user keeps notes."))])
        finally:
            with cond:
                st["in_flight"] -= 1

    def bind_tools(
        self, tools: Sequence[Any], *, tool_choice: Any = None, **kwargs: Any
    ) -> Runnable[LanguageModelInput, AIMessage]:
        return self.bind(tools=[convert_to_openai_tool(t) for t in tools], tool_choice=tool_choice, **kwargs)


def llm_lifecycle(store: MemoryStore, chat: BaseChatModel) -> Lifecycle:
    return Lifecycle(
        store,
        config=CONFIG,
        extractor=LLMExtractor(chat, method="function_calling"),
        summarizer=LLMSummarizer(chat),
    )


def fully_extracted(store: MemoryStore, user: str) -> bool:
    last = store.cursors(user)[0]
    return last > 0 and store.extracted_seq(user) == last


class Limited(Exception):
    """A 429 as the OpenAI SDK raises it: a status code and the response's headers."""

    status_code = 429

    def __init__(self, headers: dict[str, str]) -> None:
        super().__init__("rate limited")
        self.response = SimpleNamespace(headers=headers)
