"""The ``convmem`` command end to end, each call in its own process (``python -m convmem_graph``).

- the main job on the bundled examples: replay -> show -> inject (TRTC, Agora join and update,
  OpenAI) -> export -> import into a second database -> export again (same document) -> delete;
- bad input: quarantined with counts by reason, ``--strict`` exit code, ``ingest`` of a bad and a
  good file;
- kill and resume: SIGKILL a LoCoMo replay midway, rerun, compare with an uninterrupted run;
- shards: ``--shard 0/2`` then ``1/2`` into one database equal one full run.

Independent calls run as parallel processes to keep the wall time down (each process pays the
import of LangChain/LangGraph once).
"""

from __future__ import annotations

import json
import signal
import sqlite3
import subprocess
import time
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from convmem_graph.replay import shard_of
from tests.integration.replay_archives import (
    EXAMPLES,
    FullRun,
    alive,
    child_pids,
    convmem,
    convmem_parallel,
    count_messages,
    db_state,
    locomo_full_run,
    replay_args,
    start_convmem,
)

pytestmark = pytest.mark.integration

CONVERSATIONS = EXAMPLES / "conversations"
TRTC_OPTIONS = EXAMPLES / "options" / "trtc.json"
AGORA_OPTIONS = EXAMPLES / "options" / "agora.json"
PERSONA = "你是「小雨」，一个温柔的 AI 陪伴伙伴。"
MEMORY_TAG = "<user_memory>"


def ok(proc: subprocess.CompletedProcess[str]) -> str:
    """Assert a clean exit (0, no traceback) and return stdout."""
    assert proc.returncode == 0, f"{proc.args} exited {proc.returncode}\n{proc.stderr}"
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc.stdout


def rows_of(db: Path, memory_id: str) -> dict[str, int]:
    """Count the rows of ``memory_id`` in every table of a SQLite file (store and checkpoints)."""
    with closing(sqlite3.connect(db)) as conn:
        tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        counts = {}
        for table in tables:
            columns = {r[1] for r in conn.execute(f'PRAGMA table_info("{table}")')}
            for column in ("memory_id", "thread_id"):
                if column in columns:
                    # Lifecycle checkpoints live on thread "convmem:<memory id>".
                    query = f'SELECT count(*) FROM "{table}" WHERE "{column}" IN (?, ?)'
                    ids = (memory_id, f"convmem:{memory_id}")
                    counts[f"{table}.{column}"] = conn.execute(query, ids).fetchone()[0]
    return counts


# -- 1. the main job ------------------------------------------------------------------------------
def test_replay_show_inject_export_import_delete(tmp_path: Path) -> None:
    db_a, db_b = tmp_path / "a.db", tmp_path / "b.db"
    exported, exported_again = tmp_path / "u_10086.json", tmp_path / "u_10086_again.json"

    replay = ok(
        convmem(
            *("replay", CONVERSATIONS, "--group-by", "user", "--bot-id", "ai_xiaoyu_bot"),
            *("--db", db_a, "--json", "--no-progress"),
            cwd=tmp_path,
        )
    )
    report = json.loads(replay)
    # u_10086 (IM history + TRTC call) and dulemon_01 .. dulemon_06.
    assert report["files"] == 3
    assert report["memories"] == 7
    assert report["quarantined"] == {}
    assert report["new_messages"] == report["messages_read"] > 0
    before_delete = rows_of(db_a, "u_10086")
    assert before_delete["cm_messages.memory_id"] > 0
    assert before_delete["checkpoints.thread_id"] > 0  # the lifecycle state is checkpointed per memory

    show, trtc, agora, agora_update, openai, export = convmem_parallel(
        ("show", "u_10086", "--json", "--db", db_a),
        *(
            ("inject", "u_10086", "--vendor", vendor, *options, "--persona", PERSONA, "--db", db_a)
            for vendor, options in (
                ("trtc", ("--options", TRTC_OPTIONS)),
                ("agora", ("--options", AGORA_OPTIONS)),
                ("agora-update", ("--options", AGORA_OPTIONS)),
                ("openai", ()),
            )
        ),
        ("export", "u_10086", "-o", exported, "--db", db_a),
        cwd=tmp_path,
    )

    # show --json: the planted facts of the story, with provenance.
    doc = json.loads(ok(show))
    assert doc["memory_id"] == "u_10086"
    values = {name: v["value"] for name, v in doc["variables"].items()}
    assert values["city"] == "杭州"
    assert values["birth_year"] == 1996
    assert values["name"] == "林晓"
    assert values["occupation"] == "产品经理"
    assert doc["variables"]["city"]["origin"] == "inferred"
    by_id = {f["id"]: f for f in doc["fragments"]}
    (city_fragment,) = doc["variables"]["city"]["fragment_ids"]
    assert "杭州" in by_id[city_fragment]["content"]
    keys = {f["key"] for f in doc["fragments"]}
    assert {"profile:city", "profile:name", "profile:occupation", "pet:年糕"} <= keys
    assert all(f["source_message_ids"] and f["status"] == "active" for f in doc["fragments"])
    assert doc["message_count"] > 0 and doc["recent"]
    assert "杭州" in doc["summary"]["text"] and doc["summary"]["tokens"] > 0

    # export: the whole memory as one document.
    export_text = exported.read_text(encoding="utf-8")
    ok(export)
    dump = json.loads(export_text)
    assert dump["format"] == "convmem-memory"
    assert dump["memory"]["memory_id"] == "u_10086"
    assert len(dump["messages"]) == doc["message_count"]
    assert set(by_id) <= {f["id"] for f in dump["fragments"]}
    stored_texts = {m["content"] for m in dump["messages"]}

    # TRTC StartAIConversation: LLMConfig is a JSON string carrying the memory block.
    body = json.loads(ok(trtc))
    assert body["SdkAppId"] == 1400000000
    assert body["AgentConfig"]["TargetUserId"] == "u_10086"
    assert isinstance(body["LLMConfig"], str) and isinstance(body["TTSConfig"], str)
    llm = json.loads(body["LLMConfig"])
    prompt = llm["SystemPrompt"]
    assert prompt.startswith(PERSONA)
    assert MEMORY_TAG in prompt and "杭州" in prompt and "1996" in prompt and "林晓" in prompt
    assert llm["Model"] == "qwen-plus" and llm["MetaInfo"] == {"memory_id": "u_10086"}
    assert llm["UserMessages"], "recent turns go to LLMConfig.UserMessages"
    assert {m["Content"] for m in llm["UserMessages"]} <= stored_texts

    # Agora join and update: the same memory block in properties.llm.system_messages.
    join = json.loads(ok(agora))
    props = join["properties"]
    assert props["labels"] == {"memory_id": "u_10086"}
    assert props["llm"]["params"] == {"model": "qwen-plus", "max_tokens": 512}
    join_system = props["llm"]["system_messages"]
    assert join_system[0] == {"role": "system", "content": PERSONA}
    (block,) = [m["content"] for m in join_system if MEMORY_TAG in m["content"]]
    assert "杭州" in block and "1996" in block
    update = json.loads(ok(agora_update))
    update_system = update["properties"]["llm"]["system_messages"]
    assert update_system[0] == join_system[0]
    # The same profile; what else fills the budget differs: the update quotes none of the newest
    # turns (the agent's own history holds them) while the join, whose agent starts empty, may.
    (update_block,) = [m["content"] for m in update_system if MEMORY_TAG in m["content"]]

    def profile(text: str) -> list[str]:
        return [line for line in text.splitlines() if line.startswith("[资料]")]

    assert profile(update_block) == profile(block) != []
    assert update["properties"]["llm"]["params"] == props["llm"]["params"]  # an update overwrites params

    # OpenAI messages: one system message with the block, then stored turns.
    messages = json.loads(ok(openai))
    assert messages[0]["role"] == "system"
    assert MEMORY_TAG in messages[0]["content"] and "杭州" in messages[0]["content"]
    assert len(messages) > 1
    assert {m["role"] for m in messages[1:]} <= {"user", "assistant"}
    assert {m["content"] for m in messages[1:]} <= stored_texts

    # import into a second database (while the first one deletes the memory), export again: the
    # same document, byte for byte.
    imported, delete_a = convmem_parallel(
        ("import", exported, "--db", db_b), ("delete", "u_10086", "--yes", "--db", db_a), cwd=tmp_path
    )
    assert "imported u_10086" in ok(imported)
    export_b, memories_a = convmem_parallel(
        ("export", "u_10086", "-o", exported_again, "--db", db_b),
        ("memories", "--json", "--db", db_a),
        cwd=tmp_path,
    )
    ok(export_b)
    assert exported_again.read_text(encoding="utf-8") == export_text

    # delete: every row and checkpoint of the memory goes; the other memories stay.
    assert "deleted u_10086" in ok(delete_a)
    assert set(rows_of(db_a, "u_10086").values()) == {0}
    remaining = sorted(m["memory_id"] for m in json.loads(ok(memories_a)))
    assert remaining == [f"dulemon_{i:02d}" for i in range(1, 7)]


# -- 2. bad input ---------------------------------------------------------------------------------
def _session(user: str, text: str, ts: int) -> dict[str, Any]:
    return {
        "user": user,
        "messages": [
            {"role": "user", "content": text, "timestamp": ts},
            {"role": "assistant", "content": "好的，我记住了。", "timestamp": ts + 5_000},
        ],
    }


def test_bad_input_is_quarantined_and_reported(tmp_path: Path) -> None:
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    lines = [
        json.dumps(_session("u_good_a", "我住在杭州。", 1767000000000), ensure_ascii=False),
        '{"user": "u_broken", "messages": [{"role": "user", "content": "cut off',  # corrupt line
        json.dumps(_session("u_good_b", "我是一名医生。", 1767000100000), ensure_ascii=False),
    ]
    (inbox / "chats.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    (inbox / "mystery.json").write_text(json.dumps({"event": "ping", "items": [1, 2]}), encoding="utf-8")
    broken = tmp_path / "broken.json"
    broken.write_text(lines[1], encoding="utf-8")
    good = tmp_path / "good.json"
    good.write_text(json.dumps(_session("u_x", "我养了一只叫豆豆的猫。", 1767000200000), ensure_ascii=False))

    lenient, strict, ingest_broken, ingest_unknown = convmem_parallel(
        ("replay", inbox, "--db", tmp_path / "lenient.db", "--no-progress"),
        ("replay", inbox, "--db", tmp_path / "strict.db", "--no-progress", "--strict", "--json"),
        ("ingest", broken, good, "--memory", "m_broken", "--db", tmp_path / "ingest1.db"),
        ("ingest", inbox / "mystery.json", good, "--memory", "m_unknown", "--db", tmp_path / "ingest2.db"),
        cwd=tmp_path,
    )

    # Without --strict: exit 0 and counts by reason.
    out = ok(lenient)
    assert "quarantined: 1 x json: unreadable document" in out
    assert "quarantined: 1 x auto: unreadable payload" in out
    # With --strict: exit 1, same report.
    assert strict.returncode == 1, strict.stderr
    assert "Traceback" not in strict.stderr
    report = json.loads(strict.stdout)
    assert report["quarantined"] == {"json: unreadable document": 1, "auto: unreadable payload": 1}
    assert report["memories"] == 2 and report["new_messages"] == 4

    for db in ("lenient.db", "strict.db"):
        state = db_state(str(tmp_path / db))
        # Both good documents are stored, the one after the corrupt line too.
        assert {m: s.messages for m, s in state.items()} == {"u_good_a": 2, "u_good_b": 2}
        assert [(k, "杭州" in c, st) for k, c, st in state["u_good_a"].fragments] == [
            ("profile:city", True, "active")
        ]
        assert dict(state["u_good_b"].variables)["occupation"] == '"医生"'
        with closing(sqlite3.connect(tmp_path / db)) as conn:
            dead = sorted(r[0] for r in conn.execute("SELECT path || ' ' || error FROM cm_dead_letters"))
        assert len(dead) == 2
        assert any("chats.jsonl:2" in d for d in dead)
        assert any("unrecognized payload" in d for d in dead)

    # ingest with one bad file: exit 2, one stderr line naming it, the good file ingested.
    for proc, bad_name, memory in (
        (ingest_broken, "broken.json", "m_broken"),
        (ingest_unknown, "mystery.json", "m_unknown"),
    ):
        assert proc.returncode == 2, proc.stderr
        errors = [line for line in proc.stderr.splitlines() if line.strip()]
        assert len(errors) == 1, proc.stderr
        assert errors[0].startswith("convmem ingest: ") and bad_name in errors[0]
        assert f"{memory}: 2 new messages" in proc.stdout
    for db, memory in (("ingest1.db", "m_broken"), ("ingest2.db", "m_unknown")):
        state = db_state(str(tmp_path / db))
        assert list(state) == [memory] and state[memory].messages == 2
        assert any(key == "pet:豆豆" for key, _, _ in state[memory].fragments)


# -- 3 and 4. kill and resume; shards -------------------------------------------------------------
@pytest.fixture(scope="module")
def full_run(tmp_path_factory: pytest.TempPathFactory) -> FullRun:
    return locomo_full_run(tmp_path_factory)


def test_kill_midway_then_resume_equals_uninterrupted_run(full_run: FullRun, tmp_path: Path) -> None:
    archive, expected = full_run.archive, full_run.expected
    total = sum(expected.values())
    args = ("--concurrency", "2")  # two worker processes under the replay process
    at_kill = 0
    for attempt in range(3):
        db = tmp_path / f"killed{attempt}.db"
        proc = start_convmem(*replay_args(archive, db, *args), cwd=tmp_path)
        workers: set[int] = set()
        deadline = time.monotonic() + 120
        while proc.poll() is None:
            if time.monotonic() > deadline:
                proc.kill()
                proc.communicate()
                pytest.fail("the replay did not finish within 120 s")
            workers.update(child_pids(proc.pid))
            stored = count_messages(str(db)) if db.exists() else 0
            # Some lifecycle runs committed, most still to come: kill the replay process now.
            if 0 < stored < total // 2:
                proc.send_signal(signal.SIGKILL)
                break
            time.sleep(0.05)
        proc.communicate(timeout=60)
        if proc.returncode != -signal.SIGKILL:
            continue  # finished before the poll caught it midway: try again
        # Its workers stop with it: nothing is written after the kill.
        gone_by = time.monotonic() + 15
        while any(alive(pid) for pid in workers) and time.monotonic() < gone_by:
            time.sleep(0.05)
        assert not [pid for pid in workers if alive(pid)], "replay workers outlived the killed replay"
        at_kill = count_messages(str(db))
        time.sleep(0.3)
        assert count_messages(str(db)) == at_kill
        if 0 < at_kill < total:
            break
    else:
        pytest.fail(f"3 replays finished (exit {proc.returncode}) before they could be killed midway")

    # The same command again: continues, adds exactly what was missing.
    report = json.loads(ok(convmem(*replay_args(archive, db, *args), cwd=tmp_path)))
    assert report["new_messages"] == total - at_kill
    resumed = db_state(str(db))
    # Identical to the uninterrupted single-process run: fragments, variables, message counts.
    assert resumed == full_run.state
    assert all(s.message_ids == s.messages for s in resumed.values())


def test_two_shards_equal_one_full_run(full_run: FullRun, tmp_path: Path) -> None:
    archive, expected = full_run.archive, full_run.expected
    db = tmp_path / "shards.db"
    first = json.loads(ok(convmem(*replay_args(archive, db, "--shard", "0/2"), cwd=tmp_path)))
    after_first = db_state(str(db))
    second = json.loads(ok(convmem(*replay_args(archive, db, "--shard", "1/2"), cwd=tmp_path)))
    after_both = db_state(str(db))

    assert after_both == full_run.state
    shard0 = set(after_first)
    shard1 = set(after_both) - shard0
    # Each shard alone holds its own memories: disjoint, non-empty, together all of them.
    assert shard0 and shard1 and shard0 | shard1 == set(expected)
    assert all(shard_of(m, 2) == 0 for m in shard0) and all(shard_of(m, 2) == 1 for m in shard1)
    assert {m: after_both[m] for m in shard0} == after_first  # shard 1 left shard 0's memories alone
    assert first["memories"] == len(shard0) and second["memories"] == len(shard1)
    assert first["new_messages"] + second["new_messages"] == sum(expected.values())
