from __future__ import annotations

import copy
import json
from collections import Counter
from typing import Any

import pytest

from convmem_graph.config import MemoryConfig
from convmem_graph.errors import SourceFormatError
from convmem_graph.sources import read_payload
from tests.conftest import load_fixture

EXCHANGE = "tencent_im_roammsg_exchange.json"


def _exchange() -> Any:
    return load_fixture(EXCHANGE)


def _msg(key: str, sender: str, ts: int, body: list[dict[str, Any]], flags: int = 0) -> dict[str, Any]:
    seq, rnd, _ = key.split("_")
    return {
        "From_Account": sender,
        "To_Account": "x",
        "MsgSeq": int(seq),
        "MsgRandom": int(rnd),
        "MsgTimeStamp": ts,
        "MsgFlagBits": flags,
        "MsgKey": key,
        "MsgBody": body,
    }


def _bot(data: dict[str, Any]) -> dict[str, Any]:
    return {"MsgType": "TIMCustomElem", "MsgContent": {"Data": json.dumps(data, ensure_ascii=False)}}


def _response(*msgs: dict[str, Any]) -> dict[str, Any]:
    return {"ActionStatus": "OK", "ErrorCode": 0, "ErrorInfo": "", "Complete": 1, "MsgList": list(msgs)}


def test_exchange_pages_merge_into_one_ordered_conversation() -> None:
    r = read_payload(_exchange())
    assert r.source == "tencent_im"
    assert r.user_id == "u_10086"
    assert [m.content for m in r.messages] == [
        "我叫林晓，在杭州做产品经理，平时喜欢跑步，还养了一只叫年糕的橘猫。",
        "很高兴认识你，林晓！年糕这个名字好可爱，它多大啦？",
        "I'm 29 this year. 年糕两岁了",
        "两岁的橘猫正是最能吃的时候 😄",
        "今天杭州下雨了，好冷",
        "晚上好呀，今天加班到九点，好累",
        "辛苦啦～加班到这么晚，记得吃点东西再休息哦。要不要我陪你聊聊今天发生了什么？",
        "I finally finished the Q4 report. 老板还夸我了 [表情]",
        "太棒了！Congrats on the Q4 report!被老板夸的感觉是不是特别好？今晚要不要",
        "明天早上 7 点提醒我去跑步，我周末想在西湖边跑个 10 公里",
        "好的，明早 7 点叫你！西湖边 10 公里很赞，记得带水。",
    ]
    assert [m.role for m in r.messages] == ["user", "assistant"] * 2 + ["user"] * 2 + [
        "assistant",
        "user",
        "assistant",
        "user",
        "assistant",
    ]
    assert all(m.channel == "im" for m in r.messages)
    assert [m.source for m in r.messages].count("chatbot") == 5
    ts = [m.timestamp_ms for m in r.messages]
    assert ts == sorted(ts) and ts[0] == 1766830041000


def test_partial_and_interrupted_streaming_reply() -> None:
    r = read_payload(_exchange())
    flagged = [(m.content[:4], m.partial, m.interrupted) for m in r.messages if m.partial or m.interrupted]
    # isFinished 0 -> partial; the user's src 22 interrupt names this message's MsgKey.
    assert flagged == [("太棒了！", True, True)]
    assert r.messages[8].original is None


def test_skipped_by_reason() -> None:
    r = read_payload(_exchange())
    assert Counter(s.reason for s in r.skipped) == {
        "chatbot_control": 1,
        "recalled": 1,
        "chatbot_card": 1,
        "chatbot_passthrough": 1,
    }
    recalled = next(s for s in r.skipped if s.reason == "recalled")
    assert recalled.path == "pages[0].response.MsgList[5]"


def test_ids_come_from_msgkey_and_are_stable() -> None:
    a, b = read_payload(_exchange()), read_payload(_exchange())
    assert [m.id for m in a.messages] == [m.id for m in b.messages]
    assert len({m.id for m in a.messages}) == 11
    assert a.messages[0].metadata["msg_key"] == "80102_1000002_1766830041"


def test_overlapping_pages_are_deduplicated_by_msgkey() -> None:
    doc = _exchange()
    responses = [p["response"] for p in doc["pages"]]
    responses.append(copy.deepcopy(responses[0]))  # a re-pull of the newest page
    r = read_payload(responses)
    assert len(r.messages) == 11
    assert Counter(s.reason for s in r.skipped)["duplicate"] == 8 - 2  # 8 messages, 2 of them skipped anyway


def test_later_streaming_state_wins() -> None:
    key = "5_6_1767265262"
    partial = _msg(
        key, "@RBT#b", 1767265262, [_bot({"chatbotPlugin": 2, "src": 2, "chunks": ["a"], "isFinished": 0})]
    )
    final = _msg(
        key,
        "@RBT#b",
        1767265262,
        [_bot({"chatbotPlugin": 2, "src": 2, "chunks": ["a", "b"], "isFinished": 1})],
    )
    r = read_payload([_response(partial), _response(final)], "tencent_im")
    assert [(m.content, m.partial) for m in r.messages] == [("ab", False)]
    assert [s.reason for s in r.skipped] == ["duplicate"]


def test_generation_rules_for_missing_is_finished() -> None:
    gen1 = _msg(
        "1_1_1767265000", "@RBT#b", 1767265000, [_bot({"chatbotPlugin": 1, "src": 2, "chunks": ["x"]})]
    )
    gen2 = _msg(
        "2_2_1767265001", "@RBT#b", 1767265001, [_bot({"chatbotPlugin": 2, "src": 2, "chunks": ["y"]})]
    )
    r = read_payload(_response(gen1, gen2))
    assert [(m.content, m.partial) for m in r.messages] == [("x", True), ("y", False)]


def test_error_and_control_srcs() -> None:
    err = _msg(
        "1_1_1767265000", "@RBT#b", 1767265000, [_bot({"chatbotPlugin": 2, "src": 23, "errorInfo": "quota"})]
    )
    trig = _msg("2_2_1767265001", "u1", 1767265001, [_bot({"chatbotPlugin": 1, "src": 7})])
    r = read_payload(_response(err, trig))
    assert r.messages == []
    assert [(s.reason, s.detail) for s in r.skipped] == [
        ("chatbot_error", "chatbotPlugin 2 src 23: error while generating: quota (MsgKey 1_1_1767265000)"),
        ("chatbot_control", "chatbotPlugin 1 src 7: welcome trigger (MsgKey 2_2_1767265001)"),
    ]


def test_non_text_elements_placeholder_or_skip() -> None:
    image_only = _msg("1_1_1767265000", "u1", 1767265000, [{"MsgType": "TIMImageElem", "MsgContent": {}}])
    mixed = _msg(
        "2_2_1767265001",
        "u1",
        1767265001,
        [
            {"MsgType": "TIMTextElem", "MsgContent": {"Text": "看"}},
            {"MsgType": "TIMSoundElem", "MsgContent": {}},
            {"MsgType": "TIMTextElem", "MsgContent": {"Text": "这个"}},
        ],
    )
    custom = _msg(
        "3_3_1767265002", "u1", 1767265002, [{"MsgType": "TIMCustomElem", "MsgContent": {"Data": "order#1"}}]
    )
    doc = _response(image_only, mixed, custom)
    r = read_payload(doc)
    assert [m.content for m in r.messages] == ["[图片]", "看[语音]这个", "[自定义消息]"]
    skip = read_payload(doc, config=MemoryConfig(non_text_elements="skip"))
    assert [m.content for m in skip.messages] == ["看这个"]
    assert Counter(s.reason for s in skip.skipped) == {"non_text": 2}


def test_bot_ids_and_roles() -> None:
    plain_bot = _msg(
        "1_1_1767265000", "helper", 1767265000, [{"MsgType": "TIMTextElem", "MsgContent": {"Text": "hi"}}]
    )
    assert read_payload(_response(plain_bot)).messages[0].role == "user"
    assert read_payload(_response(plain_bot), bot_ids=["helper"]).messages[0].role == "assistant"
    assert (
        read_payload(_response(plain_bot), config=MemoryConfig(bot_ids=["helper"])).messages[0].role
        == "assistant"
    )


def test_error_envelope_raises_naming_code_and_info() -> None:
    with pytest.raises(SourceFormatError) as err:
        read_payload(_exchange()["error_example"])
    assert err.value.source == "tencent_im"
    assert "70001" in str(err.value) and "UserSig expired" in str(err.value)


def test_bad_message_lenient_and_strict() -> None:
    doc = _exchange()
    doc["pages"][0]["response"]["MsgList"][1]["MsgBody"][0]["MsgContent"]["Data"] = json.dumps(
        {"chatbotPlugin": 2, "src": 2, "chunks": ["ok", 3]}
    )
    del doc["pages"][1]["response"]["MsgList"][3]["MsgTimeStamp"]
    r = read_payload(doc)
    assert len(r.messages) == 9
    invalid = [s.path for s in r.skipped if s.reason == "invalid"]
    assert invalid == [
        "pages[0].response.MsgList[1].MsgBody[0].MsgContent.Data.chunks[1]",
        "pages[1].response.MsgList[3].MsgTimeStamp",
    ]
    with pytest.raises(SourceFormatError) as err:
        read_payload(doc, lenient=False)
    assert err.value.path == "pages[0].response.MsgList[1].MsgBody[0].MsgContent.Data.chunks[1]"


def test_msglist_not_a_list_raises() -> None:
    with pytest.raises(SourceFormatError) as err:
        read_payload({"ActionStatus": "OK", "ErrorCode": 0, "MsgList": {"a": 1}})
    assert err.value.path == "MsgList"
