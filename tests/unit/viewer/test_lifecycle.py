"""The lifecycle page of a memory whose runs kept only their end state (durability "exit", the default)."""

from __future__ import annotations

import json
import re
from pathlib import Path

from convmem_graph.memory import ConvMemory
from convmem_graph.replay import Replayer
from convmem_graph.viewer.lifecycle import last_run, lifecycle_page


def _replayed(tmp_path: Path) -> ConvMemory:
    archive = tmp_path / "archive.jsonl"
    turns = ["我对芒果过敏。", "我住在杭州。", "我女儿今年六岁了。"]
    lines = [[{"id": f"m{n}", "role": "user", "content": text}] for n, text in enumerate(turns)]
    archive.write_text("\n".join(json.dumps(x, ensure_ascii=False) for x in lines) + "\n", encoding="utf-8")
    # As `convmem replay` opens it: end-state checkpoints only.
    mem = ConvMemory.open(str(tmp_path / "replayed.db"), durability="exit")
    Replayer(mem.lifecycle, source="openai", memory_id="u_r", batch_messages=2).run([archive])
    return mem


def test_a_replayed_memory_keeps_per_node_timings_of_its_last_run(tmp_path: Path) -> None:
    mem = _replayed(tmp_path)
    try:
        run = last_run(mem, "u_r")
        assert run["note"] == ""
        assert run["path"][:2] == ["ingest", "normalize"] and run["path"][-1] == "inject"
        assert all(isinstance(s["ms"], float) and s["ms"] >= 0 for s in run["steps"])
        page = lifecycle_page(mem, "u_r")
    finally:
        mem.close()
    assert "kept only its end state" not in page
    steps = page.split('<table class="steps">')[1].split("</table>")[0]
    timed = re.findall(r'<tr><td>([a-z_]+)</td><td class="num">(\d+\.\d)</td></tr>', steps)
    assert [node for node, _ in timed] == run["path"]
    # The ran nodes are lit in the drawing.
    assert 'class="node ran" data-node="ingest"' in page


def test_a_run_history_of_sync_checkpoints_still_reads(tmp_path: Path) -> None:
    with ConvMemory.open(str(tmp_path / "sync.db"), durability="sync") as mem:  # every step checkpointed
        mem.ingest("u_s", [{"role": "user", "content": "我对芒果过敏。"}], source="openai")
        run = last_run(mem, "u_s")
    assert run["note"] == "" and run["path"][0] == "ingest" and len(run["steps"]) >= 3


def test_live_turns_with_the_default_durability_draw_their_path_from_the_end_state(tmp_path: Path) -> None:
    with ConvMemory.open(str(tmp_path / "live.db")) as mem:
        assert mem.lifecycle.durability == "exit"
        mem.ingest("u_l", [{"role": "user", "content": "我住在杭州。"}], source="openai")
        mem.ingest("u_l", [{"role": "user", "content": "我对芒果过敏。"}], source="openai")
        history = list(mem.lifecycle.graph.get_state_history({"configurable": {"thread_id": "convmem:u_l"}}))
        run = last_run(mem, "u_l")
        page = lifecycle_page(mem, "u_l")
    # One checkpoint per run, yet the last run's whole path and per-node times are there.
    assert len(history) == 2
    assert run["note"] == ""
    assert run["path"] == ["ingest", "normalize", "extract", "update_variables", "summarize", "inject"]
    assert list(history[0].values["node_ms"]) == run["path"]  # kept in run order
    steps = page.split('<table class="steps">')[1].split("</table>")[0]
    timed = re.findall(r'<tr><td>([a-z_]+)</td><td class="num">(\d+\.\d)</td></tr>', steps)
    assert [node for node, _ in timed] == run["path"]
    assert 'class="node ran" data-node="update_variables"' in page
