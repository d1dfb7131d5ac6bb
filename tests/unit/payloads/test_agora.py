"""Agora payloads: golden join / update bodies and custom-LLM messages, validation, secrets."""

from __future__ import annotations

import copy
import logging
from typing import Any

import pytest
from pydantic import ValidationError

from convmem_graph.models import MemorySnapshot
from convmem_graph.payloads import (
    AgoraOptions,
    build_custom_llm_messages,
    build_join_body,
    build_join_llm,
    build_system_messages,
    build_update_body,
)
from tests.conftest import load_fixture
from tests.unit.payloads.test_story import PERSONA, story_snapshot

JOIN = load_fixture("agora_join_request.json")
FIXTURE_LLM = JOIN["properties"]["llm"]
PASSTHROUGH = {
    k: v for k, v in FIXTURE_LLM.items() if k not in ("system_messages", "params", "vendor", "max_history")
}


def fixture_options(**kw: Any) -> AgoraOptions:
    args: dict[str, Any] = {
        "persona": PERSONA,
        "vendor": "custom",
        "params": FIXTURE_LLM["params"],
        "max_history": 32,
        "llm": PASSTHROUGH,
    }
    args.update(kw)
    return AgoraOptions(**args)


def fixture_properties() -> dict[str, Any]:
    return {k: v for k, v in JOIN["properties"].items() if k != "llm"}


def later_snapshot() -> MemorySnapshot:
    """The memory after the call of the update fixture: the trip fact refined, a new summary."""
    snap = story_snapshot()
    fragments = []
    for f in snap.fragments:
        if f.id == "f_trip":
            f = f.model_copy(update={"content": "用户 2026-02-10 至 02-14 去成都出差，需要订酒店。"})
        if f.id == "f_noodle":
            f = f.model_copy(update={"status": "superseded"})
        fragments.append(f)
    summary = snap.summary.model_copy(update={"text": "今晚用户加班到九点，晚饭吃了牛肉面（不放香菜）。"})  # type: ignore[union-attr]
    return MemorySnapshot(
        memory_id=snap.memory_id,
        variables=snap.variables,
        fragments=fragments,  # the validator keeps active fragments only
        summary=summary,
        recent=snap.recent,
    )


def test_join_body_matches_the_fixture() -> None:
    properties = fixture_properties()
    before = copy.deepcopy(properties)
    body = build_join_body(story_snapshot(), fixture_options(), name=JOIN["name"], properties=properties)
    assert body == JOIN
    assert properties == before  # the caller's properties are copied, not modified


def test_join_llm_keys_and_system_messages() -> None:
    llm = build_join_llm(story_snapshot(), fixture_options())
    assert set(llm) == set(FIXTURE_LLM)
    assert [m["role"] for m in llm["system_messages"]] == ["system", "system"]
    assert llm["system_messages"][0]["content"] == PERSONA
    assert llm["system_messages"][1]["content"].startswith("<user_memory>\n")
    assert llm["greeting_message"] == "晚上好呀{{user_name}}，我是小雨。今天过得怎么样？"
    assert llm["template_variables"] == {"user_name": "林晓"}


def test_update_body_matches_the_fixture() -> None:
    expected = load_fixture("agora_update_request.json")
    assert build_update_body(later_snapshot(), fixture_options()) == expected
    with_token = build_update_body(later_snapshot(), fixture_options(), token="007eJxNEW")
    assert with_token["properties"]["token"] == "007eJxNEW"
    assert with_token["properties"]["llm"] == expected["properties"]["llm"]


def test_update_requires_the_complete_params() -> None:
    with pytest.raises(ValueError, match=r"properties\.llm\.params is required.*AgoraOptions\.params"):
        build_update_body(story_snapshot(), fixture_options(params=None))
    empty = build_update_body(story_snapshot(), fixture_options(params={}))
    assert empty["properties"]["llm"]["params"] == {}


def test_custom_llm_messages_match_the_fixture() -> None:
    expected = load_fixture("agora_custom_llm_request.json")["messages"]
    messages = build_custom_llm_messages(story_snapshot(), fixture_options())
    assert messages == expected
    interrupted = messages[6]
    assert interrupted["content"] == "好的，我记住了，你对芒果过敏，以后推荐水果时我会避开"
    assert interrupted["metadata"]["original"].endswith("周末要不要试试草莓蛋糕？")
    assert "agent_id" not in interrupted["metadata"]  # internal message metadata is not forwarded


def test_standard_llm_messages_keep_only_role_and_content() -> None:
    expected = load_fixture("agora_custom_llm_request.json")["messages"]
    messages = build_custom_llm_messages(story_snapshot(), fixture_options(), extended=False)
    assert messages == [{"role": m["role"], "content": m["content"]} for m in expected]
    assert all(set(m) == {"role", "content"} for m in messages)


def test_recent_turn_count_and_turns_without_turn_id() -> None:
    snap = story_snapshot()
    recent = [m.model_copy(update={"turn_id": None}) for m in snap.recent]
    messages = build_custom_llm_messages(
        snap.model_copy(update={"recent": recent}), fixture_options(recent_turns=2)
    )
    assert len(messages) == 4
    assert "turn_id" not in messages[2] and messages[2]["timestamp"] == 1767268824110
    assert messages[3]["metadata"] == {"source": "asr", "user": "10086"}


def test_system_messages_omit_empty_parts() -> None:
    empty = MemorySnapshot(memory_id="m")
    assert build_system_messages(empty, AgoraOptions()) == []
    only_memory = build_system_messages(story_snapshot(), AgoraOptions())
    assert len(only_memory) == 1 and only_memory[0]["content"].startswith("<user_memory>")


def test_optional_llm_fields_are_omitted() -> None:
    llm = build_join_llm(story_snapshot(), AgoraOptions(vendor=None, llm={"url": "https://x/v1"}))
    assert set(llm) == {"url", "system_messages"}


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"name": ""}, "agora join: name must be a non-empty string"),
        ({"properties": {"token": "t", "agent_rtc_uid": "1", "remote_rtc_uids": []}}, r"properties\.channel"),
        ({"properties": {**fixture_properties(), "llm": {}}}, r"properties\.llm is built from AgoraOptions"),
    ],
)
def test_join_errors_name_the_field(kw: dict[str, Any], message: str) -> None:
    args: dict[str, Any] = {"name": "agent-1", "properties": fixture_properties()}
    args.update(kw)
    with pytest.raises(ValueError, match=message):
        build_join_body(story_snapshot(), fixture_options(), **args)


def test_join_requires_the_llm_url() -> None:
    with pytest.raises(ValueError, match=r"properties\.llm\.url is required"):
        build_join_llm(story_snapshot(), AgoraOptions(llm={"api_key": "k"}))


def test_preset_and_pipeline_id() -> None:
    body = build_join_body(
        story_snapshot(),
        fixture_options(),
        name="a",
        properties=fixture_properties(),
        preset="p1,p2",
        pipeline_id="pipe",
    )
    assert list(body) == ["name", "preset", "pipeline_id", "properties"]


@pytest.mark.parametrize("key", ["system_messages", "params", "vendor", "max_history"])
def test_computed_llm_keys_cannot_be_passed_through(key: str) -> None:
    with pytest.raises(ValidationError, match=f"properties.llm.{key} is built by convmem_graph"):
        AgoraOptions(llm={key: 1})


@pytest.mark.parametrize("value", [0, 1025])
def test_max_history_range(value: int) -> None:
    with pytest.raises(ValidationError, match="max_history"):
        AgoraOptions(max_history=value)


def test_api_key_is_passed_through_but_never_shown_or_logged(caplog: pytest.LogCaptureFixture) -> None:
    options = fixture_options(
        llm={**PASSTHROUGH, "api_key": "sk-agora-777", "headers": {"Authorization": "Bearer tok-999"}}
    )
    text = repr(options)
    assert "sk-agora-777" not in text and "tok-999" not in text
    assert "max_tokens" in text  # only secret-looking keys are masked
    with caplog.at_level(logging.DEBUG):
        llm = build_join_llm(story_snapshot(), options)
    assert llm["api_key"] == "sk-agora-777"
    assert "sk-agora-777" not in caplog.text and "tok-999" not in caplog.text
