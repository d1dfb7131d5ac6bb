"""Replay with model calls at once across memories: order, concurrency, rpm/tpm pacing, 429 backoff.

Offline: fake chat models in process, and the fake OpenAI-compatible server on 127.0.0.1 for the
429 paths (those tests may connect to loopback only). Pacing is checked on a fake clock (calls
counted per fake minute), never on wall time.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from pydantic import ValidationError
from pytest_socket import enable_socket, socket_allow_hosts

from convmem_graph.extractors.chat_models import make_chat_model
from convmem_graph.extractors.llm import LLMExtractor
from convmem_graph.extractors.pacing import ModelGate, ModelPacing, RateLimitedError, retry_after_seconds
from convmem_graph.models import Message
from convmem_graph.replay import Replayer, _pool_room
from convmem_graph.store import MemoryStore
from tests.fakes.concurrent_chat import (
    EMPTY_ANSWER,
    T0,
    USERS,
    InFlightFake,
    Limited,
    fully_extracted,
    llm_lifecycle,
    write_archive,
)
from tests.fakes.openai_server import FakeOpenAIServer, Reply

# ------------------------------------------------------------------ order and concurrency


@pytest.mark.parametrize("k", [4, 6])
def test_k_calls_are_in_flight_at_once_and_each_memory_keeps_its_order(tmp_path: Path, k: int) -> None:
    archive = write_archive(tmp_path / "archive", USERS, sessions=5)
    store = MemoryStore.from_url(str(tmp_path / "k.db"))
    chat = InFlightFake(hold_until=k)
    gate = ModelGate(ModelPacing(concurrency=k))
    # batch_messages=2: one batch (one extraction call) per session, five per memory, in order.
    report = Replayer(llm_lifecycle(store, chat), group_by="user", batch_messages=2, gate=gate).run([archive])
    assert report.messages_read == report.new_messages == 2 * 5 * len(USERS)
    assert chat.state["peak"] == k == gate.stats.peak_in_flight  # reached K, never more
    notes: dict[str, list[int]] = {}
    for user, number in chat.state["notes"]:
        notes.setdefault(user, []).append(int(number))
    assert notes == {u: [0, 1, 2, 3, 4] for u in USERS}  # every batch once, in the archive's order
    assert all(fully_extracted(store, u) for u in USERS)
    store.close()


def test_the_gate_holds_calls_to_its_concurrency_even_with_more_threads(tmp_path: Path) -> None:
    archive = write_archive(tmp_path / "archive", USERS, sessions=3)
    store = MemoryStore.from_url(str(tmp_path / "cap.db"))
    chat = InFlightFake(hold_until=3, hold_s=0.2)  # would reach 6 if the gate let it
    gate = ModelGate(ModelPacing(concurrency=2))
    Replayer(llm_lifecycle(store, chat), group_by="user", batch_messages=2, concurrency=6, gate=gate).run(
        [archive]
    )
    assert chat.state["peak"] == 2 == gate.stats.peak_in_flight
    assert all(fully_extracted(store, u) for u in USERS)
    store.close()


def test_the_extractor_gets_its_gate_back_after_the_replay(tmp_path: Path) -> None:
    archive = write_archive(tmp_path / "archive", USERS[:2], sessions=1)
    store = MemoryStore.from_url(str(tmp_path / "restore.db"))
    lifecycle = llm_lifecycle(store, InFlightFake())
    Replayer(lifecycle, group_by="user", pacing=ModelPacing(concurrency=2)).run([archive])
    assert getattr(lifecycle.extractor, "gate", "missing") is None
    assert getattr(lifecycle.summarizer, "gate", "missing") is None
    store.close()


def test_a_sqlite_file_store_lets_32_calls_be_in_flight(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    users = [f"user{i:02d}" for i in range(34)]
    archive = write_archive(tmp_path / "archive", users, sessions=1)
    store = MemoryStore.from_url(str(tmp_path / "pool.db"))
    assert _pool_room(store) is None  # each run in progress keeps a connection: the pool must not cap K
    chat = InFlightFake(hold_until=32)
    with caplog.at_level("WARNING", logger="convmem_graph.replay"):
        Replayer(llm_lifecycle(store, chat), group_by="user", pacing=ModelPacing(concurrency=32)).run(
            [archive]
        )
    assert chat.state["peak"] == 32
    assert "connection pool" not in caplog.text
    assert all(fully_extracted(store, u) for u in users)
    store.close()


def test_a_bounded_pool_is_measured() -> None:
    from sqlalchemy import create_engine
    from sqlalchemy.pool import QueuePool

    engine = create_engine("sqlite://", poolclass=QueuePool, pool_size=2, max_overflow=3)
    assert _pool_room(SimpleNamespace(engine=engine)) == 5  # type: ignore[arg-type]
    engine.dispose()


# ------------------------------------------------------------------ rpm / tpm on a fake clock


class FakeClock:
    """Monotonic seconds that move only when a waiter sleeps (every sleep moves it for everyone)."""

    def __init__(self) -> None:
        self.now = 0.0
        self.lock = threading.Lock()
        self.sleeps: list[float] = []

    def monotonic(self) -> float:
        with self.lock:
            return self.now

    def sleep(self, seconds: float) -> None:
        with self.lock:
            self.now += seconds
            self.sleeps.append(seconds)
        time.sleep(0)  # let the other threads run


def run_threads(gate: ModelGate, clock: FakeClock, threads: int, calls_each: int, prompt: str) -> list[float]:
    """Make ``threads * calls_each`` calls through ``gate``; return the fake time each call started."""
    stamps: list[float] = []
    lock = threading.Lock()

    def call() -> str:
        with lock:
            stamps.append(clock.monotonic())
        return "ok"

    def worker() -> None:
        for _ in range(calls_each):
            gate.call(call, prompt)

    pool = [threading.Thread(target=worker) for _ in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join(timeout=60)
    assert not any(t.is_alive() for t in pool)
    return sorted(stamps)


def most_in_a_minute(stamps: Sequence[float]) -> int:
    return max(sum(1 for s in stamps if start <= s < start + 60) for start in stamps)


def test_rpm_budget_paces_calls_from_all_threads(monkeypatch: pytest.MonkeyPatch) -> None:
    import langchain_core.rate_limiters as rate_limiters

    clock = FakeClock()
    # LangChain's InMemoryRateLimiter reads time.monotonic(): give it the fake clock.
    monkeypatch.setattr(rate_limiters, "time", SimpleNamespace(monotonic=clock.monotonic, sleep=clock.sleep))
    gate = ModelGate(ModelPacing(concurrency=4, rpm=6), clock=clock.monotonic, sleep=clock.sleep)
    stamps = run_threads(gate, clock, threads=4, calls_each=6, prompt="hello")
    assert len(stamps) == 24 == gate.stats.calls
    assert most_in_a_minute(stamps) <= 7  # 6 a minute, one permit of slack at a window's edge
    assert stamps[-1] >= 23 * 10 - 1  # one start per 10 s of fake time, all 24 of them

    unpaced_clock = FakeClock()
    unpaced = ModelGate(ModelPacing(concurrency=4), clock=unpaced_clock.monotonic, sleep=unpaced_clock.sleep)
    assert most_in_a_minute(run_threads(unpaced, unpaced_clock, 4, 6, "hello")) == 24  # the check bites


def test_tpm_budget_paces_by_prompt_tokens() -> None:
    clock = FakeClock()
    prompt = "word " * 100  # 100 tokens, plus 100 charged for the answer
    pacing = ModelPacing(concurrency=3, tpm=1200, completion_tokens=100)
    gate = ModelGate(pacing, clock=clock.monotonic, sleep=clock.sleep, counter=lambda t: len(t.split()))
    stamps = run_threads(gate, clock, threads=3, calls_each=6, prompt=prompt)
    assert len(stamps) == 18
    # 1,200 tokens a minute at 200 a call: 6 calls a minute, plus the 10 s burst (1 call) and slack.
    assert most_in_a_minute(stamps) <= 8
    assert stamps[-1] >= (18 - 1) * 10 - 20


def test_pacing_settings_name_the_bad_field_and_split_across_workers() -> None:
    with pytest.raises(ValidationError, match="rpm"):
        ModelPacing(rpm=0)
    with pytest.raises(ValidationError, match="concurrency"):
        ModelPacing(concurrency=0)
    shares = [ModelPacing(concurrency=10, rpm=600, tpm=90_000).share(i, 4) for i in range(4)]
    assert [s.concurrency for s in shares] == [3, 3, 2, 2]
    assert sum(s.rpm or 0 for s in shares) == 600 and sum(s.tpm or 0 for s in shares) == 90_000
    with pytest.raises(ValueError, match="at least 4"):
        ModelPacing(concurrency=2).share(0, 4)


def test_the_async_path_holds_its_slots_and_backs_off_429s() -> None:
    import asyncio

    gate = ModelGate(ModelPacing(concurrency=2, max_attempts=3))
    state = {"now": 0, "peak": 0, "failures": 1}

    async def call() -> str:
        state["now"] += 1
        state["peak"] = max(state["peak"], state["now"])
        await asyncio.sleep(0.01)
        state["now"] -= 1
        if state["failures"]:
            state["failures"] -= 1
            raise Limited({"retry-after": "0"})
        return "ok"

    async def main() -> list[str]:
        return await asyncio.gather(*(gate.acall(call, "prompt") for _ in range(6)))

    assert asyncio.run(main()) == ["ok"] * 6
    assert state["peak"] == 2 == gate.stats.peak_in_flight
    assert (gate.stats.rate_limited, gate.stats.calls, gate.stats.attempts) == (1, 6, 7)

    always = ModelGate(ModelPacing(max_attempts=2))

    async def limited() -> str:
        raise Limited({"retry-after": "0"})

    with pytest.raises(RateLimitedError, match="on all 2 attempts"):
        asyncio.run(always.acall(limited))


# ------------------------------------------------------------------ 429 against the fake server


@pytest.fixture
def loopback() -> Iterator[None]:
    """Sockets again, connecting to 127.0.0.1 only (tests/unit disables them): the fake server."""
    enable_socket()
    connect = socket.socket.connect
    socket_allow_hosts(["127.0.0.1"], allow_unix_socket=True)
    try:
        yield
    finally:
        socket.socket.connect = connect  # type: ignore[method-assign]


def test_retry_after_headers_are_read() -> None:
    class Err(Exception):
        def __init__(self, headers: dict[str, str]) -> None:
            self.response = SimpleNamespace(headers=headers)

    assert retry_after_seconds(Err({"Retry-After": "7"})) == 7.0
    assert retry_after_seconds(Err({"retry-after-ms": "250", "retry-after": "9"})) == 0.25
    date = "Wed, 21 Oct 2015 07:28:10 GMT"
    assert retry_after_seconds(Err({"retry-after": date}), now=lambda: 1445412480.0) == 10.0
    assert retry_after_seconds(Err({})) is None and retry_after_seconds(ValueError()) is None


def batch(*texts: str) -> list[Message]:
    return [
        Message(
            id=f"m{i}",
            memory_id="ana",
            role="user",
            content=t,
            channel="im",
            source="message",
            timestamp_ms=T0 + i,
        )
        for i, t in enumerate(texts)
    ]


@pytest.mark.usefixtures("loopback")
def test_a_429_with_retry_after_is_waited_out_then_the_call_succeeds() -> None:
    clock = FakeClock()
    with FakeOpenAIServer() as server:
        server.script(
            Reply(status=429, headers={"Retry-After": "7"}),
            Reply(status=429),  # no header: exponential backoff, 2 s step, jitter 0.5 -> 1.5 s
            Reply(content=EMPTY_ANSWER),
        )
        chat = make_chat_model("fake-model", base_url=server.base_url, api_key="EMPTY", timeout=10)
        extractor = LLMExtractor(chat, method="function_calling")
        pacing = ModelPacing(concurrency=2, initial_backoff_s=1.0, max_attempts=3)
        extractor.gate = ModelGate(pacing, clock=clock.monotonic, sleep=clock.sleep, jitter=lambda: 0.5)
        result = extractor.extract(batch("I'm allergic to peanuts."), [], [], now_ms=T0 + 60_000)
        assert len(server.requests) == 3 and server.pending() == 0
    assert result.candidates == [] and result.model_calls == 1
    assert clock.sleeps == [7.0, 1.5]  # Retry-After honoured; then 2 s * (0.5 + 0.5 * 0.5)
    stats = extractor.gate.stats
    assert (stats.rate_limited, stats.calls, stats.attempts, stats.failed) == (2, 1, 3, 0)


@pytest.mark.usefixtures("loopback")
def test_a_persistent_429_fails_that_memory_clearly_while_the_others_complete(tmp_path: Path) -> None:
    archive = write_archive(tmp_path / "archive", USERS, sessions=3)

    def limited_for_bo(request: dict[str, Any]) -> Reply:
        text = json.dumps(request.get("messages", []))
        if "bo says note" in text:
            return Reply(status=429, headers={"retry-after-ms": "5"})
        if request.get("tools"):
            return Reply(content=EMPTY_ANSWER)
        return Reply(content="The user keeps notes.")

    db = str(tmp_path / "limited.db")
    store = MemoryStore.from_url(db)
    with FakeOpenAIServer(responder=limited_for_bo) as server:
        chat = make_chat_model("fake-model", base_url=server.base_url, api_key="EMPTY", timeout=10)
        gate = ModelGate(ModelPacing(concurrency=3, max_attempts=3))
        replayer = Replayer(llm_lifecycle(store, chat), group_by="user", batch_messages=2, gate=gate)
        with pytest.raises(RateLimitedError, match="HTTP 429 on all 3 attempts") as failure:
            replayer.run([archive])
        bo_requests = [r for r in server.requests if "bo says note" in json.dumps(r["messages"])]
    assert failure.value.attempts == 3
    assert len(bo_requests) == 3  # bounded: bo's first batch, three attempts; its later batches wait
    others = [u for u in USERS if u != "bo"]
    assert all(fully_extracted(store, u) for u in others)
    # bo: the failed batch's messages stored, none extracted (nothing half-written); its later
    # batches were not run, so they cannot be extracted ahead of it.
    assert store.count_messages("bo") == 2 and store.extracted_seq("bo") == 0
    assert store.list_fragments("bo") == []

    with FakeOpenAIServer(responder=lambda r: Reply(content=EMPTY_ANSWER if r.get("tools") else "ok")) as ok:
        chat = make_chat_model("fake-model", base_url=ok.base_url, api_key="EMPTY", timeout=10)
        rerun = Replayer(
            llm_lifecycle(store, chat), group_by="user", batch_messages=2, pacing=ModelPacing(concurrency=3)
        ).run([archive])
    assert rerun.new_messages == 4  # bo's later batches; nothing stored twice
    assert store.count_messages("bo") == 6
    assert all(fully_extracted(store, u) for u in USERS)
    store.close()


# ------------------------------------------------------------------ the command line


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (("--rpm", "60"), "--rpm: needs --model"),
        (("--model", "m", "--model-concurrency", "2", "--concurrency", "3"), "must be at least 3"),
        (("--model", "m", "--model-concurrency", "0"), "--model-concurrency: must be at least 1"),
        (("--model", "m", "--tpm", "0"), "--tpm: must be at least 1"),
    ],
)
def test_bad_pacing_flags_exit_2_naming_the_flag(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], flags: tuple[str, ...], message: str
) -> None:
    from convmem_graph.cli import main

    archive = write_archive(tmp_path / "archive", USERS[:1], sessions=1)
    db = tmp_path / "flags.db"
    code = main(["replay", str(archive), "--no-progress", "--db", str(db), *flags])
    assert code == 2 and message in capsys.readouterr().err
    assert not db.exists()  # refused before the database is created


@pytest.mark.usefixtures("loopback")
def test_convmem_replay_reports_a_persistent_429_and_exits_2(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from convmem_graph.cli import main

    archive = write_archive(tmp_path / "archive", USERS[:3], sessions=1)

    def limited_for_bo(request: dict[str, Any]) -> Reply:
        if "bo says note" in json.dumps(request.get("messages", [])):
            return Reply(status=429, headers={"retry-after-ms": "1"})
        structured = request.get("tools") or request.get("response_format")
        return Reply(content=EMPTY_ANSWER if structured else "The user keeps notes.")

    with FakeOpenAIServer(responder=limited_for_bo) as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        monkeypatch.setenv("OPENAI_API_KEY", "EMPTY")
        db = str(tmp_path / "cli429.db")
        code = main(
            ["replay", str(archive), "--no-progress", "--db", db, "--model", "m", "--model-concurrency", "2"]
            + ["--concurrency", "1"]
        )
        bo_calls = sum("bo says note" in json.dumps(r["messages"]) for r in server.requests)
    err = capsys.readouterr().err
    assert code == 2
    assert "convmem replay: model rate limit: HTTP 429 on all 6 attempts" in err
    assert "for memory 'bo' failed" in caplog.text  # the log (stderr, in a shell) names the memory
    assert bo_calls == 6
    store = MemoryStore.from_url(db)
    assert fully_extracted(store, "ana") and fully_extracted(store, "chen")
    store.close()
