"""Two ``convmem replay`` processes on one SQLite file at once: every summary matches its variables.

Issue 21 item 6: runs of one memory were serialized within a process only, so two processes ran
one memory at the same time; a run summarized from the variables it had read while the other
process's run changed them, and the later run found the summary cursor already past its messages,
so the stale summary stayed (1-2 of 199 memories per run here, 5-9 in the issue's report). The
runs of a memory now also hold a lock file beside the database (``store.locks.file_memory_lock``).

The archive is generated: 199 memories, each introducing itself with a name and a city, moving to
another city and giving another name later, with filler sessions between; the sessions of every
memory alternate between two folders, one per process, so both processes feed every memory.
Measured before the fix with this archive (random hash seeds): 0-2 stale summaries per run; after
it 0 of 199 in every run.

The same archive replayed by both processes at once (every message new to whichever gets to it
first) is the second case: a run may then change a variable with one short sentence, and the
summary now follows a changed variable whatever the run's size (``nodes/summarize.py``).
The default extractor and summarizer are the offline ones: the summary's profile line names the
``name`` and ``city`` variables (``Profile: Name: X; City: Y.``).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from convmem_graph.store import MemoryStore
from tests.integration.replay_archives import convmem_parallel, replay_args

pytestmark = pytest.mark.integration

MEMORIES = 199
_FIRST = (
    "Alice Bruno Chiara Dmitri Elena Farid Greta Hiro Ingrid Jonas "
    "Kenji Lena Marco Nadia Oskar Priya Quentin Rosa Stefan Tomas"
).split()
_LAST = "Abe Berg Costa Dahl Eck Falk Gil Holm Iver Juul".split()
_CITIES = (
    "Oslo Lyon Porto Turin Graz Bergen Leeds Ghent Malmo Cork "
    "Basel Brno Split Riga Tartu Kobe Perth Quito Lima Cusco"
).split()
# Long enough that a few sessions cross the summary threshold (200 tokens): summaries are made
# (and remade) throughout the replay, not only once at the end.
_FILLER = (
    "The weather was nice and we spent the whole afternoon walking along the river, talking about "
    "books, music, films and the long trip we are planning for next summer with friends.",
    "Work was busy this week because the whole team had to finish the quarterly report, review the "
    "budget, and prepare slides for the meeting with the board on Friday morning.",
    "Yesterday I cooked a large dinner for my neighbours with soup, bread, roasted vegetables and a "
    "cake, and we stayed at the table until very late telling old stories.",
)
_T0 = 1_700_000_000_000
_DAY_MS = 86_400_000


def _person(i: int) -> tuple[str, str, str, str]:
    """Memory ``i``'s first name, later name, first city and later city (one word each)."""
    return (
        _FIRST[i % 20] + _LAST[(i // 20) % 10],
        _FIRST[(i + 7) % 20] + _LAST[(i // 20 + 3) % 10],
        _CITIES[i % 20],
        _CITIES[(i + 11) % 20],
    )


def write_archive(root: Path, memories: int = MEMORIES) -> tuple[Path, Path]:
    """Write the two folders of JSON Lines sessions (one per process) and return them."""
    parts = (root / "part0", root / "part1")
    lines: tuple[list[str], list[str]] = ([], [])
    for i in range(memories):
        first_name, later_name, first_city, later_city = _person(i)
        sessions = [
            [f"My name is {first_name}.", f"I live in {first_city}.", *_FILLER],
            list(_FILLER),
            [f"I moved to {later_city} last month.", *_FILLER],
            list(_FILLER),
            [f"My name is {later_name}.", *_FILLER],
            list(_FILLER),
            list(_FILLER),
            [f"I live in {later_city} now.", *_FILLER],
        ]
        for number, texts in enumerate(sessions):
            msgs = []
            for j, text in enumerate(texts):
                at = _T0 + number * _DAY_MS + j * 30_000
                msgs.append({"role": "user", "content": text, "timestamp": at})
                msgs.append({"role": "assistant", "content": "Nice.", "timestamp": at + 10_000})
            lines[number % 2].append(json.dumps({"user": f"gen-{i:03d}", "messages": msgs}))
    for part, chunk in zip(parts, lines, strict=True):
        part.mkdir(parents=True)
        (part / "sessions.jsonl").write_text("\n".join(chunk) + "\n", encoding="utf-8")
    return parts


def disagreeing(db: Path) -> dict[str, str]:
    """Memory id -> summary, for every memory whose summary does not name its name and city."""
    store = MemoryStore.from_url(str(db))
    try:
        bad: dict[str, str] = {}
        ids = [m.memory_id for m in store.list_memories(limit=10 * MEMORIES)]
        assert len(ids) == MEMORIES
        for memory_id in ids:
            values = store.get_variables(memory_id)
            summary = store.get_summary(memory_id)
            text = summary.text if summary is not None else ""
            name, city = values["name"].value, values["city"].value
            if f"Name: {name};" not in text or f"City: {city}." not in text:
                bad[memory_id] = f"variables {name}/{city}; summary {text[:120]!r}"
        return bad
    finally:
        store.close()


@pytest.mark.parametrize("attempt", [1, 2, 3])
def test_two_replays_on_one_sqlite_file_leave_no_stale_summary(attempt: int, tmp_path: Path) -> None:
    part0, part1 = write_archive(tmp_path / "archive")
    db = tmp_path / "memories.db"
    # Small batches: many runs per memory, so the two processes meet on the same memory often.
    procs = convmem_parallel(
        replay_args(part0, db, "--batch", "16"),
        replay_args(part1, db, "--batch", "16"),
        cwd=tmp_path,
        timeout=240,
    )
    for proc in procs:
        assert proc.returncode == 0, f"{proc.args} exited {proc.returncode}\n{proc.stderr}"
        assert "Traceback" not in proc.stderr, proc.stderr
    reports = [json.loads(p.stdout) for p in procs]
    # Each message was new to exactly one of the two processes.
    assert sum(r["new_messages"] for r in reports) == _message_count()
    # Each memory ends as its later name in its later city, and its summary says so.
    store = MemoryStore.from_url(str(db))
    try:
        _, later_name, _, later_city = _person(0)
        values = store.get_variables("gen-000")
        assert (values["name"].value, values["city"].value) == (later_name, later_city)
    finally:
        store.close()
    assert disagreeing(db) == {}


@pytest.mark.parametrize("attempt", [1, 2, 3])
def test_two_replays_of_the_same_archive_leave_no_stale_summary(attempt: int, tmp_path: Path) -> None:
    # Both processes read the whole archive at once: each message is stored by the one that gets
    # to it first, so a run of either may hold a single short sentence ("I live in Lima now.") that
    # changes a variable with far fewer tokens than the summary threshold. The summary is refreshed
    # by such a run (nodes/summarize.py); before, it kept the old value unless enough other words
    # followed in a later run of the memory.
    root = tmp_path / "archive"
    write_archive(root)
    db = tmp_path / "memories.db"
    procs = convmem_parallel(
        replay_args(root, db, "--batch", "16"),
        replay_args(root, db, "--batch", "16"),
        cwd=tmp_path,
        timeout=240,
    )
    for proc in procs:
        assert proc.returncode == 0, f"{proc.args} exited {proc.returncode}\n{proc.stderr}"
        assert "Traceback" not in proc.stderr, proc.stderr
    reports = [json.loads(p.stdout) for p in procs]
    # Both read every message; each was new to exactly one of them.
    assert [r["messages_read"] for r in reports] == [_message_count(), _message_count()]
    assert sum(r["new_messages"] for r in reports) == _message_count()
    assert disagreeing(db) == {}


def _message_count(memories: int = MEMORIES) -> int:
    """Messages in the generated archive (two per text: the user's and the assistant's)."""
    per_memory = (2 + 3) + 3 + (1 + 3) + 3 + (1 + 3) + 3 + 3 + (1 + 3)
    return memories * per_memory * 2
