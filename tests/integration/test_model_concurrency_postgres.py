"""Replay with model calls at once on PostgreSQL: K calls in flight, each memory in order, and a
persistent 429 that stops one memory while the others complete (fake chat model in process)."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import BaseMessage
from langchain_core.outputs import ChatResult

from convmem_graph.config import MemoryConfig
from convmem_graph.extractors.pacing import ModelPacing, RateLimitedError
from convmem_graph.memory import ConvMemory
from convmem_graph.replay import Replayer
from tests.fakes.concurrent_chat import USERS, InFlightFake, Limited, fully_extracted, write_archive

CONFIG = MemoryConfig(extract_after_user_messages=1, structured_output_method="function_calling")


class LimitedFor(InFlightFake):
    """The in-flight fake, answering 429 to every call about one memory."""

    limited: str = ""

    def _generate(
        self, messages: list[BaseMessage], stop: list[str] | None = None, run_manager: Any = None, **kw: Any
    ) -> ChatResult:
        if any(f"{self.limited} says note" in m.text for m in messages):
            raise Limited({"retry-after-ms": "1"})
        return super()._generate(messages, stop, run_manager, **kw)


def _users() -> list[str]:
    run = uuid.uuid4().hex[:8]  # the schema is shared by the session's tests
    return [f"mc{run}_{u}" for u in USERS]


def test_k_calls_at_once_keep_each_memory_in_order_on_postgresql(pg_url: str, tmp_path: Path) -> None:
    users = _users()
    archive = write_archive(tmp_path / "archive", users, sessions=4)
    chat = InFlightFake(hold_until=4)
    with ConvMemory.open(pg_url, model=chat, config=CONFIG) as mem:
        mem.lifecycle.durability = "exit"  # as convmem replay
        replayer = Replayer(
            mem.lifecycle, group_by="user", batch_messages=2, pacing=ModelPacing(concurrency=4)
        )
        report = replayer.run([archive])
        assert report.new_messages == 2 * 4 * len(users)
        assert chat.state["peak"] == 4
        notes: dict[str, list[int]] = {}
        for user, number in chat.state["notes"]:
            notes.setdefault(user, []).append(int(number))
        assert notes == {u: [0, 1, 2, 3] for u in users}
        assert all(fully_extracted(mem.store, u) for u in users)


def test_a_persistent_429_stops_one_memory_and_a_rerun_finishes_it_on_postgresql(
    pg_url: str, tmp_path: Path
) -> None:
    users = _users()
    limited = users[1]
    archive = write_archive(tmp_path / "archive", users, sessions=3)
    pacing = ModelPacing(concurrency=3, max_attempts=3)
    with ConvMemory.open(pg_url, model=LimitedFor(limited=limited), config=CONFIG) as mem:
        mem.lifecycle.durability = "exit"
        with pytest.raises(RateLimitedError, match="on all 3 attempts"):
            Replayer(mem.lifecycle, group_by="user", batch_messages=2, pacing=pacing).run([archive])
        assert all(fully_extracted(mem.store, u) for u in users if u != limited)
        assert not fully_extracted(mem.store, limited) and mem.store.list_fragments(limited) == []
    with ConvMemory.open(pg_url, model=InFlightFake(), config=CONFIG) as mem:
        mem.lifecycle.durability = "exit"
        Replayer(mem.lifecycle, group_by="user", batch_messages=2, pacing=pacing).run([archive])
        assert all(fully_extracted(mem.store, u) for u in users)
        assert mem.store.count_messages(limited) == 6  # each message once


def test_more_calls_than_the_postgresql_pool_holds_are_reported(
    pg_url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from convmem_graph.store.engine import POOL_DEFAULTS as pools  # ConvMemory.open without pools=

    room = pools.store_size + pools.store_overflow  # each run in progress keeps one (its transaction)
    archive = write_archive(tmp_path / "archive", _users()[:1], sessions=1)
    with ConvMemory.open(pg_url, model=InFlightFake(), config=CONFIG) as mem:
        with caplog.at_level("WARNING", logger="convmem_graph.replay"):
            Replayer(mem.lifecycle, group_by="user", pacing=ModelPacing(concurrency=room + 1)).run([archive])
        assert (
            f"{room + 1} model calls at once asked, but the store's connection pool holds {room}"
            in caplog.text
        )
        caplog.clear()
        with caplog.at_level("WARNING", logger="convmem_graph.replay"):
            Replayer(mem.lifecycle, group_by="user", pacing=ModelPacing(concurrency=room)).run([archive])
        assert "connection pool" not in caplog.text
