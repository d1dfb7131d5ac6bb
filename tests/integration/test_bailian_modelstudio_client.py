"""Generation-B calls made by Alibaba's newer client, agentscope-runtime's ``modelstudio_memory``.

Every component the client ships is called against the Bailian-compatible API served by uvicorn
on loopback: AddMemory, SearchMemory, ListMemory, UpdateMemory (with the docs' update example,
``meta_data: {"location_name": "杭州"}``), DeleteMemory, CreateProfileSchema, GetProfileSchema
(``name`` and ``attributes[].attribute_id`` at the top level), ListProfileSchemas,
UpdateProfileSchema (``attributes_operations`` add / update / delete), GetUserProfile,
DeleteProfileSchema and DeleteEntity. The client is async (aiohttp).

agentscope-runtime is not in the test extra: 1.1.6 does not install cleanly beside this package
(it needs ``mcp<2`` for FastMCP while agentscope 2 needs ``mcp>=2``, and it moves pydantic). The
test runs where it is installed (``pip install agentscope-runtime==1.1.6.post2 'mcp<2'`` in a
virtualenv) and is skipped elsewhere.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

pytest.importorskip("fastapi", reason="the server extra (fastapi) is not installed")
ms = pytest.importorskip(
    "agentscope_runtime.tools.modelstudio_memory", reason="agentscope-runtime is not installed"
)
schemas = pytest.importorskip("agentscope_runtime.tools.modelstudio_memory.schemas")

from fastapi import FastAPI  # noqa: E402

from convmem_graph.memory import ConvMemory  # noqa: E402
from convmem_graph.server.bailian import API_PREFIX, build_router  # noqa: E402
from tests.integration.live_server import serve  # noqa: E402

pytestmark = pytest.mark.integration


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[Any, ConvMemory]]:
    mem = ConvMemory.open(str(tmp_path / "ms.db"))
    app = FastAPI()
    app.include_router(build_router(mem, SimpleNamespace(token=None)))
    with serve(app) as url:
        yield ms.MemoryServiceConfig(api_key="sk-test", service_endpoint=url + API_PREFIX), mem
    mem.close()


async def _call(tool_class: Any, config: Any, args: Any) -> Any:
    tool = tool_class(config=config)
    try:
        return await tool.arun(args)
    finally:
        await tool.close()


def test_every_modelstudio_memory_call(served: tuple[Any, ConvMemory]) -> None:
    config, mem = served
    asyncio.run(_every_call(config, mem))


async def _every_call(config: Any, mem: ConvMemory) -> None:
    s = schemas
    user = "u_ms_1"

    # Profile schemas: create, get (top-level name and attribute ids), list.
    created = await _call(
        ms.CreateProfileSchema,
        config,
        s.CreateProfileSchemaInput(
            name="companion",
            description="陪伴应用的用户画像",
            attributes=[
                s.ProfileAttribute(name="城市", description="常住城市"),
                s.ProfileAttribute(name="口味偏好", description="喜欢的口味"),
            ],
        ),
    )
    schema_id = created.profile_schema_id
    assert schema_id and created.request_id
    got = await _call(ms.GetProfileSchema, config, s.GetProfileSchemaInput(schema_id=schema_id))
    assert got.name == "companion" and got.description == "陪伴应用的用户画像"
    assert [a.name for a in got.attributes] == ["城市", "口味偏好"]
    ids = [a.attribute_id for a in got.attributes]
    assert all(i.startswith("pa_") for i in ids) and len(set(ids)) == 2
    listed = await _call(ms.ListProfileSchemas, config, s.ListProfileSchemasInput(page_num=1, page_size=10))
    assert listed.total == 1
    assert [(p.profile_schema_id, p.name) for p in listed.profile_schemas] == [(schema_id, "companion")]

    # Update the schema: add an attribute, rename one, delete one.
    await _call(
        ms.UpdateProfileSchema,
        config,
        s.UpdateProfileSchemaInput(
            schema_id=schema_id,
            description="陪伴画像 v2",
            attributes_operations=[
                s.AttributeOperation(op="add", name="favourite_team", description="支持的球队"),
                s.AttributeOperation(op="update", attribute_id=ids[1], description="口味"),
                s.AttributeOperation(op="delete", attribute_id=ids[1]),
            ],
        ),
    )
    got = await _call(ms.GetProfileSchema, config, s.GetProfileSchemaInput(schema_id=schema_id))
    assert got.description == "陪伴画像 v2"
    assert [a.name for a in got.attributes] == ["城市", "favourite_team"]
    assert got.attributes[0].attribute_id == ids[0]  # ids are stable across updates

    # Memory: add (with the profile schema), search, list.
    added = await _call(
        ms.AddMemory,
        config,
        s.AddMemoryInput(
            user_id=user,
            messages=[
                s.Message(role="user", content="我住在杭州，我对芒果过敏。"),
                s.Message(role="assistant", content="好的，记住了。"),
            ],
            profile_schema=schema_id,
        ),
    )
    assert added.request_id and added.memory_nodes
    assert {n.event for n in added.memory_nodes} == {"ADD"}
    found = await _call(
        ms.SearchMemory,
        config,
        s.SearchMemoryInput(user_id=user, messages=[s.Message(role="user", content="芒果")], top_k=3),
    )
    assert found.memory_nodes and "芒果" in found.memory_nodes[0].content
    node_id = found.memory_nodes[0].memory_node_id
    page = await _call(ms.ListMemory, config, s.ListMemoryInput(user_id=user, page_num=1, page_size=10))
    assert page.total == len(mem.fragments(user)) and page.page_num == 1 and page.page_size == 10
    assert node_id in {n.memory_node_id for n in page.memory_nodes}

    # The docs' update example: free-form meta_data is kept and shown back.
    await _call(
        ms.UpdateMemory,
        config,
        s.UpdateMemoryInput(
            memory_node_id=node_id, custom_content="用户对芒果严重过敏。", meta_data={"location_name": "杭州"}
        ),
    )
    page = await _call(ms.ListMemory, config, s.ListMemoryInput(user_id=user))
    node = next(n for n in page.memory_nodes if n.memory_node_id == node_id)
    assert node.content == "用户对芒果严重过敏。"
    assert node.meta_data is not None and node.meta_data["location_name"] == "杭州"

    # The user profile follows the schema's attributes.
    mem.set_variable(user, "favourite_team", "浙江队")
    profile = await _call(ms.GetUserProfile, config, s.GetUserProfileInput(schema_id=schema_id, user_id=user))
    values = {a.name: a.value for a in profile.profile.attributes}
    assert values == {"城市": "杭州", "favourite_team": "浙江队"}
    assert [a.id for a in profile.profile.attributes] == [a.attribute_id for a in got.attributes]

    # Delete a node, the schema, the user.
    await _call(ms.DeleteMemory, config, s.DeleteMemoryInput(user_id=user, memory_node_id=node_id))
    page = await _call(ms.ListMemory, config, s.ListMemoryInput(user_id=user))
    assert node_id not in {n.memory_node_id for n in page.memory_nodes}
    await _call(ms.DeleteProfileSchema, config, s.DeleteProfileSchemaInput(schema_id=schema_id))
    with pytest.raises(ms.MemoryNotFoundError):
        await _call(ms.GetProfileSchema, config, s.GetProfileSchemaInput(schema_id=schema_id))
    await _call(ms.DeleteEntity, config, s.DeleteEntityInput(entity_type="user", entity_id=user))
    assert [i.memory_id for i in mem.memories()] == []
    with pytest.raises(ms.MemoryNotFoundError):
        await _call(ms.DeleteEntity, config, s.DeleteEntityInput(entity_type="user", entity_id=user))
