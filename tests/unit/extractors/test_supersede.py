"""Every planted change ends with one active fact, the right wording, and the variable following it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from convmem_graph.memory import ConvMemory
from convmem_graph.text.keys import canonical_key

T0 = 1_767_268_822_030


@pytest.fixture(scope="module")
def mem(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ConvMemory]:
    m = ConvMemory.open(str(Path(tmp_path_factory.mktemp("sup")) / "m.db"))
    yield m
    m.close()


# (before, after, key, word in the active fact, variable, expected value or None for absent)
CHANGES = [
    ("我不吃香菜。", "我现在吃香菜了。", "food:香菜", "现在吃香菜", "diet", "爱吃香菜"),
    ("我对芒果过敏。", "我对芒果严重过敏。", "allergy:芒果", "严重过敏", "diet", "对芒果过敏"),
    ("我每天抽烟。", "嗯，我已经戒烟了。", "habit:抽烟", "不再抽烟", "hobbies", None),
    ("我吃素。", "我不再吃素了", "food:素食", "不再吃素", "diet", None),
    ("I'm vegetarian.", "Well, I'm not vegetarian anymore.", "food:vegetarian", "no longer", "diet", None),
    ("I don't eat meat.", "I eat meat again now.", "food:meat", "again", "diet", "likes meat"),
    (
        "I live in Boston.",
        "I used to live in Boston but now I live in Denver.",
        "profile:city",
        "Denver",
        "city",
        "Denver",
    ),
    ("我住在杭州。", "然后我现在搬到上海了。", "profile:city", "上海", "city", "上海"),
    ("I smoke every day.", "So I quit smoking last year.", "habit:smoke", "no longer", "hobbies", None),
    (
        "I've been gluten-free since 2020.",
        "I'm no longer gluten-free.",
        "food:gluten-free",
        "no longer",
        "diet",
        None,
    ),
    # Issue 25, pass four: the household moves, a habit said with how much of it, 不再 with any
    # activity, "don't ... anymore", and liking alcohol against giving it up (one key in Chinese).
    ("我住在成都。", "我们前年搬到了大理。", "profile:city", "大理", "city", "大理"),
    ("I live in Denver.", "We moved to Tucson last spring.", "profile:city", "Tucson", "city", "Tucson"),
    ("我天天喝酒。", "我以前一天要喝一斤白酒，后来就戒了。", "habit:喝酒", "不再喝酒", "hobbies", None),
    ("我经常熬夜。", "我现在不再熬夜了。", "habit:熬夜", "不再熬夜", "hobbies", None),
    ("I smoke every day.", "I don't smoke anymore.", "habit:smoke", "no longer", "hobbies", None),
    ("我爱喝酒。", "我已经不喝酒了。", "habit:喝酒", "不", "hobbies", None),
]


@pytest.mark.parametrize("arrival", ["in order", "the change first"])
@pytest.mark.parametrize(("before", "after", "key", "word", "variable", "value"), CHANGES)
def test_a_change_supersedes(
    mem: ConvMemory,
    arrival: str,
    before: str,
    after: str,
    key: str,
    word: str,
    variable: str,
    value: str | None,
) -> None:
    """Whichever arrives first, the statement said last is the one active fact."""
    mid = f"u{abs(hash((before, arrival))) % 10**8}"
    batches = [
        [{"role": "user", "content": before, "timestamp": T0}],
        [{"role": "user", "content": after, "timestamp": T0 + 60_000}],
    ]
    for batch in batches if arrival == "in order" else batches[::-1]:
        mem.ingest(mid, batch)
    on_key = [f for f in mem.fragments(mid, status=None) if canonical_key(f.key) == canonical_key(key)]
    active = [f for f in on_key if f.status == "active"]
    assert len(active) == 1, [(f.status, f.content) for f in on_key]
    assert word in active[0].content
    got = mem.variables(mid).get(variable)
    assert (got.value if got is not None else None) == value
