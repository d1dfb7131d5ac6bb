"""LLMExtractor / LLMSummarizer through a real ChatOpenAI (openai 3.x on httpx2), replayed from cassettes.

The cassettes under ``cassettes/test_llm_extractor/`` were recorded against the scripted local server
in ``tests/fakes/openai_server.py``. By default (``--record-mode=none``) every request is answered
from them: the scripted server is still started, and each test checks it received nothing, which
proves vcrpy intercepted httpx2. A request missing from a cassette fails the test instead of reaching
the network. Re-record after changing prompts or the output schema (requests match on method, path
and body, not on the port, which changes per recording)::

    python -m pytest tests/integration/test_llm_extractor.py --record-mode=rewrite

A client-side timeout has no response to record, so the timeout tests talk to the live local server.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TypedDict

import openai
import pytest
from langgraph.graph import END, START, StateGraph
from langgraph.types import RetryPolicy
from vcr.cassette import Cassette
from vcr.request import Request as VcrRequest

from convmem_graph.errors import ExtractionError
from convmem_graph.extractors.chat_models import make_chat_model
from convmem_graph.extractors.llm import LLMExtractor, LLMSummarizer, is_retryable
from convmem_graph.models import ExtractionResult, Fragment, Message, Summary, VariableSpec
from convmem_graph.tokens import count_tokens
from tests.fakes.openai_server import FakeOpenAIServer, Reply

# The live-server cases need loopback sockets even if a conftest disables the network.
pytestmark = pytest.mark.enable_socket

CASSETTES = Path(__file__).parent / "cassettes" / "test_llm_extractor"
NOW = 1767268800000  # 2026-01-01 12:00 UTC
T_IM = 1766804520000  # 2025-12-27 03:02 UTC (11:02 in Hangzhou)
T_CALL = 1767272400500  # the TRTC call of the fixtures
MINUTE = 60_000


def _msg(mid: str, role: str, content: str, ts: int, channel: str = "im") -> Message:
    return Message(
        id=mid,
        memory_id="mem_u10086",
        role=role,
        content=content,
        channel=channel,
        source="message" if channel == "im" else ("asr" if role == "user" else "llm"),
        timestamp_ms=ts,
    )


# The story of the vendor fixtures (林晓 and the companion 小雨), in Chinese and English.
BATCH = [
    _msg("im_7f3a1c09e2b4d5a6c801", "user", "小雨，跟你说一下，我对芒果过敏，吃了会起疹子。", T_IM),
    _msg("im_8e21b0c4d9f7a3e5b612", "assistant", "记住啦，以后推荐水果都会避开芒果。", T_IM + MINUTE),
    _msg("im_91c0d8e7f6a5b4c3d2e1", "user", "今天杭州又下雨了，好冷。", T_IM + 2 * MINUTE),
    _msg("trtc_a1b2c3d4e5f60718293a", "user", "我今年29岁，在杭州做产品经理。", T_CALL, "voice"),
    _msg(
        "trtc_b2c3d4e5f60718293a4b", "assistant", "Nice! Product work keeps you busy.", T_CALL + 5000, "voice"
    ),
    _msg(
        "trtc_c3d4e5f60718293a4b5c",
        "user",
        "My stomach has been bad lately, so no spicy food for now.",
        T_CALL + 9000,
        "voice",
    ),
    _msg(
        "trtc_d4e5f60718293a4b5c6d",
        "user",
        "I fly to Chengdu for work from Feb 10 to Feb 14.",
        T_CALL + 15000,
        "voice",
    ),
]
EXISTING = [
    Fragment(
        id="frag_3c1d9e0a7b",
        memory_id="mem_u10086",
        content="用户吃面不要香菜",
        category="diet",
        key="diet:coriander",
        source_message_ids=["im_0a9b8c7d6e5f4a3b2c1d"],
    )
]
SPECS = [
    VariableSpec(name="birth_year", description="出生年份", type="integer"),
    VariableSpec(name="city", description="所在城市"),
    VariableSpec(name="occupation", description="职业 / occupation"),
]


def _fact(
    content: str, category: str, key: str, value: str | None, sources: list[str], **extra: Any
) -> dict[str, Any]:
    fact: dict[str, Any] = {
        "content": content,
        "category": category,
        "key": key,
        "value": value,
        "polarity": 1,
        "single_valued": False,
        "transient": False,
        "expires_on": None,
        "source_ids": sources,
    }
    fact.update(extra)
    return fact


GOOD = {
    "facts": [
        _fact("用户对芒果过敏，吃了会起疹子", "allergy", "allergy:mango", "芒果", ["m1"]),
        _fact("用户1996年出生", "profile", "profile:birth_year", "1996", ["m4"], single_valued=True),
        _fact("用户住在杭州", "profile", "profile:city", "杭州", ["m4"], single_valued=True),
        _fact("用户是产品经理", "profile", "profile:occupation", "产品经理", ["m4"], single_valued=True),
        _fact(
            "User has stomach trouble lately and avoids spicy food",
            "health",
            "diet:spicy_food",
            "spicy food",
            ["m6"],
            polarity=-1,
            transient=True,
            expires_on="2026-01-08",
        ),
        _fact(
            "User has a business trip to Chengdu from 2026-02-10 to 2026-02-14",
            "plan",
            "plan:trip_chengdu",
            "Chengdu",
            ["m7"],
        ),
    ],
    "variables": [
        {"name": "birth_year", "value": 1996},
        {"name": "city", "value": "杭州"},
        {"name": "occupation", "value": "产品经理"},
    ],
}
MALFORMED = '{"facts": [{"content": "用户对芒果过敏", "category": "allergy", "key": '


def _recording(request: pytest.FixtureRequest) -> bool:
    return (request.config.getoption("--record-mode") or "none") != "none"


def _scrub_request(request: VcrRequest) -> VcrRequest:
    # The fake server binds a new port per recording: store one fixed address. Headers are not
    # matched on; keeping only the content type leaves no credential, host port or SDK version behind.
    request.uri = re.sub(r"^http://127\.0\.0\.1:\d+/", "http://127.0.0.1:8000/", request.uri)
    request.headers = {k: v for k, v in request.headers.items() if k.lower() == "content-type"}
    return request


def _scrub_response(response: dict[str, Any]) -> dict[str, Any]:
    for name in ("Date", "date", "Server", "server"):
        response["headers"].pop(name, None)
    return response


@pytest.fixture
def vcr_config(request: pytest.FixtureRequest) -> dict[str, Any]:
    return {
        # Replay only unless --record-mode says otherwise: a missing cassette fails.
        "record_mode": request.config.getoption("--record-mode") or "none",
        "match_on": ["method", "path", "body"],
        "filter_headers": ["authorization", "api-key", "x-api-key", "openai-organization", "openai-project"],
        "before_record_request": _scrub_request,
        "before_record_response": _scrub_response,
    }


@pytest.fixture
def scripted_openai(request: pytest.FixtureRequest) -> Iterator[FakeOpenAIServer]:
    """The scripted server; in replay mode it must see no request at all."""
    recording = _recording(request)
    with FakeOpenAIServer() as server:
        yield server
        if recording:
            assert server.pending() == 0, "scripted replies left unused"
        else:
            assert server.requests == [], "a request escaped the cassette"


@pytest.fixture
def live_openai() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer() as server:
        yield server


def _chat(server: FakeOpenAIServer, timeout: float = 10) -> Any:
    return make_chat_model("fake-model", base_url=server.base_url, api_key="sk-test", timeout=timeout)


def _bodies(cassette: Cassette) -> list[dict[str, Any]]:
    return [json.loads(r.body) for r in cassette.requests]


def _assert_story_result(result: ExtractionResult) -> None:
    by_key = {c.key: c for c in result.candidates}
    assert list(by_key) == [
        "allergy:mango",
        "profile:birth_year",
        "profile:city",
        "profile:occupation",
        "diet:spicy_food",
        "plan:trip_chengdu",
    ]
    assert by_key["allergy:mango"].source_message_ids == ["im_7f3a1c09e2b4d5a6c801"]
    assert by_key["profile:city"].source_message_ids == ["trtc_a1b2c3d4e5f60718293a"]
    spicy = by_key["diet:spicy_food"]
    assert spicy.transient and spicy.polarity == -1 and spicy.expires_at == 1767916799999  # 2026-01-08 end
    assert spicy.source_message_ids == ["trtc_c3d4e5f60718293a4b5c"]
    assert {k: v.value for k, v in result.variables.items()} == {
        "birth_year": 1996,
        "city": "杭州",
        "occupation": "产品经理",
    }


def _assert_prompt(body: dict[str, Any]) -> None:
    human = body["messages"][1]["content"]
    assert "[m1] 2025-12-27 03:02 UTC user: 小雨，跟你说一下，我对芒果过敏" in human
    assert "[m6] 2026-01-01 13:00 UTC user: My stomach has been bad lately" in human
    assert "- [f1] key=diet:coriander | 用户吃面不要香菜" in human
    assert "- birth_year (integer): 出生年份" in human


@pytest.mark.vcr
def test_json_schema_method(scripted_openai: FakeOpenAIServer, vcr: Cassette) -> None:
    scripted_openai.script(Reply(content=GOOD))
    result = LLMExtractor(_chat(scripted_openai), method="json_schema").extract(
        BATCH, EXISTING, SPECS, now_ms=NOW
    )
    assert result.model_calls == 1
    _assert_story_result(result)
    (body,) = _bodies(vcr)
    assert body["response_format"]["type"] == "json_schema"
    assert body["response_format"]["json_schema"]["strict"] is True
    assert body["response_format"]["json_schema"]["name"] == "ExtractionOutput"
    assert "tools" not in body
    _assert_prompt(body)


@pytest.mark.vcr
def test_function_calling_method(scripted_openai: FakeOpenAIServer, vcr: Cassette) -> None:
    scripted_openai.script(Reply(content=GOOD))
    extractor = LLMExtractor(_chat(scripted_openai), method="function_calling")
    result = extractor.extract(BATCH, EXISTING, SPECS, now_ms=NOW)
    assert result.model_calls == 1
    _assert_story_result(result)
    (body,) = _bodies(vcr)
    assert body["tool_choice"] == {"type": "function", "function": {"name": "ExtractionOutput"}}
    assert body["tools"][0]["function"]["name"] == "ExtractionOutput"
    assert "response_format" not in body
    _assert_prompt(body)


@pytest.mark.vcr
def test_async_json_schema_method(scripted_openai: FakeOpenAIServer, vcr: Cassette) -> None:
    scripted_openai.script(Reply(content=GOOD))
    extractor = LLMExtractor(_chat(scripted_openai))
    result = asyncio.run(extractor.aextract(BATCH, EXISTING, SPECS, now_ms=NOW))
    _assert_story_result(result)
    assert len(vcr.requests) == 1


@pytest.mark.vcr
@pytest.mark.parametrize("method", ["json_schema", "function_calling"])
def test_malformed_json_then_valid_is_retried_inside_the_extractor(
    method: str, scripted_openai: FakeOpenAIServer, vcr: Cassette
) -> None:
    scripted_openai.script(Reply(content=MALFORMED), Reply(content=GOOD))
    extractor = LLMExtractor(_chat(scripted_openai), method=method)  # type: ignore[arg-type]
    result = extractor.extract(BATCH, EXISTING, SPECS, now_ms=NOW)
    assert result.model_calls == 2
    _assert_story_result(result)
    first, second = _bodies(vcr)
    assert second["messages"][:2] == first["messages"]
    assert second["messages"][2]["content"].startswith("Your previous answer was rejected")
    assert "m1, m3, m4, m6, m7" in second["messages"][2]["content"]


@pytest.mark.vcr
def test_always_malformed_raises_extraction_error_and_the_batch_can_be_retried(
    scripted_openai: FakeOpenAIServer, vcr: Cassette
) -> None:
    scripted_openai.script(*[Reply(content=MALFORMED)] * 3, Reply(content=GOOD))
    extractor = LLMExtractor(_chat(scripted_openai), max_invalid_retries=2)
    with pytest.raises(ExtractionError, match="no valid answer after 3 model calls") as info:
        extractor.extract(BATCH, EXISTING, SPECS, now_ms=NOW)
    assert not is_retryable(info.value)
    # Nothing was consumed: the caller keeps the batch, and the next run extracts it in full.
    result = extractor.extract(BATCH, EXISTING, SPECS, now_ms=NOW)
    _assert_story_result(result)
    assert len(vcr.requests) == 4


class _State(TypedDict):
    keys: list[str]


def _one_node_graph(extractor: LLMExtractor, attempts: list[int], max_attempts: int = 3) -> Any:
    def extract_node(state: _State) -> dict[str, Any]:
        attempts.append(1)
        result = extractor.extract(BATCH, EXISTING, SPECS, now_ms=NOW)
        return {"keys": [c.key for c in result.candidates]}

    graph = StateGraph(_State)
    policy = RetryPolicy(
        max_attempts=max_attempts,
        initial_interval=0.01,
        backoff_factor=1.0,
        jitter=False,
        retry_on=is_retryable,
    )
    graph.add_node("extract", extract_node, retry_policy=policy)
    graph.add_edge(START, "extract")
    graph.add_edge("extract", END)
    return graph.compile()


@pytest.mark.vcr
def test_rate_limit_then_success_is_retried_by_the_node_retry_policy(
    scripted_openai: FakeOpenAIServer, vcr: Cassette
) -> None:
    scripted_openai.script(Reply(status=429, headers={"retry-after": "0"}), Reply(content=GOOD))
    attempts: list[int] = []
    out = _one_node_graph(LLMExtractor(_chat(scripted_openai)), attempts).invoke({"keys": []})
    assert len(attempts) == 2
    assert out["keys"][0] == "allergy:mango" and len(out["keys"]) == 6
    statuses = [r["status"]["code"] for r in vcr.responses]
    assert statuses == [429, 200]


@pytest.mark.vcr
def test_rate_limit_propagates_as_a_retryable_error(scripted_openai: FakeOpenAIServer, vcr: Cassette) -> None:
    scripted_openai.script(Reply(status=429))
    with pytest.raises(openai.RateLimitError) as info:
        LLMExtractor(_chat(scripted_openai)).extract(BATCH, EXISTING, SPECS, now_ms=NOW)
    assert is_retryable(info.value)


@pytest.mark.vcr
def test_summary_over_budget_is_shortened_then_fits(scripted_openai: FakeOpenAIServer, vcr: Cassette) -> None:
    verbose = "用户林晓1996年出生，住在杭州，是一名产品经理，工作很忙但坚持每天早上沿着西湖跑步锻炼身体。" * 8
    short = (
        "用户林晓，1996年出生，住在杭州，产品经理。"
        "对芒果过敏；最近胃不好，暂时不吃辣。2月10日至14日去成都出差。"
    )
    scripted_openai.script(Reply(content=verbose), Reply(content=short))
    previous = Summary(text="用户吃面不要香菜。", tokens=9, covers_until_ms=T_IM - MINUTE)
    text = LLMSummarizer(_chat(scripted_openai), shorten=True).summarize(
        previous, BATCH, {}, EXISTING, budget_tokens=80, counter=count_tokens, now_ms=NOW
    )
    assert text == short and count_tokens(text) <= 80
    first, second = _bodies(vcr)
    assert "Previous summary:\n用户吃面不要香菜。" in first["messages"][1]["content"]
    assert "the limit is 80" in second["messages"][1]["content"]


@pytest.mark.vcr
def test_summary_still_too_long_is_trimmed_at_a_sentence(
    scripted_openai: FakeOpenAIServer, vcr: Cassette
) -> None:
    verbose = "User Lin Xiao lives in Hangzhou and works as a product manager at a busy company. " * 10
    scripted_openai.script(Reply(content=verbose), Reply(content=verbose))
    text = LLMSummarizer(_chat(scripted_openai), shorten=True).summarize(
        None, BATCH, {}, [], budget_tokens=50, counter=count_tokens, now_ms=NOW
    )
    assert 0 < count_tokens(text) <= 50 and text.endswith("company.")
    assert len(vcr.requests) == 2


# ------------------------------------------------- live local server (a timeout cannot be recorded)


def test_timeout_propagates_as_a_retryable_error(live_openai: FakeOpenAIServer) -> None:
    live_openai.script(Reply(content=GOOD, delay_s=1.5))
    extractor = LLMExtractor(_chat(live_openai, timeout=0.3))
    with pytest.raises(openai.APITimeoutError) as info:
        extractor.extract(BATCH, EXISTING, SPECS, now_ms=NOW)
    assert is_retryable(info.value)
    assert len(live_openai.requests) == 1  # no hidden client-side retry (max_retries=0)


def test_timeout_then_success_is_retried_by_the_node_retry_policy(live_openai: FakeOpenAIServer) -> None:
    live_openai.script(Reply(content=GOOD, delay_s=1.5), Reply(content=GOOD))
    attempts: list[int] = []
    out = _one_node_graph(LLMExtractor(_chat(live_openai, timeout=0.3)), attempts).invoke({"keys": []})
    assert len(attempts) == 2 and len(out["keys"]) == 6


def test_cassettes_hold_no_credentials() -> None:
    files = sorted(CASSETTES.glob("*.yaml"))
    assert len(files) == 10
    for path in files:
        text = path.read_text(encoding="utf-8")
        assert "sk-test" not in text and "Bearer" not in text, path.name
        assert re.search(r"127\.0\.0\.1:(?!8000/)\d+", text) is None, path.name
        assert "x-stainless" not in text and "authorization" not in text.lower(), path.name
