"""LLMExtractor and LLMSummarizer on fake chat models: prompts, validation, retries, budgets."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import httpx
import openai
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from langchain_core.exceptions import ModelInvalidRequestError, ModelRateLimitError
from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatResult

from convmem_graph.errors import ExtractionError
from convmem_graph.extractors.base import Extractor, Summarizer
from convmem_graph.extractors.chat_models import make_chat_model
from convmem_graph.extractors.heuristic import HeuristicExtractor
from convmem_graph.extractors.llm import LLMExtractor, LLMSummarizer, is_retryable, trim_to_budget
from convmem_graph.extractors.prompts import EXTRACTION_SYSTEM_PROMPT
from convmem_graph.models import Fragment, Message, Summary, VariableSpec, VariableValue
from convmem_graph.text.keys import KEY_PREFIXES
from convmem_graph.tokens import count_tokens

NOW = 1767268800000  # 2026-01-01 12:00 UTC
T0 = 1766804700000  # 2025-12-27 03:05 UTC
DAY = 86_400_000


class RecordingFake(FakeMessagesListChatModel):
    """Scripted fake that records every prompt and supports the default tool-call structured output."""

    calls: list[list[BaseMessage]] = []
    error: BaseException | None = None

    def _generate(self, messages: list[BaseMessage], *args: Any, **kwargs: Any) -> ChatResult:
        self.calls.append(list(messages))
        if self.error is not None:
            raise self.error
        return super()._generate(messages, *args, **kwargs)

    def bind_tools(self, tools: Any, **kwargs: Any) -> RecordingFake:
        return self


def fake(*responses: BaseMessage, error: BaseException | None = None) -> RecordingFake:
    return RecordingFake(responses=list(responses) or [AIMessage("")], calls=[], error=error)


def answer(facts: list[dict[str, Any]], variables: list[dict[str, Any]] | None = None) -> AIMessage:
    args = {"facts": facts, "variables": variables or []}
    return AIMessage("", tool_calls=[{"name": "ExtractionOutput", "args": args, "id": "call_1"}])


def fact(content: str, key: str, sources: list[str], **extra: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "content": content,
        "category": key.split(":")[0] if key.split(":")[0] != "diet" else "diet",
        "key": key,
        "value": None,
        "polarity": 1,
        "single_valued": False,
        "transient": False,
        "expires_on": None,
        "source_ids": sources,
    }
    base.update(extra)
    return base


def msg(i: int, role: str, content: str, minutes: int = 0) -> Message:
    return Message(
        id=f"im_u10086_{i:04d}_long_stable_id",
        memory_id="mem_u10086",
        role=role,
        content=content,
        channel="im",
        source="message",
        timestamp_ms=T0 + minutes * 60_000,
    )


BATCH = [
    msg(1, "user", "小雨，跟你说一下，我对芒果过敏，吃了会起疹子。", 0),
    msg(2, "assistant", "记住啦，以后推荐水果都会避开芒果。", 1),
    msg(3, "user", "今天杭州又下雨了，好冷。", 2),
    msg(4, "user", "I'm a product manager, and my stomach has been bad lately, so no spicy food.", 3),
]
EXISTING = [
    Fragment(
        id="frag_city_0001",
        memory_id="mem_u10086",
        content="用户住在杭州",
        category="profile",
        key="profile:city",
    )
]
SPECS = [
    VariableSpec(name="occupation", description="the user's job"),
    VariableSpec(name="birth_year", description="出生年份", type="integer"),
    VariableSpec(name="diet", description="diet", type="list"),
    VariableSpec(name="language", description="preferred language", allowed_values=["zh", "en"]),
    VariableSpec(name="vip_level", description="set by the operator", infer=False),
]
GOOD = answer(
    [
        fact("用户对芒果过敏，吃了会起疹子", "allergy:mango", ["m1"], value="芒果"),
        fact(
            "User works as a product manager",
            "Profile:Occupation",
            ["m4"],
            category="profile",
            value="product manager",
            single_valued=True,
        ),
        fact(
            "User avoids spicy food lately because of stomach trouble",
            "diet:spicy food",
            ["m4", "m4"],
            category="health",
            polarity=-1,
            transient=True,
        ),
    ],
    [
        {"name": "occupation", "value": "product manager"},
        {"name": "birth_year", "value": "1996"},
        {"name": "diet", "value": "no spicy food"},
        {"name": "language", "value": "EN"},
        {"name": "vip_level", "value": "gold"},
        {"name": "unknown_field", "value": "x"},
    ],
)


def test_implements_the_protocols() -> None:
    assert isinstance(LLMExtractor(fake()), Extractor)
    assert isinstance(LLMSummarizer(fake()), Summarizer)


def test_prompt_holds_messages_existing_fragments_and_inferable_variables() -> None:
    model = fake(GOOD)
    LLMExtractor(model).extract(BATCH, EXISTING, SPECS, now_ms=NOW)
    assert len(model.calls) == 1
    system, human = model.calls[0]
    assert "third person" in system.text and "用户" in system.text and "Non-personal chatter" in system.text
    text = human.text
    assert "Current time: 2026-01-01 12:00 UTC" in text
    assert "[m1] 2025-12-27 03:05 UTC user: 小雨，跟你说一下，我对芒果过敏，吃了会起疹子。" in text
    assert "[m2] 2025-12-27 03:06 UTC assistant: 记住啦" in text
    assert "[m4] 2025-12-27 03:08 UTC user: I'm a product manager" in text
    assert "- [f1] key=profile:city | 用户住在杭州" in text
    assert "- birth_year (integer): 出生年份" in text
    assert "- language (string): preferred language [allowed: zh, en]" in text
    assert "vip_level" not in text  # infer=False: never offered to the model
    assert "im_u10086_0001_long_stable_id" not in text  # long ids stay out of the prompt


def test_answer_is_mapped_to_candidates_and_variable_guesses() -> None:
    result = LLMExtractor(fake(GOOD)).extract(BATCH, EXISTING, SPECS, now_ms=NOW)
    assert result.model_calls == 1
    mango, job, spicy = result.candidates
    assert mango.content == "用户对芒果过敏，吃了会起疹子"
    assert mango.key == "allergy:mango" and mango.value == "芒果"
    assert mango.source_message_ids == ["im_u10086_0001_long_stable_id"]
    assert mango.transient is False and mango.expires_at is None
    assert job.key == "profile:occupation" and job.single_valued is True
    assert spicy.key == "diet:spicy_food" and spicy.polarity == -1
    assert spicy.source_message_ids == ["im_u10086_0004_long_stable_id"]
    # No end date given: one week after the message that said it.
    assert spicy.transient is True and spicy.expires_at == T0 + 3 * 60_000 + 7 * DAY
    assert {k: v.value for k, v in result.variables.items()} == {
        "occupation": "product manager",
        "birth_year": 1996,
        "diet": ["no spicy food"],
        "language": "en",
    }
    assert all(v.fragment_ids == [] for v in result.variables.values())


def test_explicit_expiry_day_ends_at_end_of_that_day_utc() -> None:
    reply = answer(
        [fact("用户这周在试着吃素", "diet:vegetarian", ["m1"], transient=True, expires_on="2026-01-08")]
    )
    result = LLMExtractor(fake(reply)).extract(BATCH, [], [], now_ms=NOW)
    assert result.candidates[0].expires_at == 1767916799999  # 2026-01-08T23:59:59.999Z


def test_invalid_then_valid_output_is_retried_with_the_error_shown() -> None:
    model = fake(AIMessage("sorry, I cannot produce JSON"), GOOD)
    result = LLMExtractor(model).extract(BATCH, EXISTING, SPECS, now_ms=NOW)
    assert result.model_calls == 2
    assert len(result.candidates) == 3
    retry_note = model.calls[1][-1].text
    assert "Your previous answer was rejected" in retry_note
    assert "m1, m3, m4" in retry_note  # the user message ids it may cite
    assert model.calls[1][:2] == model.calls[0]  # same request, plus the note


def test_schema_error_is_retried() -> None:
    bad = answer([{"content": "用户对芒果过敏", "key": "allergy:mango"}])  # required fields missing
    model = fake(bad, GOOD)
    result = LLMExtractor(model).extract(BATCH, [], [], now_ms=NOW)
    assert result.model_calls == 2
    assert "facts.0.polarity: Field required" in model.calls[1][-1].text


def test_always_invalid_raises_extraction_error_after_the_allowed_retries() -> None:
    model = fake(AIMessage("not json"))
    with pytest.raises(ExtractionError, match="no valid answer after 3 model calls"):
        LLMExtractor(model, max_invalid_retries=2).extract(BATCH, [], [], now_ms=NOW)
    assert len(model.calls) == 3


@pytest.mark.parametrize(
    ("sources", "problem"),
    [
        (["m2"], "'m2' is not a user message"),  # the assistant said it
        (["m9"], "'m9' is not a user message"),  # not in the batch
        ([], "source_ids: empty"),
    ],
)
def test_source_ids_must_be_user_messages_of_the_batch(sources: list[str], problem: str) -> None:
    model = fake(answer([fact("用户对芒果过敏", "allergy:mango", sources)]))
    with pytest.raises(ExtractionError, match=problem):
        LLMExtractor(model, max_invalid_retries=1).extract(BATCH, [], [], now_ms=NOW)
    assert len(model.calls) == 2


def test_real_message_ids_are_accepted_as_sources() -> None:
    reply = answer([fact("用户对芒果过敏", "allergy:mango", ["im_u10086_0001_long_stable_id"])])
    result = LLMExtractor(fake(reply)).extract(BATCH, [], [], now_ms=NOW)
    assert result.candidates[0].source_message_ids == ["im_u10086_0001_long_stable_id"]


def test_bad_expiry_day_and_overlong_content_are_invalid() -> None:
    reply = answer(
        [
            fact("用户最近不吃辣", "diet:spicy", ["m4"], transient=True, expires_on="next week"),
            fact("用户" + "很" * 250 + "喜欢跑步", "hobby:running", ["m4"]),
        ]
    )
    with pytest.raises(ExtractionError) as info:
        LLMExtractor(fake(reply), max_invalid_retries=0).extract(BATCH, [], [], now_ms=NOW)
    assert "facts[0].expires_on: 'next week' is not a YYYY-MM-DD date" in str(info.value)
    assert "facts[1]" in str(info.value) and "at most 200 characters" in str(info.value)
    assert "很很很" not in str(info.value)  # the user's text is not echoed into errors/logs


def test_parser_errors_are_described_without_quoting_the_answer() -> None:
    from langchain_core.exceptions import OutputParserException
    from pydantic import ValidationError

    from convmem_graph.extractors.llm import ExtractionOutput

    try:
        ExtractionOutput.model_validate({"facts": [{"content": "用户对芒果过敏"}], "variables": []})
    except ValidationError as cause:
        error = OutputParserException(
            'Failed to parse ExtractionOutput from completion {"content": "用户对芒果过敏"}'
        )
        error.__cause__ = cause
    model = fake(GOOD, error=error)
    with pytest.raises(ExtractionError) as info:
        LLMExtractor(model, max_invalid_retries=1).extract(BATCH, [], [], now_ms=NOW)
    assert len(model.calls) == 2
    assert "facts.0.key: Field required" in str(info.value)
    assert "芒果" not in str(info.value)


def test_keys_are_stored_in_the_shared_spelling() -> None:
    reply = answer(
        [
            fact("用户不吃香菜", "Food：香菜", ["m1"], category="diet"),  # full-width colon
            fact("User loves The Beatles", "pref:The  Beatles", ["m4"], category="preference"),
            fact("User runs most mornings", "Go Running", ["m4"], category="habit"),
            fact("用户的妈妈喜欢跳舞", "family:母亲:跳舞", ["m1"], category="relation"),
        ]
    )
    result = LLMExtractor(fake(reply)).extract(BATCH, [], [], now_ms=NOW)
    assert [c.key for c in result.candidates] == [
        "food:香菜",
        "pref:beatles",
        "habit:go_running",
        "family:母亲:跳舞",
    ]


def test_empty_key_subject_is_invalid() -> None:
    with pytest.raises(ExtractionError, match=r"facts\[0\]\.key: empty"):
        LLMExtractor(
            fake(answer([fact("用户对芒果过敏", "allergy:", ["m1"])])), max_invalid_retries=0
        ).extract(BATCH, [], [], now_ms=NOW)


def test_prompt_asks_for_the_heuristic_key_scheme() -> None:
    system = EXTRACTION_SYSTEM_PROMPT
    for prefix in KEY_PREFIXES:
        assert f"{prefix}:" in system, prefix
    assert "snake_case" not in system and "diet:coriander" not in system and "hobby:" not in system
    # The prompt's example keys are exactly what the heuristic extractor writes for those sentences.
    ts = T0
    said = {
        "我对芒果过敏": "allergy:芒果",
        "吃面别放香菜哦": "food:香菜",
        "我妈妈喜欢跳舞": "family:母亲:跳舞",
        "最近在学吉他": "state:学吉他",
        "我每天早上在西湖边跑步": "habit:跑步",
        "我下个月要去成都出差": "plan:去成都出差",
        "I'm a product manager, and I run along West Lake most mornings": "habit:run",
        "I'm flying to Chengdu for work from Feb 10 to Feb 14": "plan:fly_to_chengdu_for_work",
        "My favorite color is green": "pref:favorite_color",
        "我最喜欢的颜色是蓝色": "pref:最喜欢的颜色",
        "My mom loves dancing": "family:mother:dancing",
        "我喜欢爬山": "pref:爬山",
        "I love jazz": "pref:jazz",
        "I'm learning Spanish": "state:learning_spanish",
        "我有高血压": "health:高血压",
        "I have asthma": "health:asthma",
        "我养了一只叫年糕的橘猫": "pet:年糕",
        "I have a cat named Mochi": "pet:mochi",
        "我想减肥": "goal:减肥",
        "I want to lose weight": "goal:lose_weight",
    }
    for text, key in said.items():
        keys = [
            c.key for c in HeuristicExtractor().extract([msg(1, "user", text)], [], [], now_ms=ts).candidates
        ]
        assert key in keys, (text, keys)
        assert key in system, key
    for chatter in ("今晚想吃点水果，有什么推荐？", "明天早上7点提醒我去跑步", "I want to grab a coffee now"):
        assert chatter in system
        assert HeuristicExtractor().extract([msg(1, "user", chatter)], [], [], now_ms=ts).candidates == []


def test_chatter_only_answer_gives_nothing() -> None:
    chatter = [msg(1, "user", "今天杭州下雨了"), msg(2, "user", "Thanks, bye!", 1)]
    result = LLMExtractor(fake(answer([]))).extract(chatter, [], [], now_ms=NOW)
    assert result.candidates == [] and result.variables == {} and result.model_calls == 1


def test_batch_without_user_messages_makes_no_call() -> None:
    model = fake(GOOD)
    result = LLMExtractor(model).extract([msg(2, "assistant", "你好呀")], [], SPECS, now_ms=NOW)
    assert result.model_calls == 0 and result.candidates == []
    assert model.calls == []


@pytest.mark.parametrize(
    "error",
    [
        TimeoutError("read timed out"),
        ModelRateLimitError("429"),
        httpx.ConnectError("refused"),
    ],
)
def test_network_errors_propagate_unchanged(error: BaseException) -> None:
    model = fake(GOOD, error=error)
    with pytest.raises(type(error)):
        LLMExtractor(model).extract(BATCH, [], [], now_ms=NOW)
    assert len(model.calls) == 1  # not retried inside the extractor: the graph's RetryPolicy does it


def test_aextract_retries_invalid_output_too() -> None:
    model = fake(AIMessage("{oops"), GOOD)
    result = asyncio.run(LLMExtractor(model).aextract(BATCH, EXISTING, SPECS, now_ms=NOW))
    assert result.model_calls == 2 and len(result.candidates) == 3


def test_json_mode_spells_out_the_schema_in_the_system_prompt() -> None:
    model = fake(GOOD)
    LLMExtractor(model, method="json_mode").extract(BATCH, [], [], now_ms=NOW)
    system = model.calls[0][0].text
    assert "It must match this JSON schema" in system and '"source_ids"' in system


def test_bad_settings_are_rejected() -> None:
    with pytest.raises(ValueError, match="max_invalid_retries"):
        LLMExtractor(fake(), max_invalid_retries=-1)


def _request() -> httpx.Request:
    return httpx.Request("POST", "http://127.0.0.1/v1/chat/completions")


def _status_error(cls: type[openai.APIStatusError], code: int) -> openai.APIStatusError:
    import httpx2

    response = httpx2.Response(code, request=httpx2.Request("POST", "http://127.0.0.1/v1/chat/completions"))
    return cls(f"status {code}", response=response, body=None)


@pytest.mark.parametrize(
    ("exc", "expected"),
    [
        (TimeoutError(), True),
        (ConnectionResetError(), True),
        (httpx.ReadTimeout("slow", request=_request()), True),
        (ModelRateLimitError("429"), True),
        (ModelInvalidRequestError("400"), False),
        (_status_error(openai.RateLimitError, 429), True),
        (_status_error(openai.InternalServerError, 503), True),
        (_status_error(openai.BadRequestError, 400), False),
        (_status_error(openai.AuthenticationError, 401), False),
        (ExtractionError("model kept answering badly"), False),
        (ValueError("bug"), False),
    ],
)
def test_is_retryable(exc: BaseException, expected: bool) -> None:
    assert is_retryable(exc) is expected


# ---------------------------------------------------------------- summarizer

VERBOSE_ZH = "用户林晓住在杭州，是一名产品经理，平时工作很忙但是坚持锻炼。" * 12
SHORT_ZH = "用户林晓住在杭州，是产品经理。对芒果过敏。喜欢沿西湖跑步。"


def summarize(
    model: RecordingFake, budget: int, previous: Summary | None = None, *, shorten: bool = False
) -> str:
    return LLMSummarizer(model, shorten=shorten).summarize(
        previous,
        BATCH,
        {"city": VariableValue(name="city", value="杭州", origin="manual")},
        EXISTING,
        budget_tokens=budget,
        counter=count_tokens,
        now_ms=NOW,
    )


def test_summary_prompt_has_previous_summary_messages_and_context() -> None:
    model = fake(AIMessage(SHORT_ZH))
    previous = Summary(text="用户住在杭州。", tokens=7, covers_until_ms=T0)
    assert summarize(model, 300, previous) == SHORT_ZH
    assert len(model.calls) == 1
    system, human = model.calls[0]
    assert "At most 300 tokens" in system.text and "No transcript" in system.text
    assert "Previous summary:\n用户住在杭州。" in human.text
    assert "- city: 杭州" in human.text and "- 用户住在杭州" in human.text
    assert "2025-12-27 03:05 UTC user: 小雨，跟你说一下，我对芒果过敏" in human.text


def test_verbose_summary_is_shortened_once_then_trimmed_to_the_budget() -> None:
    model = fake(AIMessage(VERBOSE_ZH), AIMessage(VERBOSE_ZH[:150]))
    text = summarize(model, 60, shorten=True)
    assert count_tokens(text) <= 60
    assert len(model.calls) == 2
    assert "the limit is 60" in model.calls[1][-1].text
    assert text.endswith("。") and VERBOSE_ZH.startswith(text)  # cut at a sentence boundary


def test_shortened_answer_within_budget_is_used_as_is() -> None:
    model = fake(AIMessage(VERBOSE_ZH), AIMessage(SHORT_ZH))
    assert summarize(model, 60, shorten=True) == SHORT_ZH


def test_by_default_an_over_budget_summary_is_trimmed_without_a_second_call() -> None:
    model = fake(AIMessage(VERBOSE_ZH), AIMessage(SHORT_ZH))
    text = summarize(model, 60)
    assert len(model.calls) == 1
    assert count_tokens(text) <= 60 and text.endswith("。") and VERBOSE_ZH.startswith(text)


def test_english_summary_respects_budget() -> None:
    verbose = "User Lin Xiao lives in Hangzhou and works as a product manager. " * 20
    model = fake(AIMessage(verbose), AIMessage(verbose))
    text = summarize(model, 40)
    assert count_tokens(text) <= 40 and text.endswith(".")


def test_empty_answer_keeps_previous_summary_and_reasoning_is_stripped() -> None:
    previous = Summary(text="用户住在杭州。", tokens=7, covers_until_ms=T0)
    assert summarize(fake(AIMessage("  ")), 300, previous) == "用户住在杭州。"
    assert (
        summarize(fake(AIMessage("<think>let me see</think>\n用户对芒果过敏。")), 300) == "用户对芒果过敏。"
    )


@settings(max_examples=200, deadline=None)
@given(text=st.text(max_size=400), budget=st.integers(min_value=0, max_value=80))
def test_trim_to_budget_always_fits_and_keeps_a_prefix(text: str, budget: int) -> None:
    out = trim_to_budget(text, budget, count_tokens)
    assert count_tokens(out) <= budget
    assert text.strip().startswith(out)


def test_trim_to_budget_prefers_sentence_boundaries() -> None:
    assert (
        trim_to_budget("用户住在杭州。用户是产品经理。用户养猫。", 15, count_tokens)
        == "用户住在杭州。用户是产品经理。"
    )
    assert trim_to_budget("No boundary here at all " * 5, 3, count_tokens) == "No boundary"


# ---------------------------------------------------------------- chat model factory

# ChatOpenAI probes which TCP socket options the OS supports by opening (never connecting) a socket;
# pytest-socket blocks it, langchain-openai catches that and warns. No network is involved.
_socket_probe = pytest.mark.filterwarnings("ignore:A test tried to use socket.socket:UserWarning")


@_socket_probe
def test_make_chat_model_reads_env_and_never_logs_the_key(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", "http://user:secretpw@127.0.0.1:9999/v1")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-live-SECRET")
    with caplog.at_level(logging.DEBUG, logger="convmem_graph"):
        chat = make_chat_model("qwen-plus", timeout=5)
    # Where requests go: the OpenAI client's own reading of OPENAI_BASE_URL.
    assert str(chat.root_client.base_url) == "http://user:secretpw@127.0.0.1:9999/v1/"  # type: ignore[attr-defined]
    assert chat.max_retries == 0 and chat.request_timeout == 5  # type: ignore[attr-defined]
    assert "sk-live-SECRET" not in repr(chat)
    assert "127.0.0.1:9999" in caplog.text
    assert "SECRET" not in caplog.text and "secretpw" not in caplog.text


@_socket_probe
def test_make_chat_model_arguments_win_and_missing_key_is_a_clear_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-env")
    chat = make_chat_model(
        "deepseek-chat", base_url="http://127.0.0.1:8000/v1", api_key="sk-arg", max_retries=2
    )
    assert chat.openai_api_key.get_secret_value() == "sk-arg"  # type: ignore[attr-defined]
    assert chat.max_retries == 2  # type: ignore[attr-defined]
    monkeypatch.delenv("OPENAI_API_KEY")
    with pytest.raises(ValueError, match="no API key"):
        make_chat_model("gpt-4o-mini")
    with pytest.raises(ValueError, match="model name is empty"):
        make_chat_model(" ", api_key="x")
