from __future__ import annotations

import json
from pathlib import Path
from urllib.parse import urlparse

import pytest

from convmem_graph import ConvMemory
from convmem_graph.cli import main
from convmem_graph.server.inbox import Inbox
from tests.conftest import load_fixture
from tests.fakes.vendor_servers import (
    AGORA_APP_ID,
    AGORA_CUSTOMER,
    IM_ADMIN,
    IM_APP_ID,
    IM_KEY,
    TC_SECRET_ID,
    TC_SECRET_KEY,
)

WINDOW = ["--since", "1767268800", "--until", str(1767268800 + 3600)]


@pytest.fixture
def env(monkeypatch: pytest.MonkeyPatch, base_url: str) -> None:
    for name, value in {
        "CONVMEM_IM_SDKAPPID": str(IM_APP_ID),
        "CONVMEM_IM_SECRET_KEY": IM_KEY,
        "CONVMEM_IM_ADMIN": IM_ADMIN,
        "CONVMEM_IM_BASE_URL": base_url,
        "CONVMEM_TRTC_SECRET_ID": TC_SECRET_ID,
        "CONVMEM_TRTC_SECRET_KEY": TC_SECRET_KEY,
        "CONVMEM_TRTC_ENDPOINT": urlparse(base_url).netloc,
        "CONVMEM_TRTC_SCHEME": "http",
        "CONVMEM_AGORA_APP_ID": AGORA_APP_ID,
        "CONVMEM_AGORA_CUSTOMER_ID": AGORA_CUSTOMER[0],
        "CONVMEM_AGORA_CUSTOMER_SECRET": AGORA_CUSTOMER[1],
        "CONVMEM_AGORA_HOST": base_url,
    }.items():
        monkeypatch.setenv(name, value)


@pytest.mark.vcr
def test_pull_im_stores_every_page_and_a_rerun_stores_nothing_twice(
    env: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = str(tmp_path / "pull.db")
    args = ["pull", "im", "--user", "u_10086", "--bot", "ai_xiaoyu_bot", *WINDOW, "--db", db]
    assert main(args) == 0
    assert "3 page(s), 10 new message(s)" in capsys.readouterr().out
    assert main(args) == 0
    assert "0 new message(s)" in capsys.readouterr().out
    with ConvMemory.open(db) as mem:
        turns = mem.recent("u_10086", 50)
    assert len(turns) == 10 and turns[1].role == "assistant"


def test_pull_im_without_credentials_is_a_clear_error(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("CONVMEM_IM_SDKAPPID", raising=False)
    code = main(["pull", "im", "--user", "u", "--bot", "b", "--db", str(tmp_path / "x.db")])
    assert code == 2 and "CONVMEM_IM_SDKAPPID" in capsys.readouterr().err


def _options(tmp_path: Path, doc: dict[str, object]) -> Path:
    path = tmp_path / "options.json"
    path.write_text(json.dumps(doc, ensure_ascii=False), encoding="utf-8")
    return path


@pytest.mark.vcr(match_on=["method", "path"])
def test_call_start_trtc_sends_the_memory_and_registers_the_task(
    env: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = str(tmp_path / "call.db")
    with ConvMemory.open(db) as mem:
        mem.ingest("u_10086", [{"role": "user", "content": "我对芒果过敏。"}], source="openai")
    body = load_fixture("trtc_start_ai_conversation_request.json")["body"]
    options = _options(
        tmp_path,
        {
            "sdk_app_id": body["SdkAppId"],
            "room_id": body["RoomId"],
            "room_id_type": 1,
            "agent_config": body["AgentConfig"],
            "tts_config": json.loads(body["TTSConfig"]),
            "llm": {
                "LLMType": "openai",
                "Model": "qwen-plus",
                "APIUrl": "https://proxy.example/v1/chat/completions",
            },
        },
    )
    code = main(
        [
            "call",
            "start",
            "--vendor",
            "trtc",
            "--memory",
            "u_10086",
            "--options",
            str(options),
            "--persona",
            "你是小雨。",
            "--db",
            db,
        ]
    )
    assert code == 0, capsys.readouterr().err
    out = json.loads(capsys.readouterr().out)
    assert out["vendor"] == "trtc" and out["task_id"].startswith("task-")
    with ConvMemory.open(db) as mem:
        task = Inbox(mem.store).task(out["task_id"])
    assert task is not None and task.memory_id == "u_10086"


@pytest.mark.vcr(match_on=["method", "path"])
def test_call_start_agora_joins_with_the_memory(
    env: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = str(tmp_path / "agora.db")
    join = load_fixture("agora_join_request.json")
    options = _options(
        tmp_path,
        {
            "name": "cli-agent",
            "properties": {k: v for k, v in join["properties"].items() if k != "llm"},
            "llm": {"url": "https://proxy.example/v1/chat/completions"},
        },
    )
    code = main(
        ["call", "start", "--vendor", "agora", "--memory", "u_new", "--options", str(options), "--db", db]
    )
    assert code == 0, capsys.readouterr().err
    assert json.loads(capsys.readouterr().out)["agent_id"]
