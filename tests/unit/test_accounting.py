"""Per-stage model calls and prompt/completion tokens (issue 26, item 6), with a fake chat model.

The fake answers the LLM extractor's structured-output call with a tool call and reports usage
(``usage_metadata``) as a provider would; the run's report and a replay's JSON report carry it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel
from langchain_core.messages import AIMessage

from convmem_graph.accounting import accounted_node
from convmem_graph.config import MemoryConfig
from convmem_graph.memory import ConvMemory

#: A model extractor extracts at once (by default it waits for 10 user messages).
NOW_EXTRACT = MemoryConfig(extract_after_user_messages=1)
USAGE = {"input_tokens": 321, "output_tokens": 45, "total_tokens": 366}


class ToolFake(FakeMessagesListChatModel):
    """Answers every call with the next scripted message (tool calls pass through bind_tools)."""

    def bind_tools(self, tools: Any, **kwargs: Any) -> ToolFake:
        return self


def _answer(content: str, key: str, source: str) -> AIMessage:
    fact = {
        "content": content,
        "category": key.split(":")[0],
        "key": key,
        "value": None,
        "polarity": 1,
        "single_valued": False,
        "transient": False,
        "expires_on": None,
        "source_ids": [source],
    }
    args = {"facts": [fact], "variables": []}
    call = {"name": "ExtractionOutput", "args": args, "id": "call_1"}
    return AIMessage("", tool_calls=[call], usage_metadata=dict(USAGE))  # type: ignore[arg-type]


def test_a_run_reports_extract_calls_and_tokens(tmp_path: Path) -> None:
    model = ToolFake(responses=[_answer("用户对芒果过敏", "health:allergy", "m1")] * 3)
    with ConvMemory.open(str(tmp_path / "a.db"), model=model, config=NOW_EXTRACT) as mem:
        turn = {"id": "m1", "role": "user", "content": "我对芒果过敏。"}
        result = mem.ingest("u_1", [turn], source="openai")
    assert result.model_calls >= 1
    extract = result.model_usage["extract"]
    assert extract["calls"] == result.model_calls - result.model_usage.get("summarize", {}).get("calls", 0)
    assert extract["prompt_tokens"] == USAGE["input_tokens"] * extract["calls"]
    assert extract["completion_tokens"] == USAGE["output_tokens"] * extract["calls"]


def test_a_run_without_a_model_reports_no_usage(tmp_path: Path) -> None:
    with ConvMemory.open(str(tmp_path / "h.db")) as mem:
        result = mem.ingest("u_1", [{"role": "user", "content": "我对芒果过敏。"}], source="openai")
    assert (result.model_calls, result.model_usage) == (0, {})


def test_the_wrapper_counts_the_calls_a_node_added() -> None:
    def node(state: dict[str, Any]) -> dict[str, Any]:
        return {"model_calls": state["model_calls"] + 2}

    out = accounted_node("summarize", node)({"model_calls": 3, "model_usage": {"extract": {"calls": 3}}})
    assert out["model_usage"] == {
        "extract": {"calls": 3},
        "summarize": {"calls": 2, "prompt_tokens": 0, "completion_tokens": 0},
    }


def test_a_replay_report_carries_per_stage_usage(tmp_path: Path) -> None:
    from convmem_graph.replay import Replayer

    archive = tmp_path / "archive.jsonl"
    lines = [[{"id": f"m{n}", "role": "user", "content": f"我对芒果过敏。{n}"}] for n in range(2)]
    archive.write_text("\n".join(json.dumps(x, ensure_ascii=False) for x in lines) + "\n", encoding="utf-8")
    nothing = AIMessage(
        "",
        tool_calls=[{"name": "ExtractionOutput", "args": {"facts": [], "variables": []}, "id": "call_1"}],
        usage_metadata=dict(USAGE),  # type: ignore[arg-type]
    )
    model = ToolFake(responses=[nothing] * 10)
    with ConvMemory.open(str(tmp_path / "r.db"), model=model, config=NOW_EXTRACT) as mem:
        report = Replayer(mem.lifecycle, source="openai", memory_id="u_r").run([archive])
    doc = report.as_dict()
    usage = doc["model_usage"]
    assert isinstance(usage, dict) and usage["extract"]["calls"] >= 1
    assert usage["extract"]["prompt_tokens"] == USAGE["input_tokens"] * usage["extract"]["calls"]


def test_the_viewer_lifecycle_page_shows_calls_and_tokens_per_stage(tmp_path: Path) -> None:
    from convmem_graph.viewer.lifecycle import lifecycle_page

    model = ToolFake(responses=[_answer("用户对芒果过敏", "health:allergy", "m1")] * 3)
    with ConvMemory.open(str(tmp_path / "v.db"), model=model, config=NOW_EXTRACT) as mem:
        mem.ingest("u_1", [{"id": "m1", "role": "user", "content": "我对芒果过敏。"}], source="openai")
        page = lifecycle_page(mem, "u_1")
    row = '<tr><td>extract</td><td class="num">1</td><td class="num">321</td><td class="num">45</td></tr>'
    assert row in page


def test_timed_node_starts_a_fresh_record_per_run_and_keeps_run_order() -> None:
    from convmem_graph.accounting import timed_node

    def node(state: dict[str, Any]) -> dict[str, Any]:
        return {"ingested": 1}

    first = timed_node("ingest", node, starts_run=True)({"node_ms": {"inject": 9.0}})
    assert list(first["node_ms"]) == ["ingest"] and first["node_ms"]["ingest"] >= 0
    second = timed_node("normalize", node)({"node_ms": first["node_ms"]})
    assert list(second["node_ms"]) == ["ingest", "normalize"]
    # What a node returns besides an update (a Command, None) passes through untouched.
    assert timed_node("inject", lambda state: None)({}) is None


def test_merge_node_ms_sums_per_node() -> None:
    from convmem_graph.accounting import merge_node_ms

    assert merge_node_ms({"ingest": 1.25}, {"ingest": 0.5, "extract": 3.0}) == {
        "ingest": 1.75,
        "extract": 3.0,
    }


def test_a_run_reports_the_time_of_each_node_it_ran(tmp_path: Path) -> None:
    with ConvMemory.open(str(tmp_path / "t.db"), durability="exit") as mem:
        result = mem.ingest("u_1", [{"role": "user", "content": "我对芒果过敏。"}], source="openai")
    nodes = list(result.node_ms)
    assert nodes[:2] == ["ingest", "normalize"] and nodes[-1] == "inject"
    assert all(ms >= 0 for ms in result.node_ms.values())


def test_a_replay_report_carries_per_node_time_over_its_runs(tmp_path: Path) -> None:
    from convmem_graph.replay import Replayer

    archive = tmp_path / "archive.jsonl"
    lines = [[{"id": f"m{n}", "role": "user", "content": f"我对芒果过敏。{n}"}] for n in range(3)]
    archive.write_text("\n".join(json.dumps(x, ensure_ascii=False) for x in lines) + "\n", encoding="utf-8")
    with ConvMemory.open(str(tmp_path / "r.db"), durability="exit") as mem:
        report = Replayer(mem.lifecycle, source="openai", memory_id="u_r", batch_messages=1).run([archive])
    doc = report.as_dict()
    assert doc["runs"] == 3
    node_ms = doc["node_ms"]
    assert isinstance(node_ms, dict) and {"ingest", "normalize", "inject"} <= set(node_ms)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.dictionaries(st.sampled_from(["ingest", "normalize", "extract", "inject"]), st.floats(0, 5000)),
        max_size=6,
    ),
    st.randoms(use_true_random=False),
)
def test_merged_node_times_do_not_depend_on_the_order_reports_arrive(
    runs: list[dict[str, float]], rnd: Any
) -> None:
    from convmem_graph.accounting import merge_node_ms

    # Worker processes report in whatever order they finish.
    shuffled = list(runs)
    rnd.shuffle(shuffled)
    ordered: dict[str, float] = {}
    other: dict[str, float] = {}
    for run in runs:
        ordered = merge_node_ms(ordered, run)
    for run in shuffled:
        other = merge_node_ms(other, run)
    assert set(ordered) == set(other)
    for node, ms in ordered.items():
        assert other[node] == pytest.approx(ms, abs=0.01)
