"""Import hygiene: the modules a call start needs do not pull in LangGraph, LangChain or LangSmith.

Each import runs in a fresh interpreter (this test process has them loaded already).
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from contextlib import closing
from pathlib import Path

import pytest

HEAVY = ("langgraph", "langchain_core", "langchain", "langsmith")

LIGHT_MODULES = [
    "convmem_graph",
    "convmem_graph.config",
    "convmem_graph.tokens",
    "convmem_graph.models",
    "convmem_graph.store",
    "convmem_graph.extractors",
    "convmem_graph.text.keys",
]


def _loaded_after(module: str) -> list[str]:
    code = (
        "import importlib, json, sys; importlib.import_module(sys.argv[1]); "
        "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules})))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, module], capture_output=True, text=True, check=True, timeout=120
    )
    top: list[str] = json.loads(out.stdout)
    return top


@pytest.mark.parametrize("module", LIGHT_MODULES)
def test_light_modules_do_not_import_langgraph_or_langchain(module: str) -> None:
    loaded = _loaded_after(module)
    assert not [m for m in HEAVY if m in loaded], f"{module} imports {[m for m in HEAVY if m in loaded]}"


def test_the_check_sees_a_heavy_import() -> None:
    assert "langgraph" in _loaded_after("convmem_graph.graph")


def _fill_memory(db: str) -> None:
    from convmem_graph.memory import ConvMemory

    with ConvMemory.open(db) as mem:
        turn = [
            {"role": "user", "content": "我住在杭州，我对芒果过敏。"},
            {"role": "assistant", "content": "好的"},
        ]
        mem.ingest("m1", turn, source="openai")


@pytest.mark.parametrize("vendor", ["trtc-llmconfig", "agora-llm", "agora-custom", "openai"])
def test_a_call_start_imports_no_langgraph_langchain_or_langsmith(tmp_path: Path, vendor: str) -> None:
    db = str(tmp_path / "call.db")
    _fill_memory(db)
    code = (
        "import json, sys\n"
        "from convmem_graph.memory import ConvMemory\n"
        "mem = ConvMemory.open(sys.argv[1])\n"
        "body = mem.payload('m1', sys.argv[2], query='芒果', **json.loads(sys.argv[3]))\n"
        "assert '芒果' in json.dumps(body, ensure_ascii=False)\n"
        "mem.close()\n"
        "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules})))\n"
    )
    options = {"llm": {"url": "http://127.0.0.1:9/v1/chat/completions"}} if vendor.startswith("agora") else {}
    cmd = [sys.executable, "-c", code, db, vendor, json.dumps(options)]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    loaded = json.loads(out.stdout)
    assert not [m for m in HEAVY if m in loaded], (
        f"{vendor} payload imports {[m for m in HEAVY if m in loaded]}"
    )


def test_the_langchain_payload_still_builds_langchain_messages(tmp_path: Path) -> None:
    # The one vendor that returns LangChain objects imports LangChain Core when it is asked for.
    db = str(tmp_path / "call.db")
    _fill_memory(db)
    from convmem_graph.memory import ConvMemory

    with ConvMemory.open(db) as mem:
        messages = mem.payload("m1", "langchain", query="芒果")
    assert type(messages[0]).__name__ == "SystemMessage" and "芒果" in str(messages[0].content)


def _imported_by(args: list[str]) -> set[str]:
    cmd = [sys.executable, "-X", "importtime", "-m", "convmem_graph", *args]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    return {line.rsplit("|", 1)[-1].strip().split(".")[0] for line in out.stderr.splitlines() if "|" in line}


@pytest.mark.parametrize(
    "command",
    [
        ["inject", "m1", "--vendor", "openai"],
        ["inject", "m1", "--vendor", "trtc-llmconfig"],
        ["show", "m1"],
        ["memories"],
    ],
)
def test_cli_call_start_commands_import_no_langgraph_langchain_or_langsmith(
    tmp_path: Path, command: list[str]
) -> None:
    db = str(tmp_path / "cli.db")
    _fill_memory(db)
    imported = _imported_by([*command, "--db", db])
    assert "convmem_graph" in imported  # the check reads real import lines
    assert not [m for m in HEAVY if m in imported], (
        f"convmem {command[0]} imports {sorted(imported & set(HEAVY))}"
    )


def test_convmem_inject_prints_the_memory(tmp_path: Path) -> None:
    db = str(tmp_path / "cli.db")
    _fill_memory(db)
    cmd = [sys.executable, "-m", "convmem_graph", "inject", "m1", "--vendor", "openai", "--db", db]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "杭州" in out.stdout


def test_convmem_inject_on_a_current_file_reads_it_without_sqlalchemy(tmp_path: Path) -> None:
    db = str(tmp_path / "cli.db")
    _fill_memory(db)
    imported = _imported_by(["inject", "m1", "--vendor", "trtc-llmconfig", "--query", "芒果", "--db", db])
    assert "convmem_graph" in imported and "sqlalchemy" not in imported
    # The sqlite:/// form of the same file takes the same read-only path.
    assert "sqlalchemy" not in _imported_by(["inject", "m1", "--vendor", "openai", "--db", f"sqlite:///{db}"])
    # A memory the read-only path cannot serve (no cached snapshot) goes through the store, as before.
    with closing(sqlite3.connect(db)) as conn, conn:
        conn.execute("DELETE FROM cm_snapshots")
    assert "sqlalchemy" in _imported_by(["inject", "m1", "--vendor", "openai", "--db", f"sqlite:///{db}"])


def test_a_closed_output_pipe_ends_quietly(tmp_path: Path) -> None:
    db = str(tmp_path / "cli.db")
    _fill_memory(db)
    cmd = [sys.executable, "-m", "convmem_graph", "show", "m1", "--json", "--db", db]
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE) as proc:
        assert proc.stdout is not None and proc.stderr is not None
        proc.stdout.close()  # as `| head -c0` does
        err = proc.stderr.read().decode()
        code = proc.wait(timeout=120)
    assert (code, err) == (141, "")


#: An English replay, then a Chinese line: the Chinese sentence rules load only for the latter.
_ZH_RULES_CODE = """
import json, sys
from convmem_graph.memory import ConvMemory
loaded = []
with ConvMemory.open(sys.argv[1]) as mem:
    mem.ingest("m1", [{"role": "user", "content": "I moved to Leeds last year and I'm allergic to peanuts."}],
               source="openai")
    loaded.append("convmem_graph.extractors._rules_zh" in sys.modules)
    mem.ingest("m1", [{"role": "user", "content": "我住在杭州，我对芒果过敏。"}], source="openai")
    loaded.append("convmem_graph.extractors._rules_zh" in sys.modules)
    facts = sorted(f.key for f in mem.fragments("m1"))
print(json.dumps([loaded, facts]))
"""


def test_chinese_rules_load_at_the_first_chinese_line(tmp_path: Path) -> None:
    # Compiling their patterns is ~60 ms of a fresh process's fixed cost (issue 24 item 3).
    out = subprocess.run(
        [sys.executable, "-c", _ZH_RULES_CODE, str(tmp_path / "m.db")],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    loaded, facts = json.loads(out.stdout.strip().splitlines()[-1])
    assert loaded == [False, True]
    assert {"allergy:peanuts", "allergy:芒果"} <= set(facts), facts  # both languages' rules ran
