from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from convmem_graph.cli import main
from tests.conftest import FIXTURES

CONVERSATIONS = [
    "agora_history_response.json",
    "agora_webhook_103_agent_history.json",
    "tencent_im_roammsg_exchange.json",
    "trtc_callbacks_one_call.json",
    "agora_custom_llm_request.json",
]
KEYS = [
    "id",
    "role",
    "content",
    "timestamp_ms",
    "channel",
    "source",
    "turn_id",
    "round_id",
    "speaker_id",
    "partial",
    "interrupted",
    "original",
]


def _run_json(capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, list[dict[str, object]]]:
    code = main(["normalize", *args, "--json"])
    out, err = capsys.readouterr()
    assert (code, err) == (0, "")
    doc: dict[str, list[dict[str, object]]] = json.loads(out)
    return doc


def test_json_timeline_of_all_conversation_fixtures(capsys: pytest.CaptureFixture[str]) -> None:
    doc = _run_json(capsys, *[str(FIXTURES / name) for name in CONVERSATIONS])
    assert list(doc) == ["messages", "skipped"]
    messages = doc["messages"]
    assert len(messages) == 29
    assert all(list(m) == KEYS for m in messages)
    times = [m["timestamp_ms"] for m in messages]
    assert times == sorted(times)  # type: ignore[type-var]
    r2 = [m["content"] for m in messages if m["round_id"] == "r-0002"]
    assert r2 == [
        "我刚跑完步回来。今天跑了八公里，配速六分半。",
        "哇，八公里！六分半的配速很稳呀，跑完记得拉伸一下腿。",
    ]
    partial = [m for m in messages if m["partial"]]
    assert [(m["channel"], m["interrupted"]) for m in partial] == [("im", True)]
    interrupted = [m for m in messages if m["interrupted"] and not m["partial"]]
    assert [(m["channel"], m["turn_id"], m["round_id"]) for m in interrupted] == [
        ("voice", 2, None),
        ("voice", None, "r-0003"),
    ]
    assert (
        interrupted[0]["original"]
        == "好的，我记住了，你对芒果过敏，以后推荐水果时我会避开芒果和芒果做的甜品。周末要不要试试草莓蛋糕？"
    )
    counts = Counter(str(s["reason"]) for s in doc["skipped"])
    assert counts == {
        "duplicate": 12,
        "event_type_ignored": 8,
        "duplicate_delivery": 1,
        "empty": 1,
        "think_injected": 1,
        "system": 1,
        "memory_block": 1,
        "recalled": 1,
        "chatbot_control": 1,
        "chatbot_card": 1,
        "chatbot_passthrough": 1,
    }
    recalled = next(s for s in doc["skipped"] if s["reason"] == "recalled")
    assert recalled["file"] == str(FIXTURES / "tencent_im_roammsg_exchange.json")
    assert recalled["path"] == "pages[0].response.MsgList[5]"
    retry = next(s for s in doc["skipped"] if s["reason"] == "duplicate_delivery")
    assert (retry["file"], retry["path"]) == (
        str(FIXTURES / "trtc_callbacks_one_call.json"),
        "deliveries[6].raw_body",
    )


def test_ids_are_identical_across_runs(capsys: pytest.CaptureFixture[str]) -> None:
    files = [str(FIXTURES / name) for name in CONVERSATIONS]
    first = _run_json(capsys, *files)
    second = _run_json(capsys, *files)
    assert [m["id"] for m in first["messages"]] == [m["id"] for m in second["messages"]]


def test_trtc_callbacks_split_over_jsonl_lines_are_joined(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    wrapper = json.loads((FIXTURES / "trtc_callbacks_one_call.json").read_text(encoding="utf-8"))
    bodies = [d["raw_body"] for d in wrapper["deliveries"]]
    first, second = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    first.write_text("\n".join(bodies[:6]) + "\n", encoding="utf-8")
    second.write_text("\n".join(bodies[6:]) + "\n", encoding="utf-8")
    doc = _run_json(capsys, str(second), str(first))
    assert [(m["role"], m["round_id"]) for m in doc["messages"]][:3] == [
        ("assistant", "r-0001-welcome"),
        ("user", "r-0002"),
        ("assistant", "r-0002"),
    ]
    assert doc["messages"][1]["content"] == "我刚跑完步回来。今天跑了八公里，配速六分半。"
    retry = next(s for s in doc["skipped"] if s["reason"] == "duplicate_delivery")
    assert (retry["file"], retry["path"]) == (f"{first}:6", "$")


def test_table_output(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["normalize", str(FIXTURES / "trtc_callbacks_one_call.json"), "--bot-id", "ai_xiaoyu_bot"])
    out, err = capsys.readouterr()
    assert (code, err) == (0, "")
    assert "哇，八公里！六分半的配速很稳呀，跑完记得拉伸一下腿。" in out
    assert "成都不辣的也很多！ [interrupted]" in out
    assert "voice/greeting" in out
    assert "7 messages; skipped: duplicate_delivery 1, event_type_ignored 8" in out


def test_source_option(capsys: pytest.CaptureFixture[str]) -> None:
    doc = _run_json(capsys, str(FIXTURES / "agora_custom_llm_request.json"), "--source", "agora")
    assert len(doc["messages"]) == 6
    code = main(
        ["normalize", str(FIXTURES / "agora_custom_llm_request.json"), "--source", "openai", "--json"]
    )
    out, _ = capsys.readouterr()
    assert code == 0
    assert [m["channel"] for m in json.loads(out)["messages"]] == ["api"] * 6


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (
            '{"name": "x", "properties": {}}',
            ": auto: $: unrecognized payload (object with keys name, properties); tried: agora,",
        ),
        (
            '{"ActionStatus": "FAIL", "ErrorCode": 70001, "ErrorInfo": "UserSig expired"}',
            ": tencent_im: ErrorCode: error envelope: ErrorCode 70001",
        ),
        ('{"agent_id": "a", "contents": {"x": 1}}', ": agora: contents: expected an array, got object"),
        ('{"a": 1,\n "b": }', ":2: json: invalid JSON at line 2"),
    ],
)
def test_bad_files_exit_2_with_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str, expected: str
) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(content, encoding="utf-8")
    code = main(["normalize", str(FIXTURES / "agora_history_response.json"), str(bad)])
    out, err = capsys.readouterr()
    assert code == 2
    assert out == ""
    assert err.count("\n") == 1
    assert err.startswith(f"convmem normalize: error: {bad}")
    assert expected in err
    assert "Traceback" not in err


def test_strict_names_the_bad_item(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    doc = json.loads((FIXTURES / "tencent_im_roammsg_exchange.json").read_text(encoding="utf-8"))
    doc["pages"][1]["response"]["MsgList"][2]["MsgBody"][0]["MsgContent"]["Data"] = (
        '{"chatbotPlugin": 1, "src": 2, "chunks": "x"}'
    )
    bad = tmp_path / "im.json"
    bad.write_text(json.dumps(doc, ensure_ascii=False), encoding="utf-8")
    assert main(["normalize", str(bad), "--json"]) == 0
    lenient = json.loads(capsys.readouterr().out)
    assert [s["path"] for s in lenient["skipped"] if s["reason"] == "invalid"] == [
        "pages[1].response.MsgList[2].MsgBody[0].MsgContent.Data.chunks"
    ]
    assert main(["normalize", str(bad), "--strict"]) == 2
    err = capsys.readouterr().err
    assert err == (
        f"convmem normalize: error: {bad}: tencent_im: "
        "pages[1].response.MsgList[2].MsgBody[0].MsgContent.Data.chunks: expected an array, got string\n"
    )


def test_strict_trtc_batch_names_the_file_and_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lines = tmp_path / "calls.jsonl"
    lines.write_text(
        '{"EventGroupId": 9, "EventType": 903, "EventInfo": {"EventMsTs": 1767272406850, "TaskId": "t", '
        '"Payload": {"UserId": "u", "Text": "hi", "RoundId": "r1"}}}\n'
        '{"EventGroupId": 9, "EventType": 903, "EventInfo": {"EventMsTs": 1767272406850, "TaskId": "t", '
        '"Payload": {"UserId": "u", "Text": 5, "RoundId": "r1"}}}\n',
        encoding="utf-8",
    )
    assert main(["normalize", str(lines), "--strict"]) == 2
    assert capsys.readouterr().err == (
        f"convmem normalize: error: {lines}:2: trtc: EventInfo.Payload.Text: expected a string, got number\n"
    )


def test_missing_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["normalize", str(tmp_path / "nope.json")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "nope.json: cannot read" in err


def test_help_has_an_example(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["normalize", "--help"])
    assert exc.value.code == 0
    assert "examples:\n  convmem normalize" in capsys.readouterr().out
