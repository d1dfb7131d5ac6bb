from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
from langchain_core.messages import (
    AIMessage,
    HumanMessage,
    RemoveMessage,
    SystemMessage,
    ToolMessage,
    messages_to_dict,
)

from convmem_graph.errors import SourceFormatError
from convmem_graph.sources import read_payload

CONVERSATION: list[dict[str, Any]] = [
    {"role": "system", "content": "You are helpful."},
    {"role": "system", "content": "<user_memory>\n[事实] 用户对芒果过敏。\n</user_memory>"},
    {"role": "user", "content": "我对芒果过敏", "timestamp": 1767268800},
    {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "type": "function"}]},
    {"role": "tool", "tool_call_id": "c1", "content": "{}"},
    {
        "role": "assistant",
        "content": [{"type": "text", "text": "记住了，"}, {"type": "text", "text": "不吃芒果。"}],
    },
    {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "https://x"}}]},
    {"role": "user", "content": "  "},
    {"role": "user", "name": "linxiao", "content": "谢谢", "timestamp": 1767268805123},
]


def test_openai_list_rules() -> None:
    r = read_payload(CONVERSATION)
    assert r.source == "openai"
    assert [(m.role, m.content) for m in r.messages] == [
        ("user", "我对芒果过敏"),
        ("assistant", "记住了，不吃芒果。"),
        ("user", "谢谢"),
    ]
    assert [s.reason for s in r.skipped] == [
        "system",
        "memory_block",
        "tool_call",
        "tool",
        "non_text",
        "empty",
    ]
    assert [s.path for s in r.skipped][:2] == ["[0]", "[1]"]
    assert all(m.channel == "api" for m in r.messages)
    assert [m.source for m in r.messages] == ["message", "llm", "message"]
    # own timestamp honored (seconds -> ms); a message without one follows its predecessor
    assert [m.timestamp_ms for m in r.messages] == [1767268800000, 1767268800000, 1767268805123]
    assert r.messages[2].speaker_id == "linxiao"


def test_openai_request_with_user_and_base_time() -> None:
    request = {"model": "m", "user": "u_10086", "messages": [{"role": "user", "content": "hi"}]}
    r = read_payload(request)
    assert r.source == "openai" and r.user_id == "u_10086"
    assert r.messages[0].timestamp_ms == 0
    stamped = read_payload(request, base_timestamp_ms=1767268800000)
    assert stamped.messages[0].timestamp_ms == 1767268800000
    assert stamped.messages[0].id == r.messages[0].id  # ids never depend on time
    assert read_payload({**request, "created": 1767268801}).messages[0].timestamp_ms == 1767268801000


def test_openai_ids_depend_on_position_role_and_content() -> None:
    a = read_payload([{"role": "user", "content": "好"}, {"role": "user", "content": "好"}])
    assert len({m.id for m in a.messages}) == 2
    again = read_payload([{"role": "user", "content": "好"}, {"role": "user", "content": "好"}])
    assert [m.id for m in a.messages] == [m.id for m in again.messages]
    grown = read_payload(
        [
            {"role": "user", "content": "好"},
            {"role": "user", "content": "好"},
            {"role": "assistant", "content": "嗯"},
        ]
    )
    assert [m.id for m in grown.messages][:2] == [m.id for m in a.messages]


def test_openai_bad_items() -> None:
    data = [
        {"role": "user", "content": "ok"},
        {"role": "wizard", "content": "x"},
        "text",
        {"role": "user", "content": 5},
    ]
    r = read_payload(data, "openai")
    assert [m.content for m in r.messages] == ["ok"]
    assert [(s.reason, s.path) for s in r.skipped] == [
        ("invalid", "[1].role"),
        ("invalid", "[2]"),
        ("invalid", "[3].content"),
    ]
    with pytest.raises(SourceFormatError) as err:
        read_payload(data, "openai", lenient=False)
    assert err.value.path == "[1].role"
    with pytest.raises(SourceFormatError):
        read_payload({"messages": "x"}, "openai")


def _lc_messages() -> list[Any]:
    return [
        SystemMessage("be kind"),
        HumanMessage("I run along West Lake", additional_kwargs={"timestamp": 1767268800123}),
        AIMessage("", tool_calls=[{"name": "lookup", "args": {}, "id": "t1"}]),
        ToolMessage("result", tool_call_id="t1"),
        AIMessage([{"type": "text", "text": "Nice route!"}], id="run-7"),
        RemoveMessage(id="old"),
    ]


def test_langchain_objects() -> None:
    r = read_payload(_lc_messages())
    assert r.source == "langchain"
    assert [(m.role, m.content) for m in r.messages] == [
        ("user", "I run along West Lake"),
        ("assistant", "Nice route!"),
    ]
    assert Counter(s.reason for s in r.skipped) == {"system": 1, "tool_call": 1, "tool": 1, "control": 1}
    assert [m.timestamp_ms for m in r.messages] == [1767268800123, 1767268800123]


def test_langchain_dicts_match_objects() -> None:
    objects = read_payload(_lc_messages())
    dicts = read_payload(messages_to_dict([m for m in _lc_messages() if not isinstance(m, RemoveMessage)]))
    assert dicts.source == "langchain"
    assert [(m.id, m.content) for m in dicts.messages] == [(m.id, m.content) for m in objects.messages]


def test_same_conversation_same_ids_in_openai_and_langchain() -> None:
    oa = read_payload([{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}])
    lc = read_payload([HumanMessage("hi"), AIMessage("hello")])
    assert [m.id for m in oa.messages] == [m.id for m in lc.messages]


def test_langchain_bad_dict_is_invalid() -> None:
    r = read_payload(
        [{"type": "human", "data": {"content": "ok"}}, {"type": "alien", "data": {}}], "langchain"
    )
    assert [m.content for m in r.messages] == ["ok"]
    assert [(s.reason, s.path) for s in r.skipped] == [("invalid", "[1]")]


def test_same_text_at_different_times_is_two_messages() -> None:
    day = 86_400_000
    first = read_payload([{"role": "user", "content": "ok", "timestamp": 1_767_000_000_000}])
    second = read_payload([{"role": "user", "content": "ok", "timestamp": 1_767_000_000_000 + day}])
    again = read_payload([{"role": "user", "content": "ok", "timestamp": 1_767_000_000_000}])
    assert first.messages[0].id != second.messages[0].id
    assert first.messages[0].id == again.messages[0].id


def test_peek_user_id_agrees_with_read_payload() -> None:
    from convmem_graph.sources import peek_user_id

    doc = {"user": "u_1", "messages": [{"role": "user", "content": "hi"}]}
    assert peek_user_id(doc) == read_payload(doc).user_id == "u_1"
    assert peek_user_id({"messages": [{"role": "user", "content": "hi"}]}) is None
    assert peek_user_id([{"role": "user", "content": "hi"}]) is None
    assert peek_user_id({"MsgList": []}) is None  # other formats: read to know
