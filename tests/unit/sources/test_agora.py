from __future__ import annotations

import copy
from collections import Counter

import pytest

from convmem_graph.errors import SourceFormatError
from convmem_graph.sources import read_payload
from tests.conftest import FIXTURES, load_fixture

HISTORY = "agora_history_response.json"
WEBHOOK = "agora_webhook_103_agent_history.json"
CUSTOM = "agora_custom_llm_request.json"


def test_history_response_every_source_value() -> None:
    r = read_payload(load_fixture(HISTORY), "agora")
    assert r.source == "agora"
    assert r.skipped == []
    assert [(m.role, m.source, m.turn_id) for m in r.messages] == [
        ("assistant", "greeting", 0),
        ("user", "asr", 1),
        ("assistant", "llm", 1),
        ("user", "asr", 2),
        ("assistant", "llm", 2),
        ("user", "asr", 3),
        ("user", "message", 4),
        ("assistant", "llm", 4),
        ("assistant", "llm_failure", 5),
        ("assistant", "silence", 6),
        ("user", "command", 7),
    ]
    # Typed text is the IM channel; everything else is voice.
    assert [m.channel for m in r.messages].count("im") == 1
    assert r.messages[6].channel == "im" and r.messages[6].content == "（文字）出差是 2 月 10 号到 14 号"
    # item timestamps are 13-digit ms: kept as they are
    assert r.messages[0].timestamp_ms == 1767268801250
    assert r.messages[1].speaker_id == "10086"
    assert r.user_id == "10086"
    assert r.memory_id is None
    assert all(m.memory_id == "" for m in r.messages)


def test_interrupted_reply_keeps_spoken_content_and_original() -> None:
    r = read_payload(load_fixture(HISTORY), "agora")
    cut = r.messages[4]
    assert cut.interrupted is True
    assert cut.content == "好的，我记住了，你对芒果过敏，以后推荐水果时我会避开"
    assert (
        cut.original
        == "好的，我记住了，你对芒果过敏，以后推荐水果时我会避开芒果和芒果做的甜品。周末要不要试试草莓蛋糕？"
    )
    assert cut.metadata["interrupt_timestamp_ms"] == 1767268827390
    assert [m.interrupted for m in r.messages].count(True) == 1


def test_webhook_103_envelope() -> None:
    r = read_payload(load_fixture(WEBHOOK))
    assert r.source == "agora"
    assert r.memory_id == "mem_u10086"
    assert r.user_id == "u_10086"
    assert Counter(s.reason for s in r.skipped) == {"empty": 1, "think_injected": 1}
    assert {s.path for s in r.skipped} == {"payload.contents[1]", "payload.contents[6]"}
    assert [m.content for m in r.messages] == [
        "晚上好呀林晓，我是小雨。今天过得怎么样？",
        "还行吧，就是今天又加班到九点，有点累。",
        "辛苦啦！加班到这么晚，晚饭吃了吗？",
        "吃了，点了一份不放香菜的牛肉面。By the way, I'm allergic to mango, remember that.",
        "好的，我记住了，你对芒果过敏，以后推荐水果时我会避开",
        "对对，还有我下个月要去成都出差。",
    ]
    # No metadata in the 103 body: time from speech_start_ms, default sources, no turn ids.
    assert [m.timestamp_ms for m in r.messages][:2] == [1767268801250, 1767268806400]
    assert [m.source for m in r.messages] == ["llm", "asr", "llm", "asr", "llm", "asr"]
    assert all(m.turn_id is None for m in r.messages)
    assert r.messages[0].metadata["agent_id"] == "A42AF83JT67YU29RX41CB56PK18WQ03M"


def test_webhook_raw_bytes_are_read_as_utf8_json() -> None:
    body = (FIXTURES / WEBHOOK).read_bytes()
    r = read_payload(body)
    assert r.source == "agora" and len(r.messages) == 6


def test_custom_llm_request_skips_system_and_memory_block() -> None:
    r = read_payload(load_fixture(CUSTOM))
    assert r.source == "agora"
    assert [(s.reason, s.path) for s in r.skipped] == [
        ("system", "messages[0]"),
        ("memory_block", "messages[1]"),
    ]
    assert len(r.messages) == 6
    assert r.messages[-1].content == "对对，还有我下个月要去成都出差。"
    assert r.messages[4].interrupted and r.messages[4].original is not None
    assert not any("<user_memory>" in m.content for m in r.messages)


def test_ids_are_stable_and_distinct() -> None:
    for name in (HISTORY, WEBHOOK, CUSTOM):
        a = read_payload(load_fixture(name))
        b = read_payload(load_fixture(name))
        assert [m.id for m in a.messages] == [m.id for m in b.messages]
        assert len({m.id for m in a.messages}) == len(a.messages)


def test_notice_id_and_notify_ms_do_not_change_ids() -> None:
    doc = load_fixture(WEBHOOK)
    retry = copy.deepcopy(doc)
    retry["noticeId"] = "2000042107:8812:999"
    retry["notifyMs"] += 5000
    assert [m.id for m in read_payload(doc).messages] == [m.id for m in read_payload(retry).messages]


def test_seconds_timestamps_and_spelling_variants() -> None:
    doc = {
        "agent_id": "A1",
        "start_ts": 1767268800,
        "contents": [
            {"role": "assistant", "content": "hello", "turn_id": 1, "timestamp": 1767268801, "metadata": {}},
            {
                "role": "assistant",
                "content": "sorry",
                "turn_id": 1,
                "timestamp": 1767268802,
                "metadata": {"source": "llm failure"},
            },
            {"role": "user", "content": "ok", "turn_id": "2", "metadata": {"source": "ASR"}},
            {"role": "user", "content": "hm", "turn_id": "", "metadata": {"source": " - "}},
        ],
    }
    r = read_payload(doc, "agora")
    assert [m.timestamp_ms for m in r.messages] == [
        1767268801000,
        1767268802000,
        1767268802000,
        1767268802000,
    ]
    assert [m.source for m in r.messages] == ["llm", "llm_failure", "asr", "asr"]
    assert [m.turn_id for m in r.messages] == [1, 1, 2, None]


def test_items_without_time_keep_array_order() -> None:
    doc = {
        "agent_id": "A1",
        "start_ts": 1767268800,
        "contents": [
            {"role": "user", "content": "first"},
            {"role": "assistant", "content": "second", "speech_start_ms": 1767268805000},
            {"role": "user", "content": "third"},
        ],
    }
    r = read_payload(doc, "agora")
    assert [m.content for m in r.messages] == ["first", "second", "third"]
    assert [m.timestamp_ms for m in r.messages] == [1767268800000, 1767268805000, 1767268805000]


def test_barge_in_items_are_sorted_by_time() -> None:
    doc = {
        "agent_id": "A1",
        "contents": [
            {"role": "assistant", "content": "later", "speech_start_ms": 1767268830000},
            {"role": "user", "content": "earlier", "speech_start_ms": 1767268825000},
        ],
    }
    assert [m.content for m in read_payload(doc, "agora").messages] == ["earlier", "later"]


def test_other_event_types_are_skipped_with_reason() -> None:
    doc = {"noticeId": "x", "productId": 17, "eventType": 102, "payload": {"agent_id": "A1", "message": "OK"}}
    r = read_payload(doc)
    assert r.messages == []
    assert [(s.reason, s.path, s.detail) for s in r.skipped] == [
        ("event_type_ignored", "eventType", "102 agent left")
    ]


def test_lenient_reports_bad_items_and_strict_raises() -> None:
    doc = load_fixture(HISTORY)
    doc["contents"][2]["role"] = "robot"
    doc["contents"][5]["timestamp"] = "yesterday"
    r = read_payload(doc, "agora")
    assert len(r.messages) == 9
    assert [(s.reason, s.path) for s in r.skipped] == [
        ("invalid", "contents[2].role"),
        ("invalid", "contents[5].timestamp"),
    ]
    with pytest.raises(SourceFormatError) as err:
        read_payload(doc, "agora", lenient=False)
    assert (err.value.source, err.value.path) == ("agora", "contents[2].role")


def test_wrong_structure_always_raises() -> None:
    with pytest.raises(SourceFormatError) as err:
        read_payload({"agent_id": "A1", "contents": "nope"}, "agora")
    assert err.value.path == "contents"
    with pytest.raises(SourceFormatError):
        read_payload({"noticeId": "n", "eventType": 103, "payload": []}, "agora")
    with pytest.raises(SourceFormatError):
        read_payload(42, "agora")
