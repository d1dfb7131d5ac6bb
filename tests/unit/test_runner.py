"""The lifecycle graph end to end on the shared vendor fixtures, plus its guarantees.

Idempotence, crash-and-resume, isolation, bounded checkpoints, no transcript in state, and
conditional edges that skip work.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from langgraph.checkpoint.sqlite import SqliteSaver
from sqlalchemy import text

from convmem_graph.checkpoints import delete_memory_checkpoints
from convmem_graph.config import MemoryConfig
from convmem_graph.errors import ExtractionError
from convmem_graph.extractors.heuristic import HeuristicExtractor
from convmem_graph.models import ExtractionResult, Fragment, Message, VariableSpec
from convmem_graph.runner import Lifecycle
from convmem_graph.state import RawInput
from convmem_graph.store import MemoryStore
from tests.conftest import load_fixture

FIXTURE_FILES = (
    "tencent_im_roammsg_exchange.json",
    "trtc_callbacks_one_call.json",
    "agora_history_response.json",
    "agora_webhook_103_agent_history.json",
)
# 2026-01-02 00:00 UTC: right after the story, so its transient facts are still current.
STORY_NOW = 1_767_312_000_000


def _inputs() -> list[RawInput]:
    return [RawInput(load_fixture(name), name=name) for name in FIXTURE_FILES]


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "mem.db"


@pytest.fixture
def lifecycle(db: Path) -> Iterator[Lifecycle]:
    store = MemoryStore.from_url(str(db))
    saver = SqliteSaver(sqlite3.connect(db, check_same_thread=False))
    # A fixed clock, so transient facts of the 2026-01 story are not expired.
    lc = Lifecycle(store, saver, config=MemoryConfig(bot_ids=["ai_xiaoyu_bot"]), clock=lambda: STORY_NOW)
    yield lc
    store.close()


def _run(lc: Lifecycle, memory_id: str, inputs: Sequence[RawInput] = (), **kw: Any) -> Any:
    return lc.run(memory_id, inputs, **kw)


def _contents(store: MemoryStore, memory_id: str) -> list[str]:
    return [f.content for f in store.list_fragments(memory_id, status="active")]


def test_story_fixtures_planted_facts(lifecycle: Lifecycle) -> None:
    result = _run(lifecycle, "mem_u10086", _inputs(), session_ended=True)
    store = lifecycle.store
    assert result.ingested == 4
    assert result.dead_letters == 0
    facts = " | ".join(_contents(store, "mem_u10086"))
    for planted in (
        "芒果" if "芒果" in facts else "mango",
        "香菜",
        "杭州",
        "产品经理",
        "跑步",
        "年糕",
        "成都",
    ):
        assert planted in facts, planted
    assert "西湖" in facts
    assert "下雨" not in facts and "weather" not in facts.lower()
    assert "抱歉" not in facts and "你还在吗" not in facts
    variables = store.get_variables("mem_u10086")
    assert variables["birth_year"].value == 1996
    assert variables["city"].value == "杭州"
    assert variables["occupation"].value == "产品经理"
    assert variables["name"].value == "林晓"
    assert variables["birth_year"].fragment_ids, "inferred values name the fragments behind them"
    spicy = [f for f in store.list_fragments("mem_u10086") if "辣" in f.content]
    assert spicy and all(f.transient and f.expires_at for f in spicy)
    summary = store.get_summary("mem_u10086")
    assert summary is not None and 0 < summary.tokens <= 300
    assert "今天杭州下雨了" not in summary.text


def test_reingest_adds_nothing(lifecycle: Lifecycle) -> None:
    _run(lifecycle, "m1", _inputs())
    store = lifecycle.store
    before = (
        store.count_messages("m1"),
        sorted(f.id for f in store.list_fragments("m1", status=None)),
        len(store.list_audit("m1", limit=10_000)),
    )
    again = _run(lifecycle, "m1", _inputs())
    assert again.new_messages == 0
    after = (
        store.count_messages("m1"),
        sorted(f.id for f in store.list_fragments("m1", status=None)),
        len(store.list_audit("m1", limit=10_000)),
    )
    assert after == before


def test_memories_are_isolated(lifecycle: Lifecycle) -> None:
    _run(lifecycle, "user%", [RawInput([{"role": "user", "content": "I'm allergic to peanuts."}])])
    _run(lifecycle, "user_", [RawInput([{"role": "user", "content": "My name is Bob."}])])
    store = lifecycle.store
    assert all("peanut" not in c for c in _contents(store, "user_"))
    assert all("Bob" not in c for c in _contents(store, "user%"))
    assert store.count_messages("user") == 0 if _has_memory(store, "user") else True


def _has_memory(store: MemoryStore, memory_id: str) -> bool:
    return any(m.memory_id == memory_id for m in store.list_memories(limit=1000))


class FlakyExtractor:
    """Fails the first ``failures`` calls, then behaves like the heuristic extractor."""

    name = "flaky"

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.calls = 0
        self.inner = HeuristicExtractor()

    def extract(
        self,
        messages: Sequence[Message],
        existing: Sequence[Fragment],
        specs: Sequence[VariableSpec],
        *,
        now_ms: int,
    ) -> ExtractionResult:
        self.calls += 1
        if self.calls <= self.failures:
            raise ExtractionError("model kept returning invalid output")
        return self.inner.extract(messages, existing, specs, now_ms=now_ms)


def _state_of(store: MemoryStore, memory_id: str) -> tuple[int, list[str], dict[str, Any]]:
    return (
        store.count_messages(memory_id),
        sorted(f.content for f in store.list_fragments(memory_id, status=None)),
        {k: v.value for k, v in store.get_variables(memory_id).items()},
    )


def test_crash_then_resume_equals_clean_run(tmp_path: Path) -> None:
    clean_store = MemoryStore.from_url(str(tmp_path / "clean.db"))
    Lifecycle(clean_store).run("m", _inputs())

    store = MemoryStore.from_url(str(tmp_path / "crash.db"))
    saver = SqliteSaver(sqlite3.connect(tmp_path / "crash.db", check_same_thread=False))
    flaky = FlakyExtractor(failures=1)
    lc = Lifecycle(store, saver, extractor=flaky)
    with pytest.raises(ExtractionError):
        lc.run("m", _inputs())
    # What was ingested before the failing step stays stored; nothing was extracted.
    assert store.count_messages("m") == clean_store.count_messages("m")
    assert store.list_fragments("m") == []
    # The next run on that memory (no new input) resumes from the store's cursors.
    lc.run("m")
    assert _state_of(store, "m") == _state_of(clean_store, "m")
    # And a further re-ingest of the same payloads changes nothing.
    lc.run("m", _inputs())
    assert _state_of(store, "m") == _state_of(clean_store, "m")


def test_checkpoints_bounded_and_hold_no_transcript(lifecycle: Lifecycle, db: Path) -> None:
    for i in range(8):
        batch = [{"role": "user", "content": f"我今天跑了{i}公里，这句话很长很长很长 secret-marker-{i}"}]
        _run(lifecycle, "m", [RawInput(batch)])
    conn = sqlite3.connect(db)
    count = conn.execute("SELECT count(*) FROM checkpoints WHERE thread_id = 'convmem:m'").fetchone()[0]
    assert 0 < count <= lifecycle.config.keep_checkpoints
    assert conn.execute("SELECT count(*) FROM checkpoints WHERE thread_id = 'm'").fetchone()[0] == 0
    state = lifecycle.graph.get_state({"configurable": {"thread_id": "convmem:m"}}).values
    dumped = json.dumps(state, ensure_ascii=False, default=str)
    assert "secret-marker" not in dumped
    assert state["memory_id"] == "m"
    # The run's message ids are in its output only; the checkpoint keeps their count.
    assert state["new_messages"] == 1 and "new_message_ids" not in state


def test_conditional_edges_skip_idle_steps(lifecycle: Lifecycle) -> None:
    _run(lifecycle, "m", [RawInput([{"role": "user", "content": "I live in Berlin."}])])
    steps: list[str] = []
    ctx = lifecycle._context((), (), None, False)
    config = {"configurable": {"thread_id": "m"}}
    for chunk in lifecycle.graph.stream({"memory_id": "m"}, config, context=ctx, stream_mode="updates"):
        steps.extend(chunk)
    assert steps == ["ingest", "normalize", "inject"]


def test_assistant_only_batches_make_no_extractor_call(tmp_path: Path) -> None:
    store = MemoryStore.from_url(str(tmp_path / "a.db"))
    flaky = FlakyExtractor(failures=0)
    Lifecycle(store, extractor=flaky).run("m", [RawInput([{"role": "assistant", "content": "Hello there!"}])])
    assert flaky.calls == 0
    assert store.extracted_seq("m") == store.max_seq("m") > 0


def test_dead_letters_for_unreadable_payloads(lifecycle: Lifecycle) -> None:
    result = _run(
        lifecycle,
        "m",
        [
            RawInput({"MsgList": "not a list"}, source="tencent_im", name="bad.json"),
            RawInput(load_fixture(FIXTURE_FILES[0])),
        ],
    )
    assert result.dead_letters == 1
    assert result.errors and result.errors[0]["name"] == "bad.json"
    assert result.new_messages > 0
    letters = lifecycle.store.list_dead_letters("m")
    assert len(letters) == 1 and letters[0].source == "tencent_im"


def test_delete_memory_removes_rows_and_checkpoints(lifecycle: Lifecycle, db: Path) -> None:
    _run(lifecycle, "gone", _inputs())
    _run(lifecycle, "kept", [RawInput([{"role": "user", "content": "I like tea."}])])
    assert lifecycle.checkpointer is not None
    assert lifecycle.store.delete_memory("gone")
    delete_memory_checkpoints(lifecycle.checkpointer, "gone")  # what ConvMemory.delete does
    with lifecycle.store.engine.connect() as conn:
        tables = [
            r[0]
            for r in conn.execute(
                text("SELECT name FROM sqlite_master WHERE type='table' AND name LIKE 'cm_%'")
            )
        ]
        for table in tables:
            cols = [r[1] for r in conn.execute(text(f"PRAGMA table_info({table})"))]
            if "memory_id" in cols:
                n = conn.execute(text(f"SELECT count(*) FROM {table} WHERE memory_id = 'gone'")).scalar()
                assert n == 0, table
    conn2 = sqlite3.connect(db)
    gone = "SELECT count(*) FROM checkpoints WHERE thread_id = 'convmem:gone'"
    kept = "SELECT count(*) FROM checkpoints WHERE thread_id = 'convmem:kept'"
    assert conn2.execute(gone).fetchone()[0] == 0
    assert conn2.execute(kept).fetchone()[0] > 0
    assert _contents(lifecycle.store, "kept")


def test_inject_caches_snapshot_and_payloads(lifecycle: Lifecycle) -> None:
    result = _run(
        lifecycle,
        "mem_u10086",
        _inputs(),
        vendors=["openai", "trtc-llmconfig"],
        inject_options={"openai": {"persona": "你是小雨。"}},
    )
    system = result.payloads["openai"][0]
    assert system["role"] == "system" and "<user_memory>" in system["content"]
    llm_config = json.loads(result.payloads["trtc-llmconfig"])
    assert "<user_memory>" in llm_config["SystemPrompt"]
    snapshot = lifecycle.store.load_snapshot("mem_u10086")
    assert snapshot is not None and snapshot.variables["city"].value == "杭州"
    assert len(snapshot.recent) <= 30


def test_trtc_callbacks_one_webhook_at_a_time_equal_the_batch(tmp_path: Path) -> None:
    # Live use: every TRTC callback arrives as its own webhook and its own lifecycle run.
    deliveries = load_fixture("trtc_callbacks_one_call.json")["deliveries"]
    config = MemoryConfig(bot_ids=["ai_xiaoyu_bot"])
    batch_store = MemoryStore.from_url(str(tmp_path / "batch.db"))
    Lifecycle(batch_store, config=config).run(
        "m", [RawInput([d["raw_body"] for d in deliveries], source="trtc")]
    )
    live_store = MemoryStore.from_url(str(tmp_path / "live.db"))
    live = Lifecycle(live_store, config=config)
    for d in deliveries:
        live.run("m", [RawInput(d["raw_body"], source="trtc")])

    def turns(store: MemoryStore) -> list[tuple[str, str]]:
        return [(m.role, m.content) for m in store.recent_messages("m", 50)]

    assert ("user", "我刚跑完步回来。今天跑了八公里，配速六分半。") in turns(live_store)
    assert ("assistant", "哇，八公里！六分半的配速很稳呀，跑完记得拉伸一下腿。") in turns(live_store)
    assert [c for _, c in turns(live_store)] == [c for _, c in turns(batch_store)]


def test_a_run_stopped_before_variables_are_inferred_is_completed_by_the_next(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    clean = MemoryStore.from_url(str(tmp_path / "clean.db"))
    Lifecycle(clean).run("m", _inputs())

    store = MemoryStore.from_url(str(tmp_path / "stopped.db"))
    lc = Lifecycle(store)
    real = store.commit_inferred_variables

    def crash(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("process killed")

    monkeypatch.setattr(store, "commit_inferred_variables", crash)
    with pytest.raises(RuntimeError):
        lc.run("m", _inputs())
    assert store.list_fragments("m") and not store.get_variables("m")
    monkeypatch.setattr(store, "commit_inferred_variables", real)
    lc.run("m")  # nothing new to extract: the facts changed since the last inference still count
    assert _state_of(store, "m") == _state_of(clean, "m")


def test_durability_defaults_to_exit_and_a_bad_one_is_refused(tmp_path: Path) -> None:
    store = MemoryStore.from_url(str(tmp_path / "d.db"))
    try:
        lc = Lifecycle(store)
        assert lc.durability == "exit"
        lc.durability = "sync"  # still selectable
        assert lc.durability == "sync"
        with pytest.raises(ValueError, match="durability must be one of 'sync', 'async', 'exit', not 'Sync'"):
            lc.durability = "Sync"  # type: ignore[assignment]
        with pytest.raises(ValueError, match="durability must be one of"):
            Lifecycle(store, durability="never")  # type: ignore[arg-type]
    finally:
        store.close()


def test_run_result_is_the_checkpointed_end_state(lifecycle: Lifecycle) -> None:
    """The run reads only RESULT_KEYS of its end state; they hold what the whole end state holds."""
    from convmem_graph.runner import RESULT_KEYS, RunResult
    from convmem_graph.state import MemoryState

    assert set(RESULT_KEYS) <= set(MemoryState.__annotations__)
    runs = [
        [RawInput(load_fixture(FIXTURE_FILES[0]))],
        [RawInput({"MsgList": "not a list"}, source="tencent_im", name="bad.json")],
        [RawInput([{"role": "user", "content": "I live in Berlin and I'm allergic to mango."}])],
        [],
    ]
    for inputs in runs:
        result = _run(lifecycle, "m", inputs, vendors=["openai"])
        end = lifecycle.graph.get_state({"configurable": {"thread_id": "convmem:m"}}).values
        assert set(RESULT_KEYS) <= set(end)
        whole = RunResult(
            memory_id="m",
            ingested=end["ingested"],
            dead_letters=end["dead_letters"],
            skipped=end["skipped"],
            errors=end["errors"],
            error_count=end["error_count"],
            new_messages=end["new_messages"],
            fragment_ops=end["fragment_ops"],
            variables_changed=end["variables_changed"],
            summary_version=end["summary_version"],
            model_calls=end["model_calls"],
            model_usage=end["model_usage"],
            node_ms=end["node_ms"],
            payloads=result.payloads,
        )
        assert result == whole
    assert result.node_ms and list(result.node_ms)[-1] == "inject"
