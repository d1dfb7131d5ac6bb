"""A live turn writes its checkpoints in the calling thread: no pool thread started per run.

LangGraph opens a new thread pool for every run and shut it down at the end; for convmem's graph
it only carried the checkpoint writes, which the run waits for anyway. The mark is taken by the
run's own loop: another graph (one a node runs, or any graph outside a run) keeps its pool.
"""

from __future__ import annotations

import operator
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pytest
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph

from convmem_graph._inline_background import InlineExecutor, inline_background, installed
from convmem_graph.memory import ConvMemory


class _Starts:
    def __init__(self) -> None:
        self.count = 0


@pytest.fixture
def starts(monkeypatch: pytest.MonkeyPatch) -> Iterator[_Starts]:
    """Counts ``Thread.start`` calls in every thread."""
    seen = _Starts()
    start = threading.Thread.start

    def counted(self: threading.Thread) -> None:
        seen.count += 1
        start(self)

    monkeypatch.setattr(threading.Thread, "start", counted)
    yield seen


def _pair(i: int) -> list[dict[str, str]]:
    return [
        {"role": "user", "content": f"I live in city number {i} and I like tea {i}."},
        {"role": "assistant", "content": "Noted."},
    ]


@pytest.mark.parametrize("durability", ["exit", "sync"])
def test_a_live_turn_starts_no_thread_and_its_checkpoint_is_written(
    tmp_path: Path, starts: _Starts, durability: str
) -> None:
    assert installed()
    mem = ConvMemory.open(str(tmp_path / "m.db"))
    try:
        mem.lifecycle.durability = durability  # type: ignore[assignment]
        mem.ingest("u1", _pair(0), source="openai")  # the first run compiles, sets up, imports
        assert mem.checkpointer is not None
        before = starts.count
        for i in range(1, 4):
            mem.ingest("u1", _pair(i), source="openai")
            # The end state was written before the run returned.
            saved = mem.checkpointer.get_tuple({"configurable": {"thread_id": _thread(mem, "u1")}})
            assert saved is not None
            assert saved.checkpoint["channel_values"].get("memory_id") == "u1"
        assert starts.count == before
    finally:
        mem.close()


def _thread(mem: ConvMemory, memory_id: str) -> str:
    from convmem_graph.checkpoints import thread_id_for

    return thread_id_for(memory_id)


def test_async_durability_keeps_its_pool(tmp_path: Path, starts: _Starts) -> None:
    mem = ConvMemory.open(str(tmp_path / "m.db"))
    try:
        mem.lifecycle.durability = "async"
        mem.ingest("u1", _pair(0), source="openai")
        before = starts.count
        mem.ingest("u1", _pair(1), source="openai")
        assert starts.count > before
    finally:
        mem.close()


class _S(TypedDict):
    log: Annotated[list[str], operator.add]


def _graph(inner: Any = None) -> Any:
    def step(state: _S) -> dict[str, Any]:
        if inner is not None:
            inner.invoke({"log": []}, {"configurable": {"thread_id": "inner"}}, durability="exit")
        return {"log": ["step"]}

    builder = StateGraph(_S)
    builder.add_node("step", step)
    builder.add_edge(START, "step")
    builder.add_edge("step", END)
    return builder.compile(checkpointer=InMemorySaver())


def test_only_the_marked_run_is_inline(starts: _Starts) -> None:
    inner = _graph()
    outer = _graph(inner)
    outer.invoke({"log": []}, {"configurable": {"thread_id": "warm"}}, durability="exit")
    # Unmarked: both graphs start their pools' threads.
    before = starts.count
    outer.invoke({"log": []}, {"configurable": {"thread_id": "a"}}, durability="exit")
    unmarked = starts.count - before
    assert unmarked >= 2
    # Marked: the outer run is inline, the graph its node runs keeps its pool.
    before = starts.count
    with inline_background():
        out = outer.invoke({"log": []}, {"configurable": {"thread_id": "b"}}, durability="exit")
    assert out == {"log": ["step"]}
    assert starts.count - before == unmarked - 1
    # The mark ends with the block.
    before = starts.count
    outer.invoke({"log": []}, {"configurable": {"thread_id": "c"}}, durability="exit")
    assert starts.count - before == unmarked
    assert outer.get_state({"configurable": {"thread_id": "b"}}).values == {"log": ["step"]}


def test_disabled_changes_nothing(starts: _Starts) -> None:
    graph = _graph()
    graph.invoke({"log": []}, {"configurable": {"thread_id": "warm"}}, durability="exit")
    before = starts.count
    with inline_background(False):
        graph.invoke({"log": []}, {"configurable": {"thread_id": "a"}}, durability="exit")
    assert starts.count > before


def test_the_inline_executor_hands_over_results_and_errors() -> None:
    executor = InlineExecutor()
    assert executor.submit(pow, 2, 5).result() == 32
    failed = executor.submit(int, "not a number")
    assert isinstance(failed.exception(), ValueError)
    with pytest.raises(ValueError):
        failed.result()
