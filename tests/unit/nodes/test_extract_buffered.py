"""A model extractor waits for a batch of live turns; waiting turns survive a crash."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from convmem_graph.config import MemoryConfig
from convmem_graph.memory import ConvMemory
from convmem_graph.models import ExtractionResult, Fragment, FragmentCandidate, Message, VariableSpec

NOW = 1_767_000_000_000


class CountingModelExtractor:
    """Stands in for the LLM extractor: one "model call" per batch, one fact per user message."""

    name = "counting"
    buffers_turns = True

    def __init__(self) -> None:
        self.batches: list[list[str]] = []

    def extract(
        self,
        messages: Sequence[Message],
        existing: Sequence[Fragment],
        specs: Sequence[VariableSpec],
        *,
        now_ms: int,
    ) -> ExtractionResult:
        users = [m for m in messages if m.role == "user"]
        self.batches.append([m.content for m in users])
        facts = [
            FragmentCandidate(
                content=f"用户说过：{m.content}", key=f"state:{m.id}", source_message_ids=[m.id]
            )
            for m in users
        ]
        return ExtractionResult(candidates=facts, model_calls=1)


def _turn(i: int) -> list[dict[str, object]]:
    return [
        {"role": "user", "content": f"第{i}句话", "timestamp": (NOW + i * 1000) // 1000},
        {"role": "assistant", "content": "嗯", "timestamp": (NOW + i * 1000 + 500) // 1000},
    ]


def _open(db: str, extractor: CountingModelExtractor, clock: list[int]) -> ConvMemory:
    config = MemoryConfig(extract_after_user_messages=3, extract_idle_seconds=60)
    return ConvMemory.open(db, config=config, extractor=extractor, clock=lambda: clock[0])


def test_live_turns_are_extracted_together_after_n_user_messages(tmp_path: Path) -> None:
    clock = [NOW + 10_000]
    extractor = CountingModelExtractor()
    with _open(str(tmp_path / "m.db"), extractor, clock) as mem:
        for i in range(2):
            assert mem.ingest("m", _turn(i), source="openai").model_calls == 0
        assert extractor.batches == [] and mem.fragments("m") == []
        assert mem.ingest("m", _turn(2), source="openai").model_calls == 1
        assert extractor.batches == [["第0句话", "第1句话", "第2句话"]]
        assert len(mem.fragments("m")) == 3
        # A session end extracts what waits at once.
        mem.ingest("m", _turn(3), source="openai")
        assert len(extractor.batches) == 1
        mem.ingest("m", [], session_ended=True)
        assert extractor.batches[-1] == ["第3句话"]


def test_a_pending_turn_is_extracted_once_it_waited_long_enough(tmp_path: Path) -> None:
    clock = [NOW + 10_000]
    extractor = CountingModelExtractor()
    with _open(str(tmp_path / "m.db"), extractor, clock) as mem:
        mem.ingest("m", _turn(0), source="openai")
        assert extractor.batches == []
        clock[0] += 61_000  # the next run finds the turn older than extract_idle_seconds
        mem.ingest("m", [])
        assert extractor.batches == [["第0句话"]]


def test_the_heuristic_extractor_does_not_wait(tmp_path: Path) -> None:
    with ConvMemory.open(str(tmp_path / "h.db"), config=MemoryConfig(extract_after_user_messages=5)) as mem:
        mem.ingest("m", [{"role": "user", "content": "我对芒果过敏。"}], source="openai")
        assert [f.content for f in mem.fragments("m")] == ["用户对芒果过敏。"]
