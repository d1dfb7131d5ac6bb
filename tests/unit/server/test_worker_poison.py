"""One poison never stops the serve worker's queue (issue 21 item 2), on SQLite.

The worker runs in-process on a temporary SQLite file; deliveries are written to the inbox the way
the routers write them. A poison among 100 good deliveries for 10 memories: the 100 are stored, the
poison ends in dead letters (or, where SQLite stores it fine, is stored), nothing stays pending,
also after a restart. A failing store call injected by monkeypatch proves the N-attempts path,
the count surviving a restart, and the one-by-one isolation of a failed batch.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from convmem_graph.config import MemoryConfig
from convmem_graph.memory import ConvMemory
from convmem_graph.models import Message
from convmem_graph.server.inbox import Inbox
from convmem_graph.server.settings import ServeSettings
from convmem_graph.server.webhooks import delivery_key
from convmem_graph.server.worker import InboxWorker, is_data_error, is_outage

BOT = "ai_xiaoyu_bot"
PROXY_MEMORIES = [f"pm{i}" for i in range(5)]
TRTC_USERS = [f"tu{i}" for i in range(5)]
PER_MEMORY = 10
T0 = 1_767_272_400_000


def proxy_body(memory_id: str, i: int, text: str | None = None) -> str:
    """A finished proxy turn as the proxy stores it: one user message."""
    message = Message(
        id=f"{memory_id}-turn-{i}",
        role="user",
        content=text if text is not None else f"第{i}句：我喜欢喝茶。",
        channel="api",
        source="message",
        timestamp_ms=T0 + i * 1000,
    )
    return json.dumps({"messages": [message.model_dump(mode="json")]}, ensure_ascii=False)


def trtc_body(task_id: str, user_id: str, i: int) -> str:
    """A TRTC 903 (one finished sentence) of ``user_id`` in ``task_id``."""
    doc = {
        "EventGroupId": 9,
        "EventType": 903,
        "CallbackTs": T0 + i * 1000 + 40,
        "EventInfo": {
            "EventMsTs": T0 + i * 1000,
            "TaskId": task_id,
            "RoomId": f"room_{task_id}",
            "RoomIdType": 1,
            "Payload": {
                "UserId": user_id,
                "Text": f"第{i}句话，我住在杭州。",
                "StartTimeMs": i * 1000,
                "EndTimeMs": i * 1000 + 800,
                "RoundId": f"{task_id}-r{i:04d}",
            },
        },
    }
    return json.dumps(doc, ensure_ascii=False)


def add_proxy(inbox: Inbox, memory_id: str, i: int, text: str | None = None) -> None:
    """Store a proxy turn like the proxy does (key ``proxy:<request id>``)."""
    assert inbox.add(
        "proxy", f"proxy:req-{memory_id}-{i}", proxy_body(memory_id, i, text), memory_id=memory_id
    )


def add_trtc(inbox: Inbox, task_id: str, user_id: str, i: int) -> None:
    """Store a signed TRTC delivery like the webhook router does."""
    body = trtc_body(task_id, user_id, i)
    doc = json.loads(body)
    assert inbox.add("trtc", delivery_key("trtc", doc, body.encode()), body, event=903, task_id=task_id)


def add_good(inbox: Inbox, rounds: range, poison: Callable[[], None] | None = None) -> None:
    """Round-robin deliveries for 10 memories (5 proxy, 5 TRTC); ``poison`` goes in the middle."""
    middle = rounds.start + len(rounds) // 2
    for i in rounds:
        if i == middle and poison is not None:
            poison()
        for memory_id in PROXY_MEMORIES:
            add_proxy(inbox, memory_id, i)
        for user in TRTC_USERS:
            add_trtc(inbox, f"task_{user}", user, i)


def stored_counts(mem: ConvMemory) -> dict[str, int]:
    """Messages stored per good memory."""
    return {m: mem.store.count_messages(m) for m in PROXY_MEMORIES + TRTC_USERS}


def open_memory(db: str) -> ConvMemory:
    """The memory the worker runs on (bot id known, as ``convmem serve`` opens it)."""
    return ConvMemory.open(db, config=MemoryConfig(bot_ids=[BOT]))


def serve_settings(db: str, **overrides: Any) -> ServeSettings:
    """Settings of the worker under test (the TRTC bot is known, so a 903 names its human)."""
    return ServeSettings(_env_file=None, db=db, bot_ids=[BOT], **overrides)


def drain(mem: ConvMemory, settings: ServeSettings, *, timeout: float = 30.0, **kwargs: Any) -> float:
    """Start a worker (a 'restart' each call), wait until nothing is pending, stop it; return seconds."""
    inbox = Inbox(mem.store)
    worker = InboxWorker(mem, inbox, settings, **kwargs)
    started = time.monotonic()
    worker.start()
    try:
        assert worker.wait_idle(timeout), f"still pending after {timeout} s: {inbox.counts()}"
    finally:
        worker.stop(timeout=10)
    return time.monotonic() - started


def run_poison_scenario(db: str, add_poison: Callable[[Inbox], None], *, must_dead_letter: bool) -> None:
    """100 good deliveries with a poison among them, then a restart with 10 more and a second poison.

    Asserts: every good one stored, the poison stored or (``must_dead_letter``) in dead letters
    with a reason, nothing pending, on the first run and after a restart.
    """
    settings = serve_settings(db)
    with open_memory(db) as mem:
        inbox = Inbox(mem.store)
        add_good(inbox, range(PER_MEMORY), lambda: add_poison(inbox))
        assert inbox.refresh_count() == 101
        drain(mem, settings)
        assert stored_counts(mem) == dict.fromkeys(PROXY_MEMORIES + TRTC_USERS, PER_MEMORY)
        assert inbox.refresh_count() == 0
        letters = mem.store.list_dead_letters()
        counts = inbox.counts()
        if must_dead_letter:
            assert len(letters) == 1, letters
        assert counts.get("done", 0) + counts.get("failed", 0) == 101
        assert counts.get("failed", 0) == len(letters) <= 1
        for letter in letters:
            assert letter.error and letter.source.startswith("serve inbox")
    # A restart: the same database, a new memory and worker; more deliveries and another poison.
    with open_memory(db) as mem:
        inbox = Inbox(mem.store)
        assert inbox.refresh_count() == 0
        add_good(inbox, range(PER_MEMORY, PER_MEMORY + 1), lambda: None)
        add_poison_again = _again(add_poison)
        add_poison_again(inbox)
        drain(mem, settings)
        assert stored_counts(mem) == dict.fromkeys(PROXY_MEMORIES + TRTC_USERS, PER_MEMORY + 1)
        assert inbox.refresh_count() == 0
        if must_dead_letter:
            assert len(mem.store.list_dead_letters()) == 2


def _again(add_poison: Callable[[Inbox], None]) -> Callable[[Inbox], None]:
    """The same kind of poison with another key (a new delivery, not a retry)."""
    return lambda inbox: add_poison(inbox, again=True)  # type: ignore[call-arg]


def nul_proxy_poison(inbox: Inbox, again: bool = False) -> None:
    """A proxy turn whose user text holds NUL (PostgreSQL refuses it)."""
    add_proxy(inbox, "pm_nul", 900 + int(again), text="坏\u0000字符")


def long_user_poison(inbox: Inbox, again: bool = False) -> None:
    """A TRTC 903 whose UserId is 300 characters (over every id column's 256)."""
    add_trtc(inbox, f"task_long{int(again)}", "u" * 300, 900 + int(again))


@pytest.fixture
def db(tmp_path: Path) -> str:
    return str(tmp_path / "serve.db")


@pytest.mark.parametrize("poison", [nul_proxy_poison, long_user_poison], ids=["nul-text", "long-user-id"])
def test_a_poison_among_100_deliveries_never_blocks_the_queue(
    db: str, poison: Callable[[Inbox], None]
) -> None:
    # SQLite stores NUL text as it is; an over-long id fails the identifier rule: a dead letter.
    run_poison_scenario(db, poison, must_dead_letter=poison is long_user_poison)


def _failing_ingest(
    mem: ConvMemory, bad: Callable[[str], bool], error: Callable[[], Exception]
) -> list[list[str]]:
    """Make ``mem.ingest`` raise ``error()`` whenever one of its inputs is a delivery ``bad`` names.

    Returns:
        The input names of every call, in order.
    """
    calls: list[list[str]] = []
    real = mem.ingest

    def ingest(memory_id: str, inputs: Any, **kwargs: Any) -> Any:
        names = [getattr(i, "name", "") for i in inputs]
        calls.append(names)
        if any(bad(n) for n in names):
            raise error()
        return real(memory_id, inputs, **kwargs)

    mem.ingest = ingest  # type: ignore[method-assign]
    return calls


def test_a_delivery_failing_with_any_error_goes_to_dead_letters_after_n_attempts_across_a_restart(
    db: str,
) -> None:
    settings = serve_settings(db, worker_max_attempts=4)
    with open_memory(db) as mem:
        inbox = Inbox(mem.store)
        add_good(inbox, range(PER_MEMORY))
        bad_seq = [d for d in inbox.pending(1000) if d.vendor == "proxy"][23].seq  # one in the middle
        bad_memory = inbox.get([bad_seq])[0].memory_id
        _failing_ingest(mem, lambda n: n == f"proxy turn {bad_seq}", lambda: RuntimeError("flaky"))
        worker = InboxWorker(mem, inbox, settings, retry_base_s=0.05)
        # Two attempts, then a "crash": the count must survive in the database.
        deadline = time.monotonic() + 30
        while not _note(mem, bad_seq).startswith("attempt 2 ") and time.monotonic() < deadline:
            worker.run_once()
            time.sleep(0.02)
        assert inbox.counts().get("pending") == 1 + sum(
            1 for d in inbox.pending(1000) if d.memory_id == bad_memory and d.seq > bad_seq
        )
        note = _note(mem, bad_seq)
        assert note.startswith("attempt 2 of 4 failed: RuntimeError: flaky"), note
        # Later turns of that memory wait behind it; the other memories are all stored.
        others = {m: n for m, n in stored_counts(mem).items() if m != bad_memory}
        assert others == dict.fromkeys(others, PER_MEMORY)
    with open_memory(db) as mem:  # restart
        calls = _failing_ingest(mem, lambda n: n == f"proxy turn {bad_seq}", lambda: RuntimeError("flaky"))
        seconds = drain(mem, settings, retry_base_s=0.05)
        # Attempts 3 and 4 of 4 (the delivery on its own), not 4 more.
        assert calls.count([f"proxy turn {bad_seq}"]) == 2
        [letter] = mem.store.list_dead_letters()
        assert letter.error == "failed 4 times, last: RuntimeError: flaky"
        assert letter.memory_id == bad_memory and letter.path == f"inbox seq {bad_seq}"
        assert stored_counts(mem)[bad_memory] == PER_MEMORY - 1
        assert Inbox(mem.store).counts() == {"done": 99, "failed": 1}
        assert seconds < 30


def test_a_data_error_in_a_batch_is_isolated_at_once_and_the_rest_of_the_memory_stored(db: str) -> None:
    from sqlalchemy.exc import DataError

    settings = serve_settings(db)
    with open_memory(db) as mem:
        inbox = Inbox(mem.store)
        add_good(inbox, range(PER_MEMORY))
        trtc = [d for d in inbox.pending(1000) if d.vendor == "trtc" and d.task_id == "task_tu2"]
        bad = trtc[4].seq
        bad_name = "trtc task task_tu2"
        bad_body = trtc[4].body

        def refuse(memory_id: str, inputs: Any, **kwargs: Any) -> Any:
            for raw in inputs:
                if raw.name == bad_name and bad_body in raw.data["deliveries"]:
                    raise DataError(
                        "INSERT ...", {}, ValueError("value too long for type character varying(256)")
                    )
            return real(memory_id, inputs, **kwargs)

        real = mem.ingest
        mem.ingest = refuse  # type: ignore[method-assign]
        drain(mem, settings)
        counts = stored_counts(mem)
        assert counts["tu2"] == PER_MEMORY - 1 and sum(counts.values()) == 99
        [letter] = mem.store.list_dead_letters()
        assert letter.memory_id == "tu2" and letter.path == f"inbox seq {bad}"
        assert "value too long" in letter.error and letter.raw == bad_body
        assert inbox.refresh_count() == 0


def test_an_outage_is_retried_and_never_counted(db: str) -> None:
    from sqlalchemy.exc import OperationalError

    settings = serve_settings(db, worker_max_attempts=1)
    with open_memory(db) as mem:
        inbox = Inbox(mem.store)
        add_proxy(inbox, "pm0", 1)
        failures = iter(range(3))
        real = mem.ingest

        def down(memory_id: str, inputs: Any, **kwargs: Any) -> Any:
            if next(failures, None) is not None:
                raise OperationalError("SELECT 1", {}, ConnectionError("server closed the connection"))
            return real(memory_id, inputs, **kwargs)

        mem.ingest = down  # type: ignore[method-assign]
        drain(mem, settings, on_error_delay_s=0.05)
        assert mem.store.count_messages("pm0") == 1
        assert mem.store.list_dead_letters() == []


def test_errors_are_classified() -> None:
    from pydantic import BaseModel, ValidationError
    from sqlalchemy.exc import DataError, IntegrityError, OperationalError, ProgrammingError, StatementError

    class _M(BaseModel):
        x: int

    try:
        _M.model_validate({"x": "no"})
    except ValidationError as exc:
        validation = exc
    assert is_data_error(validation)
    assert is_data_error(UnicodeEncodeError("utf-8", "\ud800", 0, 1, "surrogates not allowed"))
    assert is_data_error(DataError("s", {}, Exception("unsupported Unicode escape sequence")))
    assert is_data_error(IntegrityError("s", {}, Exception("duplicate key")))
    assert is_data_error(StatementError("bind", "s", {}, UnicodeEncodeError("utf-8", "\ud800", 0, 1, "x")))
    outage = OperationalError("s", {}, Exception("connection refused"))
    assert is_outage(outage) and not is_data_error(outage)
    assert not is_data_error(ProgrammingError("s", {}, Exception("no such table")))
    assert not is_data_error(RuntimeError("flaky")) and not is_outage(RuntimeError("flaky"))


def _note(mem: ConvMemory, seq: int) -> str:
    from sqlalchemy import select

    from convmem_graph.store.registry import inbox_table

    with mem.store.read() as conn:
        return str(conn.execute(select(inbox_table.c.note).where(inbox_table.c.seq == seq)).scalar_one())


@pytest.fixture(autouse=True)
def _no_serve_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for var in ("CONVMEM_BOT_IDS", "CONVMEM_WORKER_MAX_ATTEMPTS", "CONVMEM_WORKER_BATCH"):
        monkeypatch.delenv(var, raising=False)
    yield


def test_a_delivery_failing_before_its_memory_is_known_is_the_users_dead_letter(db: str) -> None:
    """Issue 20 item 6: the dead letter is attributed from the TRTC UserId, so a delete finds it."""
    from sqlalchemy.exc import DataError

    settings = serve_settings(db)
    with open_memory(db) as mem:
        inbox = Inbox(mem.store)
        add_trtc(inbox, "task_refused", "tu_refused", 1)  # its task row is refused (NUL in a RoomId, say)
        add_trtc(inbox, "task_fine", "tu_fine", 2)
        real = inbox.save_task

        def refuse(info: Any) -> None:
            if info.task_id == "task_refused":
                raise DataError("INSERT ...", {}, ValueError("invalid byte sequence: 0x00"))
            real(info)

        inbox.save_task = refuse  # type: ignore[method-assign]
        worker = InboxWorker(mem, inbox, settings)
        while worker.run_once():
            pass
        [letter] = mem.store.list_dead_letters()
        assert letter.memory_id == "tu_refused" and "0x00" in letter.error
        assert mem.store.count_messages("tu_fine") == 1
        mem.delete("tu_refused")
        assert mem.store.list_dead_letters() == []
