"""The summary follows the variables it names, also after a run with few new tokens (issue 21 item 6).

Two replays of one archive on one SQLite file split each memory's messages between them: a run
could then hold only "I live in Lima now." and change ``city`` with a handful of tokens, below the
summary threshold, and the summary kept naming the old city. A run that changes a variable now
refreshes an existing summary; it does not start one before the threshold.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from convmem_graph import ConvMemory

T0 = 1_700_000_000_000
DAY_MS = 86_400_000
FILLER = (
    "The weather was nice and we spent the whole afternoon walking along the river, talking about "
    "books, music, films and the long trip we are planning for next summer with friends."
)


def _session(texts: list[str], day: int) -> list[dict[str, Any]]:
    return [
        {"role": "user", "content": text, "timestamp": T0 + day * DAY_MS + j * 30_000}
        for j, text in enumerate(texts)
    ]


@pytest.fixture
def mem(tmp_path: Path) -> Iterator[ConvMemory]:
    memory = ConvMemory.open(str(tmp_path / "m.db"))
    try:
        yield memory
    finally:
        memory.close()


def test_a_short_run_that_changes_a_variable_refreshes_the_summary(mem: ConvMemory) -> None:
    first = mem.ingest("m", _session(["My name is Alice.", "I live in Oslo.", *[FILLER] * 6], 0))
    assert "city" in first.variables_changed
    summary = mem.store.get_summary("m")
    assert summary is not None and "City: Oslo." in summary.text
    # One short sentence, far below the summary threshold, moves the city.
    moved = mem.ingest("m", _session(["I live in Lima now."], 1))
    assert moved.variables_changed == ["city"]
    assert mem.store.get_variables("m")["city"].value == "Lima"
    refreshed = mem.store.get_summary("m")
    assert refreshed is not None and "City: Lima." in refreshed.text
    assert refreshed.version > summary.version


def test_a_short_run_changing_nothing_leaves_the_summary_alone(mem: ConvMemory) -> None:
    mem.ingest("m", _session(["My name is Alice.", "I live in Oslo.", *[FILLER] * 6], 0))
    before = mem.store.get_summary("m")
    result = mem.ingest("m", _session(["Nice weather today."], 1))
    assert result.variables_changed == []
    after = mem.store.get_summary("m")
    assert before is not None and after is not None and after.version == before.version


def test_no_summary_is_started_below_the_threshold(mem: ConvMemory) -> None:
    result = mem.ingest("m", _session(["My name is Alice."], 0))
    assert "name" in result.variables_changed
    assert mem.store.get_summary("m") is None
