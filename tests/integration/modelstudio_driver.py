"""Every call of agentscope-runtime's ``modelstudio_memory`` client, run inside the client's own venv.

Not a test module: ``test_bailian_modelstudio_client.py`` runs it with the Python of a virtualenv
holding only agentscope-runtime and its pins (it does not install beside this package's test
extra), against ``convmem serve`` on loopback::

    <venv>/bin/python modelstudio_driver.py <endpoint> <api key>

It imports nothing of convmem_graph or pytest. The client's answers are checked here (their shapes
are the client's pydantic models); what needs the server's database is checked by the test: at
each ``{"event": ...}`` line on stdout the driver waits for one line on stdin. The last line is
``{"event": "done", "calls": [...]}``, the client calls that succeeded, in order.
"""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

CALLS: list[str] = []


def event(step: str, **data: Any) -> None:
    """Tell the test where we are and wait for it to say go on."""
    print(json.dumps({"event": step, **data}, ensure_ascii=False), flush=True)
    if step != "done" and sys.stdin.readline().strip() != "ok":
        raise SystemExit(f"the test did not confirm {step}")


async def call(tool_class: Any, config: Any, args: Any) -> Any:
    """Run one client component and record its name once it succeeded."""
    tool = tool_class(config=config)
    try:
        out = await tool.arun(args)
    finally:
        await tool.close()
    CALLS.append(tool_class.__name__)
    return out


async def every_call(config: Any, ms: Any, s: Any) -> None:
    """The calls the client ships, in a user's order: schemas, memory, profile, deletes."""
    user = "u_ms_1"

    # Profile schemas: create, get (top-level name and attribute ids), list.
    created = await call(
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
    got = await call(ms.GetProfileSchema, config, s.GetProfileSchemaInput(schema_id=schema_id))
    assert got.name == "companion" and got.description == "陪伴应用的用户画像"
    assert [a.name for a in got.attributes] == ["城市", "口味偏好"]
    ids = [a.attribute_id for a in got.attributes]
    assert all(i.startswith("pa_") for i in ids) and len(set(ids)) == 2
    listed = await call(ms.ListProfileSchemas, config, s.ListProfileSchemasInput(page_num=1, page_size=10))
    assert listed.total == 1
    assert [(p.profile_schema_id, p.name) for p in listed.profile_schemas] == [(schema_id, "companion")]

    # Update the schema: add an attribute, rename one, delete one.
    await call(
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
    got = await call(ms.GetProfileSchema, config, s.GetProfileSchemaInput(schema_id=schema_id))
    assert got.description == "陪伴画像 v2"
    assert [a.name for a in got.attributes] == ["城市", "favourite_team"]
    assert got.attributes[0].attribute_id == ids[0]  # ids are stable across updates

    # Memory: add (with the profile schema), search, list.
    added = await call(
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
    found = await call(
        ms.SearchMemory,
        config,
        s.SearchMemoryInput(user_id=user, messages=[s.Message(role="user", content="芒果")], top_k=3),
    )
    assert found.memory_nodes and "芒果" in found.memory_nodes[0].content
    node_id = found.memory_nodes[0].memory_node_id
    page = await call(ms.ListMemory, config, s.ListMemoryInput(user_id=user, page_num=1, page_size=10))
    assert page.page_num == 1 and page.page_size == 10
    assert node_id in {n.memory_node_id for n in page.memory_nodes}
    event("listed", user=user, total=page.total)

    # The docs' update example: free-form meta_data is kept and shown back.
    await call(
        ms.UpdateMemory,
        config,
        s.UpdateMemoryInput(
            memory_node_id=node_id, custom_content="用户对芒果严重过敏。", meta_data={"location_name": "杭州"}
        ),
    )
    page = await call(ms.ListMemory, config, s.ListMemoryInput(user_id=user))
    node = next(n for n in page.memory_nodes if n.memory_node_id == node_id)
    assert node.content == "用户对芒果严重过敏。"
    assert node.meta_data is not None and node.meta_data["location_name"] == "杭州"

    # The user profile follows the schema's attributes (the test sets favourite_team in the store).
    event("set_variable", user=user, name="favourite_team", value="浙江队")
    profile = await call(ms.GetUserProfile, config, s.GetUserProfileInput(schema_id=schema_id, user_id=user))
    values = {a.name: a.value for a in profile.profile.attributes}
    assert values == {"城市": "杭州", "favourite_team": "浙江队"}, values
    assert [a.id for a in profile.profile.attributes] == [a.attribute_id for a in got.attributes]

    # Delete a node, the schema, the user.
    await call(ms.DeleteMemory, config, s.DeleteMemoryInput(user_id=user, memory_node_id=node_id))
    page = await call(ms.ListMemory, config, s.ListMemoryInput(user_id=user))
    assert node_id not in {n.memory_node_id for n in page.memory_nodes}
    await call(ms.DeleteProfileSchema, config, s.DeleteProfileSchemaInput(schema_id=schema_id))
    try:
        await call(ms.GetProfileSchema, config, s.GetProfileSchemaInput(schema_id=schema_id))
    except ms.MemoryNotFoundError:
        pass
    else:
        raise AssertionError("a deleted profile schema was still found")
    await call(ms.DeleteEntity, config, s.DeleteEntityInput(entity_type="user", entity_id=user))
    event("user_deleted", user=user)
    try:
        await call(ms.DeleteEntity, config, s.DeleteEntityInput(entity_type="user", entity_id=user))
    except ms.MemoryNotFoundError:
        pass
    else:
        raise AssertionError("deleting a deleted user succeeded")


def main() -> None:
    """Run every call against the endpoint given on the command line."""
    # Imported here, not at the top: pytest's doctest collection imports this file in the
    # package's environment, which has no agentscope-runtime.
    import agentscope_runtime.tools.modelstudio_memory as ms
    from agentscope_runtime.tools.modelstudio_memory import schemas as s

    endpoint, api_key = sys.argv[1], sys.argv[2]
    config = ms.MemoryServiceConfig(api_key=api_key, service_endpoint=endpoint)
    asyncio.run(every_call(config, ms, s))
    event("done", calls=CALLS)


if __name__ == "__main__":
    main()
