"""Bailian generation-B routes as Alibaba's docs and clients use them (issue 26, item 2), in process.

The shapes the newer client (agentscope-runtime ``modelstudio_memory``) parses: get-profile-schema
with ``name`` and ``attributes[].attribute_id`` at the top level; list / update / delete of profile
schemas; the docs' node update example with free-form ``meta_data``; ``DELETE /entities/user/{id}``.
``tests/integration/test_bailian_modelstudio_client.py`` drives the same routes with the client.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

pytest.importorskip("fastapi", reason="the server extra (fastapi) is not installed")

from fastapi import FastAPI  # noqa: E402
from fastapi.testclient import TestClient  # noqa: E402

from convmem_graph.memory import ConvMemory  # noqa: E402
from convmem_graph.server.bailian import API_PREFIX, build_router  # noqa: E402
from convmem_graph.store.registry import node_meta  # noqa: E402

B = API_PREFIX


@pytest.fixture
def mem(tmp_path: Path) -> Iterator[ConvMemory]:
    memory = ConvMemory.open(str(tmp_path / "b.db"))
    yield memory
    memory.close()


@pytest.fixture
def client(mem: ConvMemory) -> TestClient:
    app = FastAPI()
    app.include_router(build_router(mem, SimpleNamespace(token=None)))
    return TestClient(app)


def _ok(response: Any) -> dict[str, Any]:
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    assert body["request_id"]
    return body


def _schema(client: TestClient, name: str = "companion") -> str:
    body = {"name": name, "attributes": [{"name": "城市", "description": "常住城市"}, {"name": "口味偏好"}]}
    return str(_ok(client.post(f"{B}/profile_schemas", json=body))["profile_schema_id"])


def test_get_profile_schema_has_the_documented_top_level_fields(client: TestClient) -> None:
    schema_id = _schema(client)
    got = _ok(client.get(f"{B}/profile_schemas/{schema_id}"))
    assert got["name"] == "companion" and got["profile_schema_id"] == schema_id
    assert [a["name"] for a in got["attributes"]] == ["城市", "口味偏好"]
    assert all(a["attribute_id"].startswith("pa_") for a in got["attributes"])
    assert "profile_schema" not in got
    again = _ok(client.get(f"{B}/profile_schemas/{schema_id}"))
    assert [a["attribute_id"] for a in again["attributes"]] == [a["attribute_id"] for a in got["attributes"]]


def test_list_profile_schemas_pages(client: TestClient) -> None:
    ids = [_schema(client, f"s{n}") for n in range(3)]
    first = _ok(client.get(f"{B}/profile_schemas", params={"page_num": 1, "page_size": 2}))
    second = _ok(client.get(f"{B}/profile_schemas", params={"page_num": 2, "page_size": 2}))
    assert first["total"] == second["total"] == 3
    listed = first["profile_schemas"] + second["profile_schemas"]
    assert [p["profile_schema_id"] for p in listed] == ids
    assert [p["name"] for p in listed] == ["s0", "s1", "s2"]


def test_update_profile_schema_operations(client: TestClient) -> None:
    schema_id = _schema(client)
    city, taste = (
        a["attribute_id"] for a in _ok(client.get(f"{B}/profile_schemas/{schema_id}"))["attributes"]
    )
    ops = [
        {"op": "add", "name": "favourite_team", "description": "球队", "default_value": "无"},
        {"op": "update", "attribute_id": city, "description": "现居城市"},
        {"op": "delete", "attribute_id": taste},
    ]
    _ok(client.patch(f"{B}/profile_schemas/{schema_id}", json={"name": "v2", "attributes_operations": ops}))
    got = _ok(client.get(f"{B}/profile_schemas/{schema_id}"))
    assert got["name"] == "v2"
    assert [(a["name"], a["description"]) for a in got["attributes"]] == [
        ("城市", "现居城市"),
        ("favourite_team", "球队"),
    ]
    assert got["attributes"][0]["attribute_id"] == city and got["attributes"][1]["default_value"] == "无"


@pytest.mark.parametrize(
    ("ops", "status", "field"),
    [
        (
            [{"op": "update", "attribute_id": "pa_nope", "name": "x"}],
            404,
            "attributes_operations[0].attribute_id",
        ),
        ([{"op": "delete"}], 400, "attributes_operations[0].attribute_id"),
        ([{"op": "add"}], 400, "attributes_operations[0].name"),
        ([{"op": "add", "name": "城市"}], 400, "attributes_operations[0].name"),
        ([{"op": "rename", "name": "x"}], 400, "attributes_operations"),
    ],
)
def test_update_profile_schema_refuses_bad_operations_and_changes_nothing(
    client: TestClient, ops: list[dict[str, Any]], status: int, field: str
) -> None:
    schema_id = _schema(client)
    before = _ok(client.get(f"{B}/profile_schemas/{schema_id}"))
    response = client.patch(
        f"{B}/profile_schemas/{schema_id}", json={"name": "v2", "attributes_operations": ops}
    )
    assert response.status_code == status and field in response.json()["message"], response.text
    after = _ok(client.get(f"{B}/profile_schemas/{schema_id}"))
    assert {**after, "request_id": ""} == {**before, "request_id": ""}


def test_deleting_every_attribute_is_refused(client: TestClient) -> None:
    schema_id = _schema(client)
    ids = [a["attribute_id"] for a in _ok(client.get(f"{B}/profile_schemas/{schema_id}"))["attributes"]]
    ops = [{"op": "delete", "attribute_id": i} for i in ids]
    response = client.patch(f"{B}/profile_schemas/{schema_id}", json={"attributes_operations": ops})
    assert response.status_code == 400 and "at least one attribute" in response.json()["message"]


def test_delete_profile_schema(client: TestClient) -> None:
    schema_id = _schema(client)
    _ok(client.delete(f"{B}/profile_schemas/{schema_id}"))
    assert client.get(f"{B}/profile_schemas/{schema_id}").json()["code"] == "ProfileSchemaNotFound"
    assert client.delete(f"{B}/profile_schemas/{schema_id}").status_code == 404
    assert client.patch(f"{B}/profile_schemas/{schema_id}", json={"name": "x"}).status_code == 404
    assert _ok(client.get(f"{B}/profile_schemas"))["total"] == 0


def test_user_profile_ids_are_attribute_ids(client: TestClient, mem: ConvMemory) -> None:
    schema_id = _schema(client)
    _ok(
        client.post(
            f"{B}/add", json={"user_id": "u", "profile_schema": schema_id, "custom_content": "用户住在杭州。"}
        )
    )
    profile = _ok(client.get(f"{B}/profile_schemas/{schema_id}/user_profile", params={"user_id": "u"}))[
        "profile"
    ]
    schema = _ok(client.get(f"{B}/profile_schemas/{schema_id}"))
    assert [a["id"] for a in profile["attributes"]] == [a["attribute_id"] for a in schema["attributes"]]


def test_docs_update_example_keeps_free_form_meta_data(client: TestClient, mem: ConvMemory) -> None:
    added = _ok(client.post(f"{B}/add", json={"user_id": "u_1", "custom_content": "用户喜欢爬山。"}))
    node_id = added["memory_nodes"][0]["memory_node_id"]
    body = {"custom_content": "用户喜欢在周末爬山。", "meta_data": {"location_name": "杭州"}}
    _ok(client.patch(f"{B}/memory_nodes/{node_id}", json=body))
    node = _ok(client.get(f"{B}/memory_nodes/{node_id}"))["memory_node"]
    assert node["content"] == "用户喜欢在周末爬山。"
    assert node["meta_data"]["location_name"] == "杭州" and node["meta_data"]["origin"] == "api"
    listed = _ok(client.get(f"{B}/memory_nodes", params={"user_id": "u_1"}))["memory_nodes"]
    assert listed[0]["meta_data"]["location_name"] == "杭州"
    found = _ok(client.post(f"{B}/memory_nodes/search", json={"user_id": "u_1", "query": "爬山"}))
    assert found["memory_nodes"][0]["meta_data"]["location_name"] == "杭州"
    # A later update merges; null removes a key; convmem's own keys stay read-only.
    _ok(
        client.patch(
            f"{B}/memory_nodes/{node_id}",
            json={
                "custom_content": "用户喜欢在周末爬山。",
                "meta_data": {"weather": "晴", "location_name": None},
            },
        )
    )
    meta = _ok(client.get(f"{B}/memory_nodes/{node_id}"))["memory_node"]["meta_data"]
    assert meta["weather"] == "晴" and "location_name" not in meta
    refused = client.patch(
        f"{B}/memory_nodes/{node_id}", json={"custom_content": "x。", "meta_data": {"key": "other"}}
    )
    assert refused.status_code == 400 and "meta_data.key" in refused.json()["message"]


def test_meta_data_on_add_goes_on_the_added_nodes(client: TestClient) -> None:
    added = _ok(
        client.post(
            f"{B}/add",
            json={"user_id": "u_2", "custom_content": "用户养了一只猫。", "meta_data": {"source": "crm"}},
        )
    )
    node_id = added["memory_nodes"][0]["memory_node_id"]
    assert _ok(client.get(f"{B}/memory_nodes/{node_id}"))["memory_node"]["meta_data"]["source"] == "crm"


def test_free_form_meta_data_is_bounded(client: TestClient) -> None:
    added = _ok(client.post(f"{B}/add", json={"user_id": "u_3", "custom_content": "用户喜欢茶。"}))
    node_id = added["memory_nodes"][0]["memory_node_id"]
    body = {"custom_content": "用户喜欢茶。", "meta_data": {"blob": "x" * 5000}}
    response = client.patch(f"{B}/memory_nodes/{node_id}", json=body)
    assert response.status_code == 400 and "meta_data" in response.json()["message"]


def test_delete_entity_user_deletes_the_memory_and_its_node_meta(client: TestClient, mem: ConvMemory) -> None:
    added = _ok(
        client.post(
            f"{B}/add",
            json={"user_id": "u_gone", "custom_content": "用户住在上海。", "meta_data": {"tag": "vip"}},
        )
    )
    assert added["memory_nodes"]
    _ok(client.delete(f"{B}/entities/user/u_gone"))
    assert [i.memory_id for i in mem.memories()] == []
    with mem.store.read() as conn:
        assert conn.execute(node_meta.select()).all() == []
    missing = client.delete(f"{B}/entities/user/u_gone")
    assert missing.status_code == 404 and missing.json()["code"] == "EntityNotFound"
    assert client.delete(f"{B}/entities/agent/u_gone").status_code == 400
