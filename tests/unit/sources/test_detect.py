from __future__ import annotations

from typing import Any

import pytest
from langchain_core.messages import HumanMessage

from convmem_graph.errors import SourceFormatError
from convmem_graph.sources import SOURCE_NAMES, detect_source, read_payload
from tests.conftest import FIXTURES, load_fixture


@pytest.mark.parametrize(
    ("fixture", "source"),
    [
        ("agora_history_response.json", "agora"),
        ("agora_webhook_103_agent_history.json", "agora"),
        ("agora_custom_llm_request.json", "agora"),
        ("tencent_im_roammsg_exchange.json", "tencent_im"),
        ("trtc_callbacks_one_call.json", "trtc"),
    ],
)
def test_fixtures_are_detected(fixture: str, source: str) -> None:
    assert detect_source(load_fixture(fixture)) == source
    assert detect_source((FIXTURES / fixture).read_bytes()) == source
    assert read_payload(load_fixture(fixture)).source == source


def test_parts_of_fixtures_are_detected() -> None:
    im = load_fixture("tencent_im_roammsg_exchange.json")
    assert detect_source(im["pages"][0]["response"]) == "tencent_im"
    assert detect_source([p["response"] for p in im["pages"]]) == "tencent_im"
    assert detect_source(im["error_example"]) == "tencent_im"
    trtc = load_fixture("trtc_callbacks_one_call.json")
    assert detect_source(trtc["deliveries"]) == "trtc"
    assert detect_source([d["raw_body"] for d in trtc["deliveries"]]) == "trtc"
    assert detect_source(trtc["deliveries"][3]["raw_body"]) == "trtc"
    agora = load_fixture("agora_history_response.json")
    assert detect_source(agora["contents"]) == "agora"
    assert detect_source(load_fixture("agora_webhook_103_agent_history.json")["payload"]) == "agora"


@pytest.mark.parametrize(
    ("data", "source"),
    [
        ([{"role": "user", "content": "hi"}], "openai"),
        ({"model": "m", "messages": [{"role": "user", "content": "hi"}]}, "openai"),
        ([], "openai"),
        ([HumanMessage("hi")], "langchain"),
        ([{"type": "human", "data": {"content": "hi"}}], "langchain"),
    ],
)
def test_message_lists(data: Any, source: str) -> None:
    assert detect_source(data) == source


@pytest.mark.parametrize(
    "data",
    [{"name": "agent", "properties": {}}, {}, 42, None, "not json", b"\xff\xfe", [1, 2], "[[[[[[[[[[[[[["],
)
def test_unknown_payload_names_the_formats_tried(data: Any) -> None:
    with pytest.raises(SourceFormatError) as err:
        detect_source(data)
    assert err.value.source == "auto"
    assert err.value.path == "$"
    if not isinstance(data, str | bytes):
        assert "tried: " + ", ".join(SOURCE_NAMES) in err.value.reason


def test_join_request_is_not_a_conversation() -> None:
    with pytest.raises(SourceFormatError, match="tried: agora, tencent_im, trtc, openai, langchain"):
        read_payload(load_fixture("agora_join_request.json"))


def test_unknown_source_name() -> None:
    with pytest.raises(SourceFormatError) as err:
        read_payload([], "whatsapp")
    assert err.value.source == "whatsapp"
    assert read_payload([{"role": "user", "content": "x"}], "openai").source == "openai"
