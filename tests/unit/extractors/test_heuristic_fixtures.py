"""The heuristic extractor on the shared vendor fixtures: planted facts out, non-facts not.

Messages are built here directly from the fixture JSON (ids and timestamps from the fixtures), so
these tests do not depend on ``convmem_graph.sources``.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from convmem_graph.extractors.base import Extractor
from convmem_graph.extractors.heuristic import HeuristicExtractor
from convmem_graph.models import FragmentCandidate, Message
from tests.conftest import load_fixture

CST = timezone(timedelta(hours=8))
NOW = 1767272500000  # 2026-01-01 21:01:40 +08:00, after every fixture message
BOT_IM = "@RBT#xiaoyu"
BOT_TRTC = "ai_xiaoyu_bot"


def _ms(year: int, month: int, day: int, hour: int = 0, minute: int = 0, tz: timezone = CST) -> int:
    return int(datetime(year, month, day, hour, minute, tzinfo=tz).timestamp() * 1000)


def im_messages() -> list[Message]:
    """User text messages of both roam pages, oldest first; recalled ones dropped."""
    doc = load_fixture("tencent_im_roammsg_exchange.json")
    out: list[Message] = []
    for page in doc["pages"]:
        for item in page["response"]["MsgList"]:
            if item["MsgFlagBits"] & 8:
                continue
            texts = [e["MsgContent"]["Text"] for e in item["MsgBody"] if e["MsgType"] == "TIMTextElem"]
            if not texts:
                continue
            out.append(
                Message(
                    id=f"im_{item['MsgKey']}",
                    memory_id="mem_u10086",
                    role="assistant" if item["From_Account"] == BOT_IM else "user",
                    content="".join(texts),
                    channel="im",
                    source="message",
                    timestamp_ms=item["MsgTimeStamp"] * 1000,
                )
            )
    return sorted(out, key=lambda m: m.timestamp_ms)


def agora_messages() -> list[Message]:
    doc = load_fixture("agora_history_response.json")
    out = []
    for i, item in enumerate(doc["contents"]):
        meta: dict[str, Any] = item["metadata"]
        out.append(
            Message(
                id=f"ag_{doc['agent_id']}_{i}",
                memory_id="mem_u10086",
                role=item["role"],
                content=item["content"],
                channel="voice",
                source=meta["source"],
                timestamp_ms=item["timestamp"],
                turn_id=item["turn_id"],
                interrupted=bool(meta.get("interrupted")),
                original=meta.get("original"),
            )
        )
    return out


def trtc_messages() -> list[Message]:
    """903 callbacks joined per (RoundId, speaker) in EventMsTs order; the retry collapses."""
    doc = load_fixture("trtc_callbacks_one_call.json")
    rounds: dict[tuple[str, str], dict[int, str]] = {}
    for delivery in doc["deliveries"]:
        body = json.loads(delivery["raw_body"])
        if body["EventType"] != 903:
            continue
        payload = body["EventInfo"]["Payload"]
        key = (payload["RoundId"], payload["UserId"])
        rounds.setdefault(key, {})[body["EventInfo"]["EventMsTs"]] = payload["Text"]
    out = []
    for (round_id, user), parts in rounds.items():
        out.append(
            Message(
                id=f"trtc_{round_id}_{user}",
                memory_id="mem_u10086",
                role="assistant" if user == BOT_TRTC else "user",
                content="".join(parts[t] for t in sorted(parts)),
                channel="voice",
                source="asr" if user != BOT_TRTC else "llm",
                timestamp_ms=min(parts),
                round_id=round_id,
            )
        )
    return sorted(out, key=lambda m: m.timestamp_ms)


def webhook_messages() -> list[Message]:
    doc = load_fixture("agora_webhook_103_agent_history.json")
    out = []
    for i, item in enumerate(doc["payload"]["contents"]):
        out.append(
            Message(
                id=f"nc_{i}",
                role=item["role"],
                content=item["content"],
                channel="voice",
                source="asr" if item["role"] == "user" else "llm",
                timestamp_ms=item.get("speech_start_ms", 1767268828000),
            )
        )
    return out


def all_messages() -> list[Message]:
    return sorted(im_messages() + agora_messages() + trtc_messages(), key=lambda m: m.timestamp_ms)


@pytest.fixture(scope="module")
def candidates() -> list[FragmentCandidate]:
    return HeuristicExtractor().extract(all_messages(), [], [], now_ms=NOW).candidates


def _by_key(cands: list[FragmentCandidate], key: str) -> list[FragmentCandidate]:
    return [c for c in cands if c.key == key]


def test_implements_the_extractor_protocol() -> None:
    ex = HeuristicExtractor()
    assert isinstance(ex, Extractor)
    assert ex.name == "heuristic"


def test_result_has_no_variables_and_no_model_calls() -> None:
    result = HeuristicExtractor().extract(all_messages(), [], [], now_ms=NOW)
    assert result.variables == {}
    assert result.model_calls == 0


def test_identity_facts_from_the_im_introduction(candidates: list[FragmentCandidate]) -> None:
    intro = "im_80102_1000002_1766830041"
    name = _by_key(candidates, "profile:name")[0]
    assert (name.content, name.value, name.single_valued) == ("用户叫林晓。", "林晓", True)
    city = _by_key(candidates, "profile:city")[0]
    assert (city.content, city.value, city.single_valued) == ("用户在杭州工作。", "杭州", True)
    job = _by_key(candidates, "profile:occupation")[0]
    assert (job.content, job.value) == ("用户是产品经理。", "产品经理")
    assert name.source_message_ids == city.source_message_ids == job.source_message_ids == [intro]
    assert name.category == city.category == job.category == "profile"


def test_running_and_the_cat(candidates: list[FragmentCandidate]) -> None:
    run = _by_key(candidates, "pref:跑步")[0]
    assert (run.content, run.polarity, run.transient) == ("用户平时喜欢跑步。", 1, False)
    cat = _by_key(candidates, "pet:年糕")[0]
    assert (cat.content, cat.value, cat.category) == ("用户养了一只叫年糕的橘猫。", "橘猫", "relation")
    age = _by_key(candidates, "pet:年糕:age")[0]
    assert age.content == "用户的橘猫年糕两岁了（2025年12月）。"
    assert (age.value, age.single_valued) == ("2岁", True)


def test_birth_year_from_age_and_message_date(candidates: list[FragmentCandidate]) -> None:
    # "I'm 29 this year." was said on 2025-12-27.
    (birth,) = _by_key(candidates, "profile:birth_year")
    assert birth.content == "User was born in 1996 (age 29 in 2025)."
    assert (birth.value, birth.single_valued) == ("1996", True)
    assert birth.source_message_ids == ["im_80104_1000004_1766830102"]


def test_west_lake_run_is_a_weekend_plan(candidates: list[FragmentCandidate]) -> None:
    (run,) = [c for c in candidates if "西湖" in c.content]
    # Said Thursday 2026-01-01; "周末" is Jan 3-4, the plan lasts one day after it.
    assert run.content == "用户想2026年1月3日至4日（周末）在西湖边跑个10公里。"
    assert (run.category, run.transient, run.expires_at) == ("plan", True, _ms(2026, 1, 6))


def test_coriander_and_mango_from_the_mixed_language_message(candidates: list[FragmentCandidate]) -> None:
    coriander = _by_key(candidates, "food:香菜")[0]
    assert (coriander.content, coriander.polarity, coriander.category) == (
        "用户吃牛肉面不放香菜。",
        -1,
        "diet",
    )
    mango = _by_key(candidates, "allergy:mango")[0]
    assert (mango.content, mango.polarity, mango.category) == ("User is allergic to mango.", 1, "health")
    assert coriander.source_message_ids == mango.source_message_ids
    assert coriander.source_message_ids[0].endswith("_3")


def test_chengdu_trip_gets_its_dates_resolved(candidates: list[FragmentCandidate]) -> None:
    plans = _by_key(candidates, "plan:去成都出差")
    assert [p.content for p in plans] == [
        "用户计划2026年2月去成都出差。",  # "下个月" on 2026-01-01
        "用户计划2026年2月10日至14日去成都出差。",  # the typed follow-up "出差是 2 月 10 号到 14 号"
        "用户计划2026年1月5日至11日去成都出差。",  # the TRTC call: "下周" on Thursday 2026-01-01
    ]
    assert [p.expires_at for p in plans] == [_ms(2026, 3, 2), _ms(2026, 2, 16), _ms(2026, 1, 13)]
    assert all(p.transient and p.category == "plan" for p in plans)


def test_no_spicy_food_lately_is_transient(candidates: list[FragmentCandidate]) -> None:
    (spicy,) = _by_key(candidates, "food:辣")
    assert spicy.content == "用户最近胃不好，不吃辣。"
    assert (spicy.polarity, spicy.transient) == (-1, True)
    said = next(m for m in trtc_messages() if m.round_id == "r-0003" and m.role == "user").timestamp_ms
    assert spicy.expires_at == said + 7 * 86_400_000


def test_the_full_set_of_keys(candidates: list[FragmentCandidate]) -> None:
    assert sorted({c.key for c in candidates}) == [
        "allergy:mango",
        "food:辣",
        "food:香菜",
        "pet:年糕",
        "pet:年糕:age",
        "plan:去成都出差",
        "plan:在西湖边跑个10公里",
        "pref:跑步",
        "profile:birth_year",
        "profile:city",
        "profile:name",
        "profile:occupation",
    ]


def test_non_facts_yield_nothing(candidates: list[FragmentCandidate]) -> None:
    user_ids = {c for cand in candidates for c in cand.source_message_ids}
    by_id = {m.id: m for m in all_messages()}
    contents = [by_id[i].content for i in user_ids]
    assert all(by_id[i].role == "user" for i in user_ids)
    for chatter in (
        "今天杭州下雨了，好冷",
        "还行吧，就是今天又加班到九点，有点累。",
        "[app] 用户切换到了文字模式",
    ):
        assert chatter not in contents
    assert not [c for c in candidates if "下雨" in c.content or "加班" in c.content or "钟水饺" in c.content]


def test_assistant_greeting_silence_failure_and_command_messages_are_skipped() -> None:
    msgs = [
        m for m in agora_messages() if m.source in ("greeting", "llm", "llm_failure", "silence", "command")
    ]
    assert len(msgs) == 7
    assert HeuristicExtractor().extract(msgs, [], [], now_ms=NOW).candidates == []
    # A fact-shaped text is dropped for its source alone, and for an assistant role alone.
    fact = "我对芒果过敏，我叫林晓"
    as_user = [
        m.model_copy(update={"role": "user", "content": fact})
        for m in msgs
        if m.source in ("greeting", "llm_failure", "silence", "command")
    ]
    as_bot = [m.model_copy(update={"role": "assistant", "source": "asr", "content": fact}) for m in msgs]
    assert len(as_user) == 4
    assert HeuristicExtractor().extract(as_user + as_bot, [], [], now_ms=NOW).candidates == []


def test_webhook_injected_line_and_empty_item_yield_nothing() -> None:
    msgs = webhook_messages()
    injected = [m for m in msgs if m.content.startswith("[think API injected]")]
    assert len(injected) == 1
    assert HeuristicExtractor().extract(injected, [], [], now_ms=NOW).candidates == []
    out = HeuristicExtractor().extract(msgs, [], [], now_ms=NOW).candidates
    assert sorted(c.key for c in out) == ["allergy:mango", "food:香菜", "plan:去成都出差"]
    assert not [c for c in out if "会员" in c.content]


def test_partial_messages_are_skipped() -> None:
    m = Message(
        id="p1", role="user", content="我对芒果过敏", channel="im", source="message", timestamp_ms=NOW
    )
    partial = m.model_copy(update={"partial": True})
    assert HeuristicExtractor().extract([partial], [], [], now_ms=NOW).candidates == []
    assert len(HeuristicExtractor().extract([m], [], [], now_ms=NOW).candidates) == 1


def test_extraction_is_deterministic() -> None:
    a = HeuristicExtractor().extract(all_messages(), [], [], now_ms=NOW)
    b = HeuristicExtractor().extract(all_messages(), [], [], now_ms=NOW)
    assert a == b


def test_expired_transient_facts_are_not_proposed() -> None:
    much_later = _ms(2026, 6, 1)
    keys = {c.key for c in HeuristicExtractor().extract(all_messages(), [], [], now_ms=much_later).candidates}
    assert "food:辣" not in keys and "plan:去成都出差" not in keys
    assert {"allergy:mango", "profile:city", "pet:年糕"} <= keys
