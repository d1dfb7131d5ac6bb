"""LangGraph Studio's server (``langgraph dev``, in-memory runtime) serves the lifecycle graph as documented.

The server runs without ``--allow-blocking``: a blocking call on its event loop (opening SQLite while
building the run context, say) fails the run. It binds to loopback and stops by itself.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
_STARTUP_S = 180.0


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    exe = shutil.which("langgraph")
    if exe is None:
        pytest.fail("the langgraph CLI is missing: install the test extra (langgraph-cli[inmem])")
    work = tmp_path_factory.mktemp("studio")
    config = {
        "dependencies": [str(REPO)],
        "graphs": {"convmem_lifecycle": f"{REPO}/convmem_graph/studio.py:graph"},
    }
    (work / "langgraph.json").write_text(json.dumps(config))
    port = _free_port()
    env = {
        **os.environ,
        "LANGSMITH_TRACING": "false",
        "LANGCHAIN_TRACING_V2": "false",
        "LANGGRAPH_CLI_NO_ANALYTICS": "1",
    }
    log = (work / "server.log").open("w")
    # `timeout` ends the server even if this test process dies first.
    cmd = ["timeout", "600", exe, "dev", "--no-browser", "--no-reload", "--host", "127.0.0.1"]
    cmd += ["--port", str(port), "--config", str(work / "langgraph.json")]
    proc = subprocess.Popen(cmd, cwd=work, env=env, stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + _STARTUP_S
        while True:
            if proc.poll() is not None:
                output = (work / "server.log").read_text()
                pytest.fail(f"langgraph dev exited with {proc.returncode}:\n{output}")
            try:
                if httpx.get(f"{base}/ok", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"langgraph dev did not start in {_STARTUP_S:.0f} s")
            time.sleep(0.5)
        yield base, work
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=30)
        log.close()


def _assistant(base: str) -> str:
    found = httpx.post(f"{base}/assistants/search", json={"graph_id": "convmem_lifecycle"}, timeout=30).json()
    assert found, "the graph is not listed"
    return str(found[0]["assistant_id"])


def test_schemas_resolve(server: tuple[str, Path]) -> None:
    base, _ = server
    schemas = httpx.get(f"{base}/assistants/{_assistant(base)}/schemas", timeout=60).json()
    for key in ("input_schema", "output_schema", "state_schema", "context_schema"):
        assert isinstance(schemas.get(key), dict), f"{key} is {schemas.get(key)!r}"
    # Studio's input form asks for what a run needs, the memory id, not the 21 state keys.
    assert set(schemas["input_schema"]["properties"]) == {"memory_id"}
    assert schemas["input_schema"]["required"] == ["memory_id"]
    assert {"payload_bodies", "memory_block"} <= set(schemas["output_schema"]["properties"])
    assert {"db_url", "config", "inputs", "vendors"} <= set(schemas["context_schema"]["properties"])
    assert "payload_errors" not in schemas["context_schema"]["properties"]
    assert "payload_errors" in schemas["output_schema"]["properties"]


def test_runs_wait_as_the_readme_says(server: tuple[str, Path]) -> None:
    base, work = server
    db = work / "studio.db"
    body: dict[str, Any] = {
        "assistant_id": "convmem_lifecycle",
        "input": {"memory_id": "u_10086"},
        "context": {
            "db_url": str(db),
            "config": {"bot_ids": ["ai_xiaoyu_bot"]},
            "inputs": [[{"role": "user", "content": "I'm allergic to mango."}]],
            "vendors": ["openai"],
        },
    }
    out = httpx.post(f"{base}/runs/wait", json=body, timeout=120).json()
    log = (work / "server.log").read_text()
    assert "BlockingError" not in log, log[-4000:]
    assert out.get("new_message_ids"), out
    assert "User is allergic to mango." in out["memory_block"]
    system = out["payload_bodies"]["openai"][0]
    assert system["role"] == "system" and "mango" in system["content"]
    assert db.exists()


def test_memory_id_alone_runs_the_lifecycle_and_returns_the_block(server: tuple[str, Path]) -> None:
    from convmem_graph.memory import ConvMemory

    base, work = server
    # No context at all: the server's folder's convmem.db, as the README says.
    with ConvMemory.open(str(work / "convmem.db")) as mem:
        mem.ingest("u_alone", [{"role": "user", "content": "我住在杭州，对芒果过敏。"}], source="openai")
    body = {"assistant_id": "convmem_lifecycle", "input": {"memory_id": "u_alone"}}
    out = httpx.post(f"{base}/runs/wait", json=body, timeout=120).json()
    assert out.get("memory_id") == "u_alone", out
    assert "杭州" in out["memory_block"] and "芒果" in out["memory_block"]
    assert out["payload_bodies"] == {} and out["payload_errors"] == {}


def test_a_vendor_without_its_options_is_reported_not_fatal(server: tuple[str, Path]) -> None:
    base, work = server
    db = work / "recipe.db"
    body: dict[str, Any] = {
        "assistant_id": "convmem_lifecycle",
        "input": {"memory_id": "u_recipe"},
        "context": {
            "db_url": str(db),
            "config": {"bot_ids": ["ai_xiaoyu_bot"]},
            "inputs": [[{"role": "user", "content": "I'm allergic to mango."}]],
            "vendors": ["trtc", "trtc-llmconfig"],
        },
    }
    out = httpx.post(f"{base}/runs/wait", json=body, timeout=120).json()
    assert "User is allergic to mango." in out["memory_block"], out
    assert set(out["payload_bodies"]) == {"trtc-llmconfig"}
    assert "StartAIConversation needs sdk_app_id" in out["payload_errors"]["trtc"]
    assert "inject_options.trtc" in out["payload_errors"]["trtc"]
    # With its options in inject_options (and no `vendors`), trtc is built.
    options = json.loads((REPO / "examples" / "options" / "trtc.json").read_text("utf-8"))
    body["context"] = {
        "db_url": str(db),
        "inject_options": {"trtc": {k: v for k, v in options.items() if not k.startswith("_")}},
    }
    out = httpx.post(f"{base}/runs/wait", json=body, timeout=120).json()
    assert set(out["payload_bodies"]) == {"trtc"} and out["payload_errors"] == {}, out
    assert "mango" in out["payload_bodies"]["trtc"]["LLMConfig"]
