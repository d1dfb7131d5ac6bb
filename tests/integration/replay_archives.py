"""Helpers for the ``convmem`` end-to-end tests: archives, subprocess runs and database snapshots.

Archives are built in a temporary folder from the bundled examples or from LoCoMo
(``../shared/data/locomo/locomo10.json`` next to the repository; the tests skip with the reason when
it is absent). A database snapshot reads the store's tables directly (SQLite or PostgreSQL), so the
comparisons do not go through the code under test.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter, defaultdict
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, func, select

from convmem_graph.store.schema import fragments, messages, variables
from convmem_graph.store.urls import normalize_url

__all__ = [
    "EXAMPLES",
    "LOCOMO",
    "FullRun",
    "REPO_ROOT",
    "MemoryState",
    "alive",
    "child_pids",
    "convmem",
    "convmem_parallel",
    "count_messages",
    "db_state",
    "locomo_full_run",
    "locomo_or_skip",
    "replay_args",
    "start_convmem",
    "write_locomo_archive",
]

REPO_ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = REPO_ROOT / "examples"
LOCOMO = REPO_ROOT.parent / "shared" / "data" / "locomo" / "locomo10.json"


def locomo_or_skip() -> Path:
    """Return the LoCoMo file, or skip the calling test with the reason."""
    if not LOCOMO.is_file():
        pytest.skip(f"LoCoMo data not found at {LOCOMO} (the kill/shard/PostgreSQL replay tests use it)")
    return LOCOMO


# -- subprocesses ---------------------------------------------------------------------------------
def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("CONVMEM_DB", None)  # every call names its --db
    env["PYTHONUNBUFFERED"] = "1"
    env.setdefault("PYTHONHASHSEED", "0")
    return env


def convmem(*args: str | Path, cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Run ``python -m convmem_graph ARGS`` and return the finished process (text output)."""
    return subprocess.run(
        [sys.executable, "-m", "convmem_graph", *map(str, args)],
        cwd=cwd,
        env=_env(),
        capture_output=True,
        text=True,
        encoding="utf-8",
        timeout=timeout,
        check=False,
    )


def start_convmem(*args: str | Path, cwd: Path) -> subprocess.Popen[str]:
    """Start ``python -m convmem_graph ARGS`` without waiting (stdout and stderr piped)."""
    return subprocess.Popen(
        [sys.executable, "-m", "convmem_graph", *map(str, args)],
        cwd=cwd,
        env=_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        encoding="utf-8",
    )


def child_pids(pid: int) -> set[int]:
    """Return the ids of the child processes of ``pid`` (Linux ``/proc``; empty elsewhere)."""
    children: set[int] = set()
    for listing in Path(f"/proc/{pid}/task").glob("*/children"):
        try:
            children.update(int(c) for c in listing.read_text().split())
        except (OSError, ValueError):
            continue
    return children


def alive(pid: int) -> bool:
    """Return whether process ``pid`` exists and is not a zombie."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def convmem_parallel(
    *calls: tuple[str | Path, ...], cwd: Path, timeout: float = 120
) -> list[subprocess.CompletedProcess[str]]:
    """Run independent ``convmem`` calls at the same time and return them finished, in call order."""
    procs = [start_convmem(*call, cwd=cwd) for call in calls]
    done: list[subprocess.CompletedProcess[str]] = []
    try:
        for proc in procs:
            stdout, stderr = proc.communicate(timeout=timeout)
            done.append(subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr))
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
    return done


# -- LoCoMo as OpenAI-style JSON Lines ------------------------------------------------------------
def _session_start_ms(text: str) -> int:
    # "1:56 pm on 8 May, 2023"
    return int(
        datetime.strptime(text.strip(), "%I:%M %p on %d %B, %Y").replace(tzinfo=UTC).timestamp() * 1000
    )


def write_locomo_archive(
    source: Path,
    dest: Path,
    *,
    conversations: int = 10,
    files: int = 4,
    prefix: str = "",
    max_sessions: int | None = None,
) -> dict[str, int]:
    """Write LoCoMo as JSON Lines of OpenAI-style sessions and return memory id -> message count.

    Each conversation becomes two memories, one per speaker taken as the user (the other one is the
    assistant). One line is one session: ``{"user": ID, "messages": [{role, content, timestamp}]}``
    with a per-message timestamp 30 s apart from the session's date. Sessions are dealt round-robin
    over ``files`` files, so every memory's messages span every file.
    """
    data = json.loads(source.read_text(encoding="utf-8"))[:conversations]
    dest.mkdir(parents=True, exist_ok=True)
    lines: list[list[str]] = [[] for _ in range(files)]
    expected: Counter[str] = Counter()
    slot = 0
    for sample in data:
        conv = sample["conversation"]
        sessions = sorted(
            (int(k.split("_")[1]), v)
            for k, v in conv.items()
            if k.startswith("session_") and isinstance(v, list) and v
        )[:max_sessions]
        for user_speaker, tag in ((conv["speaker_a"], "a"), (conv["speaker_b"], "b")):
            memory_id = f"{prefix}{sample['sample_id']}-{tag}"
            for number, turns in sessions:
                start = _session_start_ms(conv[f"session_{number}_date_time"])
                msgs = [
                    {
                        "role": "user" if turn["speaker"] == user_speaker else "assistant",
                        "content": turn["text"],
                        "timestamp": start + 30_000 * i,
                    }
                    for i, turn in enumerate(turns)
                    if turn["text"].strip()
                ]
                expected[memory_id] += len(msgs)
                lines[slot % files].append(
                    json.dumps({"user": memory_id, "messages": msgs}, ensure_ascii=False)
                )
                slot += 1
    for n, chunk in enumerate(lines):
        (dest / f"locomo_part{n:02d}.jsonl").write_text("\n".join(chunk) + "\n", encoding="utf-8")
    return dict(expected)


# -- database snapshots ---------------------------------------------------------------------------
@dataclass(frozen=True)
class MemoryState:
    """What the kill/shard/concurrency tests compare for one memory."""

    messages: int
    message_ids: int  # distinct ids: equals ``messages`` when nothing was stored twice
    fragments: tuple[tuple[str, str, str], ...]  # sorted (key, content, status)
    variables: tuple[tuple[str, str], ...]  # sorted (name, JSON value); a manual value wins


def _engine(url: str) -> Any:
    return create_engine(normalize_url(url))


def count_messages(url: str) -> int:
    """Return the number of stored messages over all memories (0 before the tables exist)."""
    engine = _engine(url)
    try:
        with engine.connect() as conn:
            return int(conn.execute(select(func.count()).select_from(messages)).scalar_one())
    except Exception:  # the tables are created by the process under test; not there yet
        return 0
    finally:
        engine.dispose()


def db_state(url: str, memory_ids: set[str] | None = None) -> dict[str, MemoryState]:
    """Read every memory (or only ``memory_ids``) of the database at ``url``."""
    engine = _engine(url)
    counts: dict[str, tuple[int, int]] = {}
    frags: defaultdict[str, list[tuple[str, str, str]]] = defaultdict(list)
    values: defaultdict[str, dict[str, tuple[str, Any]]] = defaultdict(dict)
    try:
        with engine.connect() as conn:
            for memory_id, n, distinct in conn.execute(
                select(messages.c.memory_id, func.count(), func.count(messages.c.id.distinct())).group_by(
                    messages.c.memory_id
                )
            ):
                counts[memory_id] = (int(n), int(distinct))
            for row in conn.execute(
                select(fragments.c.memory_id, fragments.c.key, fragments.c.content, fragments.c.status)
            ):
                frags[row.memory_id].append((row.key, row.content, row.status))
            for row in conn.execute(
                select(variables.c.memory_id, variables.c.name, variables.c.origin, variables.c.value)
            ):
                held = values[row.memory_id].get(row.name)
                if held is None or row.origin == "manual":
                    values[row.memory_id][row.name] = (row.origin, row.value)
    finally:
        engine.dispose()
    ids = set(counts) | set(frags) | set(values)
    if memory_ids is not None:
        ids &= memory_ids
    return {
        m: MemoryState(
            messages=counts.get(m, (0, 0))[0],
            message_ids=counts.get(m, (0, 0))[1],
            fragments=tuple(sorted(frags[m])),
            variables=tuple(
                sorted(
                    (name, json.dumps(v, ensure_ascii=False, sort_keys=True))
                    for name, (_, v) in values[m].items()
                )
            ),
        )
        for m in sorted(ids)
    }


# -- one LoCoMo archive and one uninterrupted run per test session --------------------------------
def replay_args(archive: Path, db: Path | str, *extra: str) -> tuple[str | Path, ...]:
    """The replay command of every LoCoMo run (``extra``: --shard, --concurrency)."""
    return ("replay", archive, "--no-progress", "--json", "--db", db, *extra)


@dataclass(frozen=True)
class FullRun:
    """The LoCoMo archive, its expected message counts, and the state after one uninterrupted replay."""

    archive: Path
    expected: dict[str, int]
    state: dict[str, MemoryState]


_FULL_RUNS: dict[int, FullRun] = {}


def locomo_full_run(tmp_path_factory: pytest.TempPathFactory, *, conversations: int = 10) -> FullRun:
    """Build a LoCoMo archive and replay it once into SQLite (cached per size for the test session).

    2 JSONL files; two memories per conversation (each speaker as the user); the first 6 sessions
    of each conversation: about 2,600 messages for all 10 conversations, a few seconds of replay.
    """
    if conversations in _FULL_RUNS:
        return _FULL_RUNS[conversations]
    source = locomo_or_skip()
    root = tmp_path_factory.mktemp(f"locomo{conversations}")
    archive = root / "archive"
    expected = write_locomo_archive(source, archive, conversations=conversations, files=2, max_sessions=6)
    assert len(expected) == 2 * conversations
    db = root / "full.db"
    proc = convmem(*replay_args(archive, db), cwd=root)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    report = json.loads(proc.stdout)
    assert report["new_messages"] == sum(expected.values()) and report["quarantined"] == {}
    state = db_state(str(db))
    assert {m: s.messages for m, s in state.items()} == expected
    assert all(s.message_ids == s.messages for s in state.values())
    # Enough was extracted for the comparisons to mean something.
    assert sum(len(s.fragments) for s in state.values()) >= 2 * conversations
    assert sum(1 for s in state.values() if s.variables) >= conversations
    _FULL_RUNS[conversations] = FullRun(archive, expected, state)
    return _FULL_RUNS[conversations]
