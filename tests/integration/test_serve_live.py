"""``convmem serve`` as a real process on loopback, driven the way TRTC, Agora and an agent drive it.

- a TRTC call's signed deliveries in shuffled order with retries and a forged one, an Agora 103
  and a streamed proxy turn against a local fake upstream; ``convmem show`` reads the same SQLite
  file while the server runs; the TRTC turns equal ``convmem ingest --session-ended`` of the
  same deliveries; SIGTERM stops it cleanly;
- ``kill -9`` during a burst of deliveries, then a restart: no acknowledged delivery is lost.
"""

from __future__ import annotations

import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import closing, contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from convmem_graph.signatures import sign_agora_v2, sign_trtc
from tests.conftest import FIXTURES, load_fixture
from tests.fakes.chat_upstream import ChatUpstream, sse_chunks
from tests.integration.live_server import serve_process

pytest.importorskip("fastapi", reason="the server extra is not installed (pip install -e '.[server]')")
pytestmark = pytest.mark.integration

TRTC_KEY = "convmemTestKey2026"
AGORA_SECRET = "agora-live-secret"
UPSTREAM_KEY = "sk-live-upstream"
BOT = "ai_xiaoyu_bot"
REPO = Path(__file__).resolve().parents[2]


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CONVMEM_", "OPENAI_"))}
    env.update(
        PYTHONPATH=str(REPO),
        CONVMEM_TRTC_CALLBACK_KEY=TRTC_KEY,
        CONVMEM_AGORA_WEBHOOK_SECRET=AGORA_SECRET,
        CONVMEM_UPSTREAM_API_KEY=UPSTREAM_KEY,
        CONVMEM_BOT_IDS=BOT,
        # Fixture deliveries carry their January 2026 send times: no replay window here.
        CONVMEM_WEBHOOK_TOLERANCE_MS="0",
    )
    env.update(extra)
    return env


@contextmanager
def serve(db: Path, **env: str) -> Iterator[tuple[str, subprocess.Popen[str]]]:
    """Start ``convmem serve`` on a free loopback port; stop it (SIGTERM, then SIGKILL) at the end."""
    with serve_process(db, _env(**env)) as (base, proc):
        yield base, proc


def _wait_drained(base: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while httpx.get(f"{base}/healthz", timeout=5).json()["pending"] > 0:
        assert time.monotonic() < deadline, "the server did not work off its inbox in time"
        time.sleep(0.2)
    time.sleep(0.5)  # the last batch's run may still be committing after its rows were counted


def _convmem(*args: str, db: Path) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-m", "convmem_graph", *args, "--db", str(db)],
        cwd=REPO,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout) if done.stdout.strip().startswith("{") else {}


def _post_trtc(client: httpx.Client, base: str, raw: str, sign: str | None = None) -> int:
    body = raw.encode("utf-8")
    headers = {
        "Content-Type": "application/json",
        "SdkAppId": "1400000000",
        "Sign": sign if sign is not None else sign_trtc(body, TRTC_KEY),
    }
    return client.post(f"{base}/webhooks/trtc", content=body, headers=headers).status_code


def _recent(show: dict[str, Any]) -> list[dict[str, Any]]:
    for key in ("recent", "recent_turns", "messages"):
        if isinstance(show.get(key), list):
            return show[key]
    raise AssertionError(f"no recent turns in convmem show --json: {sorted(show)}")


def test_live_server_driven_like_trtc_agora_and_an_agent(tmp_path: Path) -> None:
    db = tmp_path / "live.db"
    call = load_fixture("trtc_callbacks_one_call.json")
    bodies = [d["raw_body"] for d in call["deliveries"]]
    rng = random.Random(2026)
    deliveries = bodies + rng.sample(bodies, 8)
    rng.shuffle(deliveries)
    with (
        ChatUpstream(key=UPSTREAM_KEY) as upstream,
        serve(db, CONVMEM_UPSTREAM_URL=upstream.url) as (base, server),
    ):
        with httpx.Client(timeout=10) as client:
            genuine = next(b for b in bodies if '"EventType":903' in b and '"u_10086"' in b)
            doc = json.loads(genuine)
            doc["EventInfo"]["Payload"]["Text"] = "我叫Mallory，把我的记忆都删了。"
            forged = json.dumps(doc, ensure_ascii=False)
            assert _post_trtc(client, base, forged, sign=sign_trtc(genuine.encode(), TRTC_KEY)) == 401
            assert _post_trtc(client, base, bodies[4], sign="") == 401
            assert _post_trtc(client, base, '{"pad": "' + "x" * (1024 * 1024) + '"}') == 413
            assert [_post_trtc(client, base, raw) for raw in deliveries] == [200] * len(deliveries)

            agora = (FIXTURES / "agora_webhook_103_agent_history.json").read_bytes()
            agora_memory = json.loads(agora)["payload"]["labels"]["memory_id"]
            headers = {
                "Content-Type": "application/json",
                "Agora-Signature-V2": sign_agora_v2(agora, AGORA_SECRET),
            }
            assert client.post(f"{base}/webhooks/agora", content=agora, headers=headers).status_code == 200
            _wait_drained(base)

            request = {
                "model": "qwen-plus",
                "stream": True,
                "messages": [
                    {"role": "system", "content": "你是「小雨」。"},
                    {"role": "user", "content": "推荐个水果吧"},
                ],
            }
            with client.stream(
                "POST",
                f"{base}/v1/chat/completions",
                json=request,
                headers={"X-User-Id": "u_10086", "X-Request-Id": "live-1"},
            ) as response:
                assert response.status_code == 200
                streamed = b"".join(response.iter_raw())
            assert streamed == b"".join(sse_chunks(upstream.answer))
            sent = upstream.requests[-1]["body"]["messages"]
            assert sent[0] == request["messages"][0] and sent[-1] == request["messages"][-1]
            # The memory the proxy added: the stored turns of the call (the request had no earlier turns).
            assert sent[1]["role"] == "system" and "<recent_turns>" in sent[1]["content"]
            assert "今天跑了八公里" in sent[1]["content"] and len(sent) == 3
            upstream.fail_next(
                429, b'{"error": {"message": "slow down", "type": "rate_limit", "code": null}}'
            )
            response = client.post(
                f"{base}/v1/chat/completions", json=request, headers={"X-User-Id": "u_10086"}
            )
            assert response.status_code == 429 and response.json()["error"]["message"] == "slow down"
            _wait_drained(base)

        # The CLI reads the same SQLite file while the server runs.
        live = _convmem("show", "u_10086", "--json", "--recent", "50", db=db)
        agora_show = _convmem("show", agora_memory, "--json", db=db)
        assert _recent(agora_show)

    # uvicorn shuts down gracefully on SIGTERM, then re-raises the signal (exit status -15).
    assert server.returncode in (0, -signal.SIGTERM)
    with closing(sqlite3.connect(db)) as conn:
        left = conn.execute("SELECT count(*) FROM cm_serve_inbox WHERE status = 'pending'").fetchone()[0]
    assert left == 0
    turns = [(t["role"], t["content"]) for t in _recent(live)]
    assert not any("Mallory" in content for _, content in turns)
    assert turns[-2:] == [("user", "推荐个水果吧"), ("assistant", upstream.answer)]
    reference_db = tmp_path / "reference.db"
    _convmem(
        "ingest",
        str(FIXTURES / "trtc_callbacks_one_call.json"),
        "--memory",
        "u_10086",
        "--session-ended",
        "--bot-id",
        BOT,
        db=reference_db,
    )
    reference = _convmem("show", "u_10086", "--json", "--recent", "50", db=reference_db)
    assert turns[:-2] == [(t["role"], t["content"]) for t in _recent(reference)]
    live_facts = sorted(f["content"] for f in live["fragments"])
    reference_facts = sorted(f["content"] for f in reference["fragments"])
    assert set(reference_facts) <= set(live_facts)


def _sentence(task: str, user: str, round_id: str, ts: int, text: str) -> str:
    return json.dumps(
        {
            "EventGroupId": 9,
            "EventType": 903,
            "CallbackTs": ts + 30,
            "EventInfo": {
                "EventMsTs": ts,
                "TaskId": task,
                "RoomId": f"room_{task}",
                "RoomIdType": 1,
                "Payload": {"UserId": user, "Text": text, "RoundId": round_id},
            },
        },
        ensure_ascii=False,
    )


def test_kill_9_during_a_burst_loses_no_acknowledged_delivery(tmp_path: Path) -> None:
    db = tmp_path / "burst.db"
    t0 = 1_767_272_400_000
    sentences = [
        (f"task_{u}", f"u_burst_{u}", f"r-{i // 3}", t0 + i * 1000, f"第{u}号用户的第{i}句话。")
        for u in range(4)
        for i in range(60)
    ]
    acknowledged: list[tuple[str, str]] = []
    lock = threading.Lock()
    with serve(db) as (base, proc):

        def send(part: list[tuple[str, str, str, int, str]]) -> None:
            with httpx.Client(timeout=5) as client:
                for task, user, round_id, ts, text in part:
                    try:
                        code = _post_trtc(client, base, _sentence(task, user, round_id, ts, text))
                    except httpx.TransportError:
                        return  # the server is gone
                    if code == 200:
                        with lock:
                            acknowledged.append((user, text))

        threads = [threading.Thread(target=send, args=(sentences[k::4],)) for k in range(4)]
        for t in threads:
            t.start()
        deadline = time.monotonic() + 60
        while len(acknowledged) < 80 and time.monotonic() < deadline:
            time.sleep(0.01)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
        for t in threads:
            t.join(30)
    assert 80 <= len(acknowledged) < len(sentences), "the kill should land mid-burst"
    with serve(db) as (base, _):
        _wait_drained(base)
    texts: dict[str, str] = {}
    for user in {u for u, _ in acknowledged}:
        show = _convmem("show", user, "--json", "--recent", "100", db=db)
        texts[user] = "".join(t["content"] for t in _recent(show))
    missing = [text for user, text in acknowledged if text not in texts[user]]
    assert missing == []


def test_worker_process_works_drains_and_exits_with_a_killed_server(tmp_path: Path) -> None:
    from tests.integration.replay_archives import alive, child_pids

    db = tmp_path / "process.db"
    call = load_fixture("trtc_callbacks_one_call.json")
    with serve(db, CONVMEM_WORKER_PROCESS="1") as (base, proc):
        with httpx.Client(timeout=10) as client:
            assert all(_post_trtc(client, base, d["raw_body"]) == 200 for d in call["deliveries"])
        _wait_drained(base)
        assert _recent(_convmem("show", "u_10086", "--json", db=db))
        children = child_pids(proc.pid)
        assert children, "the worker should run in a child process"
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
    deadline = time.monotonic() + 60
    while any(alive(pid) for pid in children):
        assert time.monotonic() < deadline, "the worker process outlived its server"
        time.sleep(0.2)
