"""Run each script in examples/ as a subprocess, as a user would, and check what it prints."""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from convmem_graph.memory import ConvMemory

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"
CONVMEM_NODES = ("ingest", "normalize", "extract", "update_variables", "inject")


def run_example(name: str, *args: str) -> str:
    """Run ``examples/<name>`` from the repo root; assert a clean exit and return stdout."""
    env = dict(os.environ)
    # Chinese output through a pipe, and no tracing call to any service.
    env.update({"PYTHONIOENCODING": "utf-8", "LANGSMITH_TRACING": "false", "LANGCHAIN_TRACING_V2": "false"})
    proc = subprocess.run(
        [sys.executable, str(EXAMPLES / name), *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        encoding="utf-8",
        timeout=120,
    )
    assert proc.returncode == 0, (
        f"{name} exited {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    )
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc.stdout


def sections(stdout: str) -> dict[str, str]:
    """Split an example's output on its ``=== title ===`` headers."""
    parts = re.split(r"^=== (.+) ===$", stdout, flags=re.M)
    return {title: body.strip() for title, body in zip(parts[1::2], parts[2::2], strict=True)}


@pytest.mark.parametrize("name", ["companion.py", "agent_middleware.py", "custom_graph.py"])
def test_example_is_documented_and_guarded(name: str) -> None:
    tree = ast.parse((EXAMPLES / name).read_text(encoding="utf-8"))
    doc = ast.get_docstring(tree) or ""
    assert f"python examples/{name}" in doc
    guards = [
        node
        for node in tree.body
        if isinstance(node, ast.If) and ast.unparse(node.test) == "__name__ == '__main__'"
    ]
    assert len(guards) == 1
    assert ast.unparse(guards[0].body[0]) == "main()"
    assert f"python examples/{name}" in (EXAMPLES / "README.md").read_text(encoding="utf-8")


def test_companion_prints_trtc_and_agora_bodies_with_memory(tmp_path: Path) -> None:
    db = tmp_path / "companion.db"
    out = sections(run_example("companion.py", str(db)))

    assert 'city: "杭州" (inferred)' in out["memory u_10086: variables"]
    assert 'name: "林晓" (inferred)' in out["memory u_10086: variables"]
    assert "用户养了一只叫年糕的橘猫。" in out["memory u_10086: fragments"]
    assert "TRTC call:  7 new messages" in out["ingest"]

    body = json.loads(out["TRTC StartAIConversation body (send as is)"])
    assert sorted(body) == [
        "AgentConfig",
        "LLMConfig",
        "RoomId",
        "RoomIdType",
        "STTConfig",
        "SdkAppId",
        "TTSConfig",
    ]
    assert body["AgentConfig"]["UserId"] == "ai_xiaoyu_bot"
    assert isinstance(body["LLMConfig"], str)  # TRTC takes LLMConfig as a JSON string
    llm = json.loads(body["LLMConfig"])
    assert llm == json.loads(out["TRTC LLMConfig, decoded for reading"])
    prompt = llm["SystemPrompt"]
    assert prompt.startswith("你是「小雨」")
    assert "<user_memory>" in prompt and "</user_memory>" in prompt
    assert "杭州" in prompt and "林晓" in prompt
    assert llm["History"] == 10 and llm["Model"] == "qwen-plus"
    # recent_turns=6 in examples/options/trtc.json: the call's last three rounds.
    assert len(llm["UserMessages"]) == 6
    assert llm["UserMessages"][-1] == {"Role": "assistant", "Content": "对，钟水饺可以选不加红油的版本。"}

    join = json.loads(out["Agora ConvoAI join body"])
    assert "_comment" not in join
    assert join["name"] == "xiaoyu-u10086-demo"
    assert join["properties"]["channel"] == "convmem_u10086_demo"
    llm_props = join["properties"]["llm"]
    assert llm_props["vendor"] == "custom" and llm_props["max_history"] == 32
    memory_message = llm_props["system_messages"][-1]["content"]
    assert memory_message.startswith("<user_memory>") and "杭州" in memory_message

    # The database given on the command line keeps the memory.
    with ConvMemory.open(str(db)) as mem:
        assert mem.variables("u_10086")["city"].value == "杭州"
        assert mem.info("u_10086").memory_id == "u_10086"


def test_agent_middleware_injects_memory_and_records_turns(tmp_path: Path) -> None:
    out = sections(run_example("agent_middleware.py", str(tmp_path / "agent.db")))

    first = out["turn 1: system message the model received"]
    assert first.startswith("你是「小雨」")
    assert "<user_memory>" in first and "林晓" in first and "杭州" in first
    assert "芒果" not in first  # not known before turn 1 was recorded

    second = out["turn 2: system message the model received"]
    assert "<user_memory>" in second
    assert "用户对芒果过敏。" in second  # the fact told in turn 1

    # The block is per request: agent state keeps no system message.
    assert out["turn 1: message types kept in agent state"] == "['human', 'ai']"
    assert out["turn 2: message types kept in agent state"] == "['human', 'ai']"
    assert "- 用户对芒果过敏。" in out["memory after both turns"]
    assert "芒果" not in out["memory before the agent runs"]


def test_custom_graph_composes_convmem_nodes(tmp_path: Path) -> None:
    out = sections(run_example("custom_graph.py", str(tmp_path / "app.db")))

    mermaid = out["graph (Mermaid)"]
    assert "graph TD;" in mermaid
    for node in (*CONVMEM_NODES, "respond"):
        assert f"\t{node}({node})" in mermaid
    assert "inject --> respond;" in mermaid
    assert "respond --> __end__;" in mermaid
    assert "summarize" not in mermaid

    system = out["system message the model received"]
    assert system.startswith("你是「小雨」")
    assert "<user_memory>" in system
    assert "林晓" in system  # from the IM history ingested in the same run
    assert "用户对芒果过敏。" in system  # from the app's new user message
    assert out["reply"]
    assert "payloads returned by inject: ['openai']" in out["run"]
    assert "'reply'" in out["keys of the checkpointed state (thread_id = memory id)"]
