"""A lifecycle run SIGKILLed at any node boundary loses no message or fact, whatever the durability.

The lifecycle checkpoints with ``durability="exit"`` by default: one checkpoint per run, so a
killed run leaves none of its own. What makes that safe is the store: every node commits its
store writes before the next node starts (on PostgreSQL the run is one transaction: all or
nothing), and the next run resumes from the store's cursors. Each case kills a child process right
after one node returned (its writes made, the next node not begun), then a new process catches up
(an empty run, as the next turn would) and receives the killed turn again (a sender that saw no
answer retries); the stored messages, facts, variables and summary must equal those of a run that
was never killed. A kill right after ``ingest`` (which only reads the payloads; ``normalize``
stores them, and payloads are never checkpointed under any durability) leaves the turn unstored
until it is sent again, as a kill before the run began would.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from convmem_graph.memory import ConvMemory
from convmem_graph.state import RawInput
from tests.backends import fresh_schema

NOW = 1_767_312_000_000
NODES = ("ingest", "normalize", "extract", "update_variables", "summarize", "inject")
TURNS = [
    ("我叫小林，住在杭州。", "你好小林！"),
    ("我对芒果过敏。", "记住了。"),
    ("我女儿今年六岁了。", "真可爱。"),
    ("我最近特别喜欢羽毛球，每周都去。", "听起来很棒！"),
    # The last turn runs all six nodes: a new fact, a changed variable, the session's summary.
    ("下周六我要去上海出差，我喜欢喝拿铁。", "一路顺风。"),
]

_CHILD = """
import functools, os, signal, sys
import convmem_graph.graph as graph
from tests.integration.test_lifecycle_kill import live_turns, open_memory

url, node, durability = sys.argv[1], sys.argv[2], sys.argv[3]
armed = []
real = getattr(graph, node)

@functools.wraps(real)  # keeps the signature LangGraph reads to pass the runtime
def killed_after(*args, **kwargs):
    out = real(*args, **kwargs)
    if armed:
        os.kill(os.getpid(), signal.SIGKILL)  # nothing after this node runs, nothing is closed
    return out

setattr(graph, node, killed_after)  # before the graph is compiled on the first run
mem = open_memory(url, durability)
*before, last = live_turns()
for raw, ended in before:
    mem.lifecycle.run("u1", [raw], session_ended=ended)
armed.append(True)
mem.lifecycle.run("u1", [last[0]], session_ended=last[1])
sys.exit(3)  # not reached: the node above was not on the last turn's path
"""


def live_turns() -> list[tuple[RawInput, bool]]:
    """The turns of the conversation, each with whether it ends the session (only the last does)."""
    return [
        (
            RawInput([{"role": "user", "content": u}, {"role": "assistant", "content": a}], name=f"t{i}"),
            i == len(TURNS) - 1,
        )
        for i, (u, a) in enumerate(TURNS)
    ]


def open_memory(url: str, durability: Any = None) -> ConvMemory:
    """The memory as every process of a case opens it (fixed clock: the facts must not expire)."""
    if durability in (None, "default"):
        return ConvMemory.open(url, clock=lambda: NOW)
    return ConvMemory.open(url, clock=lambda: NOW, durability=durability)


def stored(mem: ConvMemory) -> dict[str, Any]:
    """Everything a run stores for ``u1`` that a kill could lose or duplicate."""
    store = mem.store
    summary = store.get_summary("u1")
    return {
        "messages": [(m.role, m.content) for m in store.recent_messages("u1", 100)],
        "facts": sorted((f.content, f.category, f.status) for f in store.list_fragments("u1", status=None)),
        "variables": {k: v.value for k, v in store.get_variables("u1").items()},
        "summary": summary.text if summary else None,
    }


def _clean(url: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """What an unkilled run stores: before the last turn, and after it."""
    with open_memory(url) as mem:
        *before, (last, ended) = live_turns()
        for raw, first_ended in before:
            mem.lifecycle.run("u1", [raw], session_ended=first_ended)
        ahead = stored(mem)
        mem.lifecycle.run("u1", [last], session_ended=ended)
        return ahead, stored(mem)


def _kill_and_resume(url: str, node: str, durability: str) -> tuple[dict[str, Any], dict[str, Any]]:
    root = str(Path(__file__).resolve().parents[2])
    child = subprocess.run(
        [sys.executable, "-c", _CHILD, url, node, durability],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert child.returncode == -signal.SIGKILL, child.stderr[-2000:]
    raw, ended = live_turns()[-1]
    with open_memory(url, durability) as mem:
        mem.lifecycle.run("u1", [], session_ended=ended)  # the next run, with nothing new
        caught_up = stored(mem)
        mem.lifecycle.run("u1", [raw], session_ended=ended)  # the killed turn delivered again
        return caught_up, stored(mem)


@pytest.fixture(scope="module")
def clean_sqlite(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], dict[str, Any]]:
    return _clean(str(tmp_path_factory.mktemp("clean") / "clean.db"))


def _check(node: str, caught_up: dict[str, Any], resent: dict[str, Any], clean: Any) -> None:
    ahead, after = clean
    if node == "ingest":
        # ingest only reads the payloads (normalize stores them), and they are never checkpointed
        # under any durability: the turn is the sender's until a run returns, so here it must be
        # sent again. Nothing of it was half-stored.
        assert (caught_up["messages"], caught_up["facts"]) == (ahead["messages"], ahead["facts"])
    else:
        assert caught_up == after
    assert resent == after


@pytest.mark.parametrize("node", NODES)
def test_a_kill_after_any_node_loses_nothing_with_exit_durability(
    node: str, clean_sqlite: Any, tmp_path: Path
) -> None:
    caught_up, resent = _kill_and_resume(str(tmp_path / "killed.db"), node, "default")
    _check(node, caught_up, resent, clean_sqlite)


@pytest.mark.parametrize("node", ["extract", "summarize"])
def test_a_kill_loses_nothing_with_sync_durability_either(
    node: str, clean_sqlite: Any, tmp_path: Path
) -> None:
    caught_up, resent = _kill_and_resume(str(tmp_path / "killed.db"), node, "sync")
    _check(node, caught_up, resent, clean_sqlite)


def test_the_default_durability_is_exit(tmp_path: Path) -> None:
    with open_memory(str(tmp_path / "d.db")) as mem:
        assert mem.lifecycle.durability == "exit"


@pytest.mark.parametrize("node", ["normalize", "update_variables", "inject"])
def test_a_kill_on_postgresql_rolls_the_whole_run_back(node: str, pg_base_url: str) -> None:
    """On PostgreSQL a run is one transaction: a kill stores none of it, and the resent turn all of it."""
    with fresh_schema(pg_base_url, "cm_kill") as clean_url, fresh_schema(pg_base_url, "cm_kill") as url:
        ahead, after = _clean(clean_url)
        caught_up, resent = _kill_and_resume(url, node, "default")
    assert (caught_up["messages"], caught_up["facts"]) == (ahead["messages"], ahead["facts"])
    assert resent == after
