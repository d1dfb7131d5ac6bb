"""``convmem replay --model-concurrency`` against a fake OpenAI server, in one and in two worker processes."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from convmem_graph.store import MemoryStore
from tests.fakes.concurrent_chat import (
    EMPTY_ANSWER,
    USERS,
    fully_extracted,
    write_archive,
)
from tests.fakes.openai_server import FakeOpenAIServer, Reply


@pytest.mark.parametrize("processes", [1, 2])
def test_convmem_replay_model_concurrency_against_the_fake_server(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, processes: int
) -> None:
    from convmem_graph.cli import main

    archive = write_archive(tmp_path / "archive", USERS, sessions=2)
    seen: list[int] = []
    lock = threading.Lock()
    in_flight = [0]

    def answer(request: dict[str, Any]) -> Reply:
        with lock:
            in_flight[0] += 1
            seen.append(in_flight[0])
        time.sleep(0.05)  # long enough for the other memories' calls to arrive meanwhile
        with lock:
            in_flight[0] -= 1
        structured = request.get("tools") or request.get("response_format")
        return Reply(content=EMPTY_ANSWER if structured else "The user keeps notes.")

    with FakeOpenAIServer(responder=answer) as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        monkeypatch.setenv("OPENAI_API_KEY", "EMPTY")
        db = str(tmp_path / "cli.db")
        argv = ["replay", str(archive), "--no-progress", "--json", "--db", db, "--model", "fake-model"]
        # With 2 worker processes each gets a share: 2 + 1 calls at once, 30,000 requests a minute.
        code = main(
            [
                *argv,
                "--model-concurrency",
                "3",
                "--rpm",
                "60000",
                "--batch",
                "2",
                "--concurrency",
                str(processes),
            ]
        )
    out, err = capsys.readouterr()
    assert code == 0, (out, err)
    assert json.loads(out)["new_messages"] == 2 * 2 * len(USERS), out
    assert max(seen) <= 3, seen  # never more than K at the server
    store = MemoryStore.from_url(db)
    assert all(fully_extracted(store, u) for u in USERS)
    store.close()
