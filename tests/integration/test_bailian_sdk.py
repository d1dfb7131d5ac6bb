"""Generation-A calls made by Alibaba's own generated client (alibabacloud-bailian20231229) against
the Bailian-compatible API served by uvicorn on loopback."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest

pytest.importorskip("fastapi", reason="the server extra (fastapi) is not installed")
pytest.importorskip("alibabacloud_bailian20231229", reason="alibabacloud-bailian20231229 is not installed")

from alibabacloud_bailian20231229 import models as bl  # noqa: E402
from alibabacloud_bailian20231229.client import Client  # noqa: E402
from alibabacloud_tea_openapi.exceptions import ClientException  # noqa: E402
from alibabacloud_tea_openapi.models import Config  # noqa: E402
from fastapi import FastAPI  # noqa: E402

from convmem_graph.memory import ConvMemory  # noqa: E402
from convmem_graph.server.bailian import build_router  # noqa: E402
from tests.integration.live_server import serve  # noqa: E402

pytestmark = pytest.mark.integration

WS = "llm-sdk0test0000"


@pytest.fixture
def client(tmp_path: Path) -> Iterator[Client]:
    mem = ConvMemory.open(str(tmp_path / "sdk.db"))
    app = FastAPI()
    app.include_router(build_router(mem, SimpleNamespace(token=None)))
    with serve(app) as url:
        config = Config(
            access_key_id="test-ak",
            access_key_secret="test-secret",
            endpoint=url.removeprefix("http://"),
            protocol="http",
            read_timeout=10_000,
            connect_timeout=5_000,
        )
        yield Client(config)
    mem.close()


def test_generated_client_round_trip(client: Client) -> None:
    created = client.create_memory(WS, bl.CreateMemoryRequest(description="user-10086"))
    memory_id = created.body.memory_id
    assert memory_id and created.body.request_id

    got = client.get_memory(WS, memory_id, bl.GetMemoryRequest())
    assert (got.body.description, got.body.memory_id, got.body.workspace_id) == ("user-10086", memory_id, WS)
    client.update_memory(WS, memory_id, bl.UpdateMemoryRequest(description="renamed"))
    assert client.get_memory(WS, memory_id, bl.GetMemoryRequest()).body.description == "renamed"

    other = client.create_memory(WS, bl.CreateMemoryRequest(description="other")).body.memory_id
    listed = client.list_memories(WS, bl.ListMemoriesRequest(max_results=1))
    assert listed.body.total_count == 2 and listed.body.next_token
    rest = client.list_memories(WS, bl.ListMemoriesRequest(max_results=1, next_token=listed.body.next_token))
    assert [m.memory_id for m in listed.body.memories + rest.body.memories] == [memory_id, other]
    assert not rest.body.next_token

    node = client.create_memory_node(
        WS, memory_id, bl.CreateMemoryNodeRequest(content="用户喜欢吃辣的食物。")
    )
    node_id = node.body.memory_node_id
    nodes = client.list_memory_nodes(WS, memory_id, bl.ListMemoryNodesRequest(max_results=20))
    assert [(n.memory_node_id, n.content) for n in nodes.body.memory_nodes] == [
        (node_id, "用户喜欢吃辣的食物。")
    ]
    client.update_memory_node(WS, memory_id, node_id, bl.UpdateMemoryNodeRequest(content="用户爱吃川菜。"))
    assert (
        client.get_memory_node(WS, memory_id, node_id, bl.GetMemoryNodeRequest()).body.content
        == "用户爱吃川菜。"
    )
    client.delete_memory_node(WS, memory_id, node_id, bl.DeleteMemoryNodeRequest())

    with pytest.raises(ClientException) as missing_node:
        client.get_memory_node(WS, memory_id, node_id, bl.GetMemoryNodeRequest())
    assert missing_node.value.code == "Memory.MemoryNodeNotFound"
    client.delete_memory(WS, memory_id, bl.DeleteMemoryRequest())
    with pytest.raises(ClientException) as missing:
        client.get_memory(WS, memory_id, bl.GetMemoryRequest())
    assert missing.value.code == "Memory.MemoryIdNotFound"
