"""A LangGraph app that composes convmem's nodes into its own StateGraph.

What it shows:

1. The app's state extends convmem's ``MemoryState`` with its own ``reply`` key, and its graph
   reuses convmem's nodes as they are: ``ingest -> normalize -> extract -> update_variables ->
   inject``, then the app's own ``respond`` node. Every convmem node has the signature
   ``node(state, runtime: Runtime[MemoryContext])``: services come from the run context, so no
   wrapper is needed. (convmem's own graph adds conditional edges to skip idle steps; here every
   step simply runs, each one is cheap when it has nothing to do.)
2. ``respond`` reads the snapshot that ``inject`` just cached in ``runtime.context.store`` (one
   primary-key read, the same read a call start does), builds OpenAI messages from it with
   ``convmem_graph.payloads.build_openai_messages`` (persona, ``<user_memory>`` block ranked for
   the user's question, recent turns) and asks a chat model. The model is a fake that records
   its prompt, so the example runs offline and we can print what it received.
3. The graph is compiled with an ``InMemorySaver`` checkpointer (``thread_id`` = memory id) and
   invoked with ``context=MemoryContext(store=..., inputs=[RawInput(...)], vendors=["openai"])``;
   ``inject`` also returns the generic ``openai`` payload in the state.
4. The graph printed as Mermaid (``get_graph().draw_mermaid()``, offline).

Run it from the repository root (no network, no API key)::

    python examples/custom_graph.py                 # a temporary database, deleted at exit
    python examples/custom_graph.py /tmp/app.db     # keep the database
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path
from typing import Any

from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatResult
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.runtime import Runtime
from pydantic import Field

from convmem_graph.config import MemoryConfig
from convmem_graph.nodes import extract, ingest, inject, normalize, update_variables
from convmem_graph.payloads import MemoryBlockOptions, build_openai_messages
from convmem_graph.state import MemoryContext, MemoryState, RawInput
from convmem_graph.store import MemoryStore

EXAMPLES = Path(__file__).resolve().parent
MEMORY_ID = "u_10086"
PERSONA = "你是「小雨」，一个温柔的 AI 陪伴伙伴。"
QUESTION = "我对芒果过敏。今晚想吃点水果，有什么推荐？"


class AppState(MemoryState, total=False):
    """convmem's lifecycle state plus the app's own answer."""

    reply: str


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


class Respond:
    """The app's own node: answer the latest user message from the cached memory snapshot."""

    def __init__(self, model: BaseChatModel) -> None:
        self.model = model

    def __call__(self, state: AppState, runtime: Runtime[MemoryContext]) -> AppState:
        memory_id = state["memory_id"]
        # The snapshot `inject` cached: the same single read a voice call start would do.
        snapshot = runtime.context.store.load_snapshot(memory_id)
        if snapshot is None:
            raise RuntimeError(f"no cached snapshot for {memory_id!r}: run inject first")
        question = next((m.content for m in reversed(snapshot.recent) if m.role == "user"), None)
        messages = build_openai_messages(
            snapshot,
            persona=PERSONA,
            recent_turns=4,
            block=MemoryBlockOptions(query=question),
            counter=runtime.context.counter,
        )
        answer = self.model.invoke(messages)
        return {"reply": answer.text}


def build_app(model: BaseChatModel) -> CompiledStateGraph[AppState, MemoryContext, AppState, AppState]:
    """Compose convmem's nodes and the app's ``respond`` node; checkpoint in memory."""
    graph: StateGraph[AppState, MemoryContext, AppState, AppState] = StateGraph(
        AppState, context_schema=MemoryContext
    )
    graph.add_node("ingest", ingest)
    graph.add_node("normalize", normalize)
    graph.add_node("extract", extract)
    graph.add_node("update_variables", update_variables)
    graph.add_node("inject", inject)
    graph.add_node("respond", Respond(model))
    graph.add_edge(START, "ingest")
    graph.add_edge("ingest", "normalize")
    graph.add_edge("normalize", "extract")
    graph.add_edge("extract", "update_variables")
    graph.add_edge("update_variables", "inject")
    graph.add_edge("inject", "respond")
    graph.add_edge("respond", END)
    return graph.compile(checkpointer=InMemorySaver(), name="companion_app")


def section(title: str) -> None:
    """Print a section header."""
    print(f"\n=== {title} ===")


def run(db_path: str) -> None:
    """Run the app once on the bundled IM history plus a new user message."""
    model = RecordingChatModel(responses=[AIMessage(content="林晓，芒果就不碰啦～今晚来点草莓或者蓝莓吧？")])
    app = build_app(model)
    section("graph (Mermaid)")
    print(app.get_graph().draw_mermaid())

    im_history = json.loads((EXAMPLES / "conversations" / "u_10086_im_history.json").read_text("utf-8"))
    store = MemoryStore.from_url(db_path)
    try:
        context = MemoryContext(
            store=store,
            config=MemoryConfig(bot_ids=["ai_xiaoyu_bot"]),
            inputs=[
                RawInput(im_history, name="u_10086_im_history.json"),
                RawInput([{"role": "user", "content": QUESTION}], source="openai", name="app"),
            ],
            vendors=["openai"],
        )
        thread: RunnableConfig = {"configurable": {"thread_id": MEMORY_ID}}
        start: AppState = {"memory_id": MEMORY_ID}
        out = app.invoke(start, thread, context=context)

        section("run")
        print(f"new messages: {len(out.get('new_message_ids', []))}, fragment ops: {out.get('fragment_ops')}")
        print(f"variables changed: {out.get('variables_changed')}")
        print(f"payloads returned by inject: {sorted(out.get('payloads', {}))}")
        section("system message the model received")
        print(model.received[-1][0].text)
        section("reply")
        print(out["reply"])
        section("keys of the checkpointed state (thread_id = memory id)")
        print(sorted(app.get_state(thread).values))
    finally:
        store.close()


def main() -> None:
    """Run on ``argv[1]`` as the SQLite file, or on a temporary one."""
    if len(sys.argv) > 1:
        run(sys.argv[1])
        return
    with tempfile.TemporaryDirectory(prefix="convmem-app-") as tmp:
        run(str(Path(tmp) / "app.db"))


if __name__ == "__main__":
    main()
