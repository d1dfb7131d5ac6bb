"""Replayer in process: one worker runs batches in the reading thread, several in a thread pool."""

from __future__ import annotations

import json
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from langchain_core.embeddings import Embeddings

from convmem_graph.errors import ExtractionError
from convmem_graph.extractors.heuristic import HeuristicExtractor
from convmem_graph.models import ExtractionResult, Fragment, Message, VariableSpec
from convmem_graph.replay import Replayer
from convmem_graph.runner import Lifecycle
from convmem_graph.store import MemoryStore

T0 = 1_767_268_800_000
SAYINGS = [
    "I'm allergic to peanuts.",
    "My daughter Mia just turned six.",
    "I live in Lyon now.",
    "I work as a nurse at the city hospital.",
]


def write_archive(folder: Path, users: Sequence[str], sessions: int = 3) -> Path:
    """JSON Lines of OpenAI-style requests, one per session, ``user`` naming the memory."""
    folder.mkdir(parents=True, exist_ok=True)
    for f, chunk in enumerate([users[: len(users) // 2], users[len(users) // 2 :]]):
        with (folder / f"part{f}.jsonl").open("w", encoding="utf-8") as fh:
            for s in range(sessions):
                for k, user in enumerate(chunk):
                    base = T0 + s * 86_400_000 + k * 1000
                    messages = [
                        {"role": "user", "content": SAYINGS[(s + k) % len(SAYINGS)], "timestamp": base},
                        {"role": "assistant", "content": f"Noted, {user}.", "timestamp": base + 500},
                    ]
                    fh.write(json.dumps({"user": user, "messages": messages}) + "\n")
    return folder


def stored(store: MemoryStore, users: Sequence[str]) -> dict[str, Any]:
    return {
        u: (
            [m.content for _, m in store.messages_after(u, 0, limit=1000)],
            sorted(f.content for f in store.list_fragments(u)),
            {k: v.value for k, v in store.get_variables(u).items()},
        )
        for u in users
    }


USERS = ["ana", "bo", "chen", "dee", "eli"]


@pytest.mark.parametrize("concurrency", [1, 3])
def test_replay_stores_every_memory(tmp_path: Path, concurrency: int) -> None:
    archive = write_archive(tmp_path / "archive", USERS)
    store = MemoryStore.from_url(str(tmp_path / f"c{concurrency}.db"))
    progress: list[int] = []
    replayer = Replayer(
        Lifecycle(store),
        group_by="user",
        concurrency=concurrency,
        batch_messages=4,  # several batches per memory, which must run in order
        on_progress=lambda n, _r: progress.append(n),
    )
    report = replayer.run([archive])
    assert report.messages_read == report.new_messages == sum(progress) == 30
    assert report.memories == set(USERS)
    result = stored(store, USERS)
    for user in USERS:
        contents, fragments, _ = result[user]
        assert len(contents) == 6 and fragments  # every session, and facts were extracted
    store.close()


def test_one_worker_and_a_thread_pool_give_the_same_memories(tmp_path: Path) -> None:
    archive = write_archive(tmp_path / "archive", USERS)
    results = []
    for concurrency in (1, 3):
        store = MemoryStore.from_url(str(tmp_path / f"same{concurrency}.db"))
        Replayer(Lifecycle(store), group_by="user", concurrency=concurrency, batch_messages=4).run([archive])
        results.append(stored(store, USERS))
        store.close()
    assert results[0] == results[1]


class FailsFor(HeuristicExtractor):
    """The heuristic extractor, except that it fails on the messages of one memory."""

    def __init__(self, memory_id: str) -> None:
        super().__init__()
        self.memory_id = memory_id

    def extract(
        self,
        messages: Sequence[Message],
        existing: Sequence[Fragment],
        specs: Sequence[VariableSpec],
        *,
        now_ms: int,
    ) -> ExtractionResult:
        if any(m.memory_id == self.memory_id for m in messages):
            raise ExtractionError(f"planned failure for {self.memory_id}")
        return super().extract(messages, existing, specs, now_ms=now_ms)


@pytest.mark.parametrize("concurrency", [1, 2])
def test_a_failed_batch_is_raised_and_a_rerun_completes_without_duplicates(
    tmp_path: Path, concurrency: int
) -> None:
    archive = write_archive(tmp_path / "archive", USERS)
    db = str(tmp_path / f"fail{concurrency}.db")
    store = MemoryStore.from_url(db)
    failing = Replayer(Lifecycle(store, extractor=FailsFor("bo")), group_by="user", concurrency=concurrency)
    with pytest.raises(ExtractionError, match="planned failure for bo"):
        failing.run([archive])
    # Other memories committed; bo's messages are stored but not yet extracted.
    assert store.count_messages("ana") == 6
    assert store.count_messages("bo") == 6 and store.list_fragments("bo") == []
    rerun = Replayer(Lifecycle(store), group_by="user", concurrency=concurrency).run([archive])
    assert rerun.new_messages == 0  # nothing stored twice
    assert rerun.files_skipped_done == 1  # the file without bo was marked done the first time
    assert store.list_fragments("bo")  # the rerun caught up with bo's extraction
    expected = MemoryStore.from_url(str(tmp_path / f"clean{concurrency}.db"))
    Replayer(Lifecycle(expected), group_by="user").run([archive])
    assert stored(store, USERS) == stored(expected, USERS)
    store.close()
    expected.close()


def test_workers_fork_only_from_a_single_threaded_parent_on_linux() -> None:
    from convmem_graph.replay import _start_method

    expected = "fork" if sys.platform == "linux" else "spawn"
    assert _start_method() == (expected if threading.active_count() == 1 else "spawn")
    stop = threading.Event()
    other = threading.Thread(target=stop.wait)
    other.start()
    try:
        assert _start_method() == "spawn"  # forking would copy locks other threads may hold
    finally:
        stop.set()
        other.join()


def _start_replayer(lc: Lifecycle, start: threading.Barrier, errors: list[BaseException]) -> None:
    try:
        start.wait(10)
        Replayer(lc)
    except BaseException as exc:  # surfaced by the test
        errors.append(exc)


def test_replayers_starting_at_once_on_a_new_database_create_the_progress_table_once(
    tmp_path: Path,
) -> None:
    for attempt in range(5):
        db = str(tmp_path / f"race{attempt}.db")
        stores = [MemoryStore.from_url(db) for _ in range(4)]
        start = threading.Barrier(len(stores))
        errors: list[BaseException] = []
        threads = [
            threading.Thread(target=_start_replayer, args=(Lifecycle(s), start, errors)) for s in stores
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        assert errors == []
        for s in stores:
            s.close()


def test_worker_progress_is_sent_in_bundles_and_flushed() -> None:
    from convmem_graph.replay import ReplayReport, _ProgressSender

    sent: list[tuple[str, int]] = []

    class Sink:
        def put(self, item: tuple[str, int]) -> None:
            sent.append(item)

    bundled = _ProgressSender(Sink(), interval_s=3600)
    for n in (3, 4, 5):
        bundled(n, ReplayReport())
    assert sent == []  # within the interval nothing is sent
    bundled.flush()
    bundled.flush()  # nothing pending: nothing sent
    assert sent == [("progress", 12)]
    sent.clear()
    every = _ProgressSender(Sink(), interval_s=0)
    for n in (1, 2):
        every(n, ReplayReport())
    assert sent == [("progress", 1), ("progress", 2)]


def test_replay_workers_default_to_the_cores_this_process_may_use(monkeypatch: pytest.MonkeyPatch) -> None:
    import argparse
    import os

    from convmem_graph.cli.replay import _default_workers
    from convmem_graph.replay import default_concurrency

    monkeypatch.setattr(os, "sched_getaffinity", lambda _pid: {0, 1, 2}, raising=False)
    assert default_concurrency() == 3

    def workers(**kw: Any) -> int:
        args = {"db": "replay.db", "memory": None, "model_concurrency": None, **kw}
        return _default_workers(argparse.Namespace(**args))

    assert workers() == 3
    assert workers(model_concurrency=2) == 2  # --model-concurrency is split across workers
    assert workers(memory="one") == 1  # one memory is replayed in order by one worker
    assert workers(db=":memory:") == 1  # workers cannot share an in-memory database


class _Lengths(Embeddings):
    """Instant and deterministic: a text's length and its count of vowels."""

    model = "lengths-v1"

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [[float(len(t)), float(sum(c in "aeiou" for c in t)), 1.0] for t in texts]

    def embed_query(self, text: str) -> list[float]:
        return self.embed_documents([text])[0]


@pytest.mark.parametrize("concurrency", [1, 3])
def test_replay_embeds_each_memory_after_its_runs(tmp_path: Path, concurrency: int) -> None:
    archive = write_archive(tmp_path / "archive", USERS)
    store = MemoryStore.from_url(str(tmp_path / "e.db"))
    replayer = Replayer(
        Lifecycle(store), group_by="user", concurrency=concurrency, batch_messages=4, embeddings=_Lengths()
    )
    report = replayer.run([archive])
    assert report.embedded_turns == report.new_messages == 30
    assert report.as_dict()["embedded_turns"] == 30
    assert all(store.missing_turn_vectors(u, "lengths-v1") == [] for u in USERS)
    store.close()


def test_replay_goes_on_when_the_embedding_model_fails(tmp_path: Path) -> None:
    class Broken(_Lengths):
        def embed_documents(self, texts: list[str]) -> list[list[float]]:
            raise RuntimeError("model down")

    archive = write_archive(tmp_path / "archive", USERS)
    store = MemoryStore.from_url(str(tmp_path / "b.db"))
    report = Replayer(Lifecycle(store), group_by="user", embeddings=Broken()).run([archive])
    assert report.new_messages == 30 and report.embedded_turns == 0
    assert len(store.missing_turn_vectors("ana", "lengths-v1", limit=100)) == 6  # lexical still
    assert "embedded_turns" not in Replayer(Lifecycle(store), group_by="user").run([archive]).as_dict()
    store.close()
