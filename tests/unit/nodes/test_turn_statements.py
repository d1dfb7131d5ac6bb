"""A live turn's store work: no read its next write makes anyway, no page past the last, no row made twice.

``update_variables`` learns whether the inferred language changed from its own commit (which
reads the stored values inside its transaction) instead of reading them before it; a language
change then rewords the diet in a second commit, and a run stopped between the two is completed
by the next. ``summary_due`` stops at a short page instead of asking for one more. The hobby walk
makes the older facts of its items into Fragments without those it already holds.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from convmem_graph.extractors.variables import DEFAULT_VARIABLE_SPECS
from convmem_graph.nodes._inference import infer_from_store
from convmem_graph.runner import Lifecycle
from convmem_graph.state import RawInput
from convmem_graph.store import MemoryStore
from tests.statements import statements_from

NOW = 1_767_312_000_000
INFERRED = [s for s in DEFAULT_VARIABLE_SPECS if s.infer]


def _say(lc: Lifecycle, *lines: str) -> Any:
    return lc.run("m", [RawInput([{"role": "user", "content": line} for line in lines])])


def _values(store: MemoryStore) -> dict[str, Any]:
    return {k: v.value for k, v in store.inferred_variables("m").items()}


def _from_scratch(store: MemoryStore) -> dict[str, Any]:
    """What inference over all the memory's facts gives (the stored values must equal it)."""
    return {k: g.value for k, g in infer_from_store(store, "m", INFERRED, now_ms=NOW).items()}


@pytest.fixture
def lc() -> Iterator[Lifecycle]:
    store = MemoryStore.from_url("sqlite://")
    yield Lifecycle(store, clock=lambda: NOW)
    store.close()


def test_a_turn_that_keeps_its_language_reads_the_variables_once(lc: Lifecycle) -> None:
    _say(lc, "我对芒果过敏。", "我住在杭州。")
    with statements_from(lc.store, "update_variables") as seen:
        result = _say(lc, "我最近特别喜欢羽毛球。")
    assert "update_variables" in result.node_ms and "language" not in result.variables_changed
    reads = [s for s in seen if s.lstrip().startswith("SELECT") and "FROM cm_variables " in s]
    assert len(reads) == 1, reads  # the commit's own, inside its transaction (two before)
    assert _values(lc.store) == _from_scratch(lc.store)


def test_a_language_change_rewords_the_diet(lc: Lifecycle) -> None:
    _say(lc, "我对芒果过敏。", "我住在杭州。")
    _say(lc, "I am allergic to peanuts.")
    assert _values(lc.store)["diet"] == "allergic to peanuts；对芒果过敏"  # worded as Chinese
    # No diet fact in this turn: only the language changes, and with it the diet's wording.
    result = _say(lc, "I live in Berlin.", "I work as a nurse.")
    assert {"language", "diet"} <= set(result.variables_changed)
    assert _values(lc.store)["language"] == "en"
    assert _values(lc.store)["diet"] == "allergic to peanuts; 对芒果过敏"
    assert _values(lc.store) == _from_scratch(lc.store)


def test_a_run_stopped_between_the_two_commits_is_completed_by_the_next(
    lc: Lifecycle, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = lc.store
    _say(lc, "我对芒果过敏。", "我住在杭州。")
    _say(lc, "I am allergic to peanuts.")
    real = MemoryStore.commit_inferred_variables
    stops: list[str] = []

    def stop_before_the_diet(self: Any, memory_id: str, guesses: Any, **kw: Any) -> list[str]:
        if set(kw.get("inferable", ())) == {"diet"}:
            stops.append(memory_id)
            raise RuntimeError("process killed")
        return real(self, memory_id, guesses, **kw)

    monkeypatch.setattr(MemoryStore, "commit_inferred_variables", stop_before_the_diet)
    with pytest.raises(RuntimeError, match="process killed"):
        _say(lc, "I live in Berlin.", "I work as a nurse.")
    assert stops == ["m"]
    # The language committed, the diet not yet: the facts stay marked newer than the variables.
    assert _values(store)["language"] == "en" and _values(store)["diet"] == "allergic to peanuts；对芒果过敏"
    assert store.cursors("m")[3]
    monkeypatch.setattr(MemoryStore, "commit_inferred_variables", real)
    lc.run("m")  # nothing new: the next run re-infers from the dirty facts
    assert _values(store) == _from_scratch(store)
    assert not store.cursors("m")[3]


def test_summary_due_stops_at_a_short_page(lc: Lifecycle) -> None:
    _say(lc, "我对芒果过敏。")
    with statements_from(lc.store, "summary_due") as seen:
        result = _say(lc, "今天天气不错。")
    assert "summarize" not in result.node_ms  # too little new transcript: the read found it short
    assert len(seen) == 1, seen  # one page, shorter than a page: no second read


def test_the_hobby_walk_makes_each_fact_row_into_a_fragment_once(monkeypatch: pytest.MonkeyPatch) -> None:
    from convmem_graph.store import _fragments
    from tests.unit.nodes.test_flat_turn import fill

    store = MemoryStore.from_url("sqlite://")
    try:
        # More facts than the first page holds (index reads then): 40 hobbies, the two newest items
        # also stated long ago under habit: (the walk reads those older facts by key).
        facts = [("pref:{s}", "用户喜欢{s}。", f"爱好{i}", False, i + 10, 1.0, None) for i in range(40)]
        facts += [("habit:{s}", "用户经常{s}。", f"爱好{i}", False, 1, 1.0, None) for i in (38, 39)]
        fill(store, "m", facts)
        made: list[str] = []
        real = _fragments.fragment_of

        def counted(values: Any) -> Any:
            made.append(values[0])  # the id
            return real(values)

        monkeypatch.setattr(_fragments, "fragment_of", counted)
        hobbies = [s for s in DEFAULT_VARIABLE_SPECS if s.name == "hobbies"]
        guess = infer_from_store(store, "m", hobbies, now_ms=NOW)["hobbies"]
    finally:
        store.close()
    assert len(made) == len(set(made)), sorted(made)  # an older item's rows were made twice before
    assert len(guess.fragment_ids) == 22  # the newest 20 items, two of them stated twice
