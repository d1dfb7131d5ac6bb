"""The Bailian-compatible memory API (generations A and B), driven in process with FastAPI's TestClient."""

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

B = API_PREFIX
WS = "llm-test0123456789"


@pytest.fixture
def mem(tmp_path: Path) -> Iterator[ConvMemory]:
    memory = ConvMemory.open(str(tmp_path / "bailian.db"))
    yield memory
    memory.close()


def _client(mem: ConvMemory, token: str | None = None) -> TestClient:
    app = FastAPI()
    app.include_router(build_router(mem, SimpleNamespace(token=token)))
    return TestClient(app)


@pytest.fixture
def client(mem: ConvMemory) -> TestClient:
    return _client(mem)


def _ok(response: Any) -> dict[str, Any]:
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


# -- generation B ---------------------------------------------------------------------------------
def test_add_search_list_patch_delete_round_trip(client: TestClient, mem: ConvMemory) -> None:
    added = _ok(
        client.post(
            f"{B}/add",
            json={
                "user_id": "u_1",
                "messages": [
                    {"role": "user", "content": "我对芒果过敏。"},
                    {"role": "assistant", "content": "记住了。"},
                    {"role": "user", "content": [{"type": "text", "text": "我住在杭州。"}]},
                ],
            },
            headers={"Authorization": "Bearer any-key"},
        )
    )
    contents = {n["content"] for n in added["memory_nodes"] if n["event"] == "ADD"}
    assert "用户对芒果过敏。" in contents
    assert added["request_id"]

    custom = _ok(client.post(f"{B}/add", json={"user_id": "u_1", "custom_content": "用户喜欢吃辣的食物。"}))
    [node] = [n for n in custom["memory_nodes"] if n["event"] == "ADD"]
    node_id = node["memory_node_id"]
    assert mem.store.get_fragment("u_1", node_id).origin == "api"

    found = _ok(client.post(f"{B}/memory_nodes/search", json={"user_id": "u_1", "query": "芒果", "top_k": 3}))
    assert found["memory_nodes"][0]["content"] == "用户对芒果过敏。"
    assert found["memory_nodes"][0]["score"] == 1.0
    by_messages = _ok(
        client.post(
            f"{B}/memory_nodes/search",
            json={"user_id": "u_1", "messages": [{"role": "user", "content": "能吃辣吗"}]},
        )
    )
    assert by_messages["memory_nodes"][0]["memory_node_id"] == node_id

    listed = _ok(client.get(f"{B}/memory_nodes", params={"user_id": "u_1", "page_size": 10}))
    assert listed["total"] == len(mem.fragments("u_1")) >= 3
    assert node_id in {n["memory_node_id"] for n in listed["memory_nodes"]}
    page2 = _ok(client.get(f"{B}/memory_nodes", params={"user_id": "u_1", "page_num": 2, "page_size": 2}))
    assert page2["page_num"] == 2 and len(page2["memory_nodes"]) == listed["total"] - 2

    _ok(
        client.patch(
            f"{B}/memory_nodes/{node_id}",
            json={"custom_content": "用户很喜欢吃辣的川菜。", "meta_data": {"category": "preference"}},
        )
    )
    got = _ok(client.get(f"{B}/memory_nodes/{node_id}"))["memory_node"]
    assert got["content"] == "用户很喜欢吃辣的川菜。"
    assert got["meta_data"]["category"] == "preference"
    assert any(a.action == "update" and a.object_id == node_id for a in mem.store.list_audit("u_1"))

    _ok(client.delete(f"{B}/memory_nodes/{node_id}"))
    listed = _ok(client.get(f"{B}/memory_nodes", params={"user_id": "u_1"}))
    assert node_id not in {n["memory_node_id"] for n in listed["memory_nodes"]}
    found = _ok(client.post(f"{B}/memory_nodes/search", json={"user_id": "u_1", "query": "川菜 辣"}))
    assert node_id not in {n["memory_node_id"] for n in found["memory_nodes"]}
    gone = client.get(f"{B}/memory_nodes/{node_id}")
    assert gone.status_code == 404 and gone.json()["code"] == "MemoryNodeNotFound"
    assert client.delete(f"{B}/memory_nodes/{node_id}").status_code == 404


def test_search_never_crosses_users(client: TestClient) -> None:
    _ok(client.post(f"{B}/add", json={"user_id": "alice", "custom_content": "用户对芒果过敏。"}))
    _ok(client.post(f"{B}/add", json={"user_id": "bob", "custom_content": "用户喜欢芒果冰沙。"}))
    alice = _ok(client.post(f"{B}/memory_nodes/search", json={"user_id": "alice", "query": "芒果"}))
    bob = _ok(client.post(f"{B}/memory_nodes/search", json={"user_id": "bob", "query": "芒果"}))
    assert [n["content"] for n in alice["memory_nodes"]] == ["用户对芒果过敏。"]
    assert [n["content"] for n in bob["memory_nodes"]] == ["用户喜欢芒果冰沙。"]
    nobody = _ok(client.post(f"{B}/memory_nodes/search", json={"user_id": "carol", "query": "芒果"}))
    assert nobody["memory_nodes"] == []
    # A node id of one user cannot be reached under another user's id.
    alice_id = alice["memory_nodes"][0]["memory_node_id"]
    assert client.get(f"{B}/memory_nodes/{alice_id}", params={"user_id": "bob"}).status_code == 404
    assert client.delete(f"{B}/memory_nodes/{alice_id}", params={"user_id": "bob"}).status_code == 404
    assert _ok(client.get(f"{B}/memory_nodes", params={"user_id": "bob"}))["total"] == 1


def test_min_score_and_top_k(client: TestClient) -> None:
    for text in ("用户对芒果过敏。", "用户喜欢跑步。", "用户养了一只猫。"):
        _ok(client.post(f"{B}/add", json={"user_id": "u", "custom_content": text}))
    one = _ok(
        client.post(f"{B}/memory_nodes/search", json={"user_id": "u", "query": "用户 芒果", "top_k": 1})
    )
    assert [n["content"] for n in one["memory_nodes"]] == ["用户对芒果过敏。"]
    strict = _ok(
        client.post(
            f"{B}/memory_nodes/search", json={"user_id": "u", "query": "用户 芒果", "min_score": 0.99}
        )
    )
    assert [n["content"] for n in strict["memory_nodes"]] == ["用户对芒果过敏。"]


def test_bad_bodies_answer_bailian_errors(client: TestClient) -> None:
    missing = client.post(f"{B}/add", json={"messages": [{"role": "user", "content": "hi"}]})
    assert missing.status_code == 400
    assert missing.json()["code"] == "InvalidParameter" and "user_id" in missing.json()["message"]
    empty = client.post(f"{B}/add", json={"user_id": "u"})
    assert empty.status_code == 400 and "custom_content" in empty.json()["message"]
    too_long = client.post(f"{B}/add", json={"user_id": "u", "custom_content": "长" * 201})
    assert too_long.status_code == 400 and "custom_content" in too_long.json()["message"]
    # convmem's own keys are read-only (the client's own keys are kept: see test_bailian_clients).
    meta = client.post(
        f"{B}/add", json={"user_id": "u", "custom_content": "用户喜欢猫。", "meta_data": {"origin": "x"}}
    )
    assert meta.status_code == 400 and "meta_data.origin" in meta.json()["message"]
    assert client.get(f"{B}/memory_nodes").status_code == 400  # user_id is required
    bad_id = client.post(f"{B}/add", json={"user_id": "bad id\n", "custom_content": "用户喜欢猫。"})
    assert bad_id.status_code == 400 and "user_id" in bad_id.json()["message"]
    no_query = client.post(f"{B}/memory_nodes/search", json={"user_id": "u"})
    assert no_query.status_code == 400


def test_profile_schema_and_user_profile(client: TestClient, mem: ConvMemory) -> None:
    created = _ok(
        client.post(
            f"{B}/profile_schemas",
            json={
                "name": "companion",
                "description": "陪伴应用的用户画像",
                "attributes": [
                    {"name": "城市", "description": "常住城市"},
                    {"name": "口味偏好", "description": "喜欢的口味"},
                    {"name": "favourite_team"},
                ],
            },
        )
    )
    schema_id = created["profile_schema_id"]
    assert _ok(client.get(f"{B}/profile_schemas/{schema_id}"))["name"] == "companion"
    _ok(
        client.post(
            f"{B}/add",
            json={
                "user_id": "u_p",
                "profile_schema": schema_id,
                "messages": [{"role": "user", "content": "我住在杭州。"}],
            },
        )
    )
    mem.set_variable("u_p", "favourite_team", "浙江队")
    profile = _ok(client.get(f"{B}/profile_schemas/{schema_id}/user_profile", params={"user_id": "u_p"}))
    assert profile["profile"]["schema_name"] == "companion"
    values = {a["name"]: a["value"] for a in profile["profile"]["attributes"]}
    assert values == {"城市": "杭州", "口味偏好": "", "favourite_team": "浙江队"}
    names = {s.name for s in mem.store.get_specs("u_p")}
    assert {"city", "favourite_team", "name"} <= names  # the default schema is kept, attributes added
    unknown = client.get(f"{B}/profile_schemas/ps_nope/user_profile", params={"user_id": "u_p"})
    assert unknown.status_code == 404
    bad = client.post(f"{B}/profile_schemas", json={"name": "x", "attributes": []})
    assert bad.status_code == 400 and "attributes" in bad.json()["message"]


def test_bearer_required_only_when_a_token_is_set(mem: ConvMemory) -> None:
    open_client = _client(mem)
    assert open_client.get(f"{B}/memory_nodes", params={"user_id": "u"}).status_code == 200
    assert (
        open_client.get(
            f"{B}/memory_nodes", params={"user_id": "u"}, headers={"Authorization": "Bearer sk-whatever"}
        ).status_code
        == 200
    )
    locked = _client(mem, token="s3cret")
    assert locked.get(f"{B}/memory_nodes", params={"user_id": "u"}).status_code == 401
    wrong = locked.get(f"/{WS}/memories", headers={"Authorization": "Bearer nope"})
    assert wrong.status_code == 401 and wrong.json()["code"] == "InvalidApiKey"
    right = locked.get(
        f"{B}/memory_nodes", params={"user_id": "u"}, headers={"Authorization": "Bearer s3cret"}
    )
    assert right.status_code == 200


# -- generation A ---------------------------------------------------------------------------------
def test_generation_a_memories_and_nodes(client: TestClient, mem: ConvMemory) -> None:
    ids = [
        _ok(client.post(f"/{WS}/memories", params={"description": f"user-{i}"}))["memoryId"] for i in range(3)
    ]
    got = _ok(client.get(f"/{WS}/memories/{ids[0]}"))
    assert got == {**got, "description": "user-0", "memoryId": ids[0], "workspaceId": WS}

    seen: list[str] = []
    token: str | None = None
    for _ in range(5):
        page = _ok(
            client.get(f"/{WS}/memories", params={"maxResults": 2, **({"nextToken": token} if token else {})})
        )
        assert page["totalCount"] == 3 and page["workspaceId"] == WS
        seen += [m["memoryId"] for m in page["memories"]]
        token = page["nextToken"]
        if not token:
            break
    assert seen == ids

    _ok(client.put(f"/{WS}/memories/{ids[0]}", params={"description": "renamed"}))
    assert mem.info(ids[0]).description == "renamed"

    node = _ok(client.post(f"/{WS}/memories/{ids[0]}/memoryNodes", params={"content": "用户喜欢爬山。"}))
    node_id = node["memoryNodeId"]
    listed = _ok(client.get(f"/{WS}/memories/{ids[0]}/memoryNodes", params={"maxResults": 20}))
    assert listed["memoryNodes"] == [{"content": "用户喜欢爬山。", "memoryNodeId": node_id}]
    assert listed["totalCount"] == 1 and listed["nextToken"] is None
    _ok(
        client.put(f"/{WS}/memories/{ids[0]}/memoryNodes/{node_id}", params={"content": "用户周末喜欢爬山。"})
    )
    assert (
        _ok(client.get(f"/{WS}/memories/{ids[0]}/memoryNodes/{node_id}"))["content"] == "用户周末喜欢爬山。"
    )
    # Generation A nodes are generation B nodes of user_id = memoryId.
    b_nodes = _ok(client.get(f"{B}/memory_nodes", params={"user_id": ids[0]}))["memory_nodes"]
    assert [n["memory_node_id"] for n in b_nodes] == [node_id]

    _ok(client.delete(f"/{WS}/memories/{ids[0]}/memoryNodes/{node_id}"))
    missing = client.get(f"/{WS}/memories/{ids[0]}/memoryNodes/{node_id}")
    assert missing.status_code == 404 and missing.json()["code"] == "Memory.MemoryNodeNotFound"

    _ok(client.delete(f"/{WS}/memories/{ids[1]}"))
    gone = client.get(f"/{WS}/memories/{ids[1]}")
    assert gone.status_code == 404 and gone.json()["code"] == "Memory.MemoryIdNotFound"
    assert gone.json()["requestId"]


def test_generation_a_error_codes(client: TestClient) -> None:
    mid = _ok(client.post(f"/{WS}/memories", params={"description": "d"}))["memoryId"]
    for method, path in (
        ("get", f"/{WS}/memories/nope"),
        ("put", f"/{WS}/memories/nope"),
        ("delete", f"/{WS}/memories/nope"),
        ("get", f"/{WS}/memories/nope/memoryNodes"),
        ("post", f"/{WS}/memories/nope/memoryNodes?content=x"),
    ):
        r = client.request(method, path)
        assert (r.status_code, r.json()["code"]) == (404, "Memory.MemoryIdNotFound"), path
    for content in ("", "长" * 201):
        r = client.post(f"/{WS}/memories/{mid}/memoryNodes", params={"content": content})
        assert (r.status_code, r.json()["code"]) == (400, "Memory.MemoryNodeContentInvalid")
    r = client.delete(f"/{WS}/memories/{mid}/memoryNodes/nope")
    assert (r.status_code, r.json()["code"]) == (404, "Memory.MemoryNodeNotFound")
    r = client.get(f"/{WS}/memories", params={"nextToken": "garbage"})
    assert (r.status_code, r.json()["code"]) == (400, "InvalidParameter")
    r = client.post(f"/{WS}/memories", params={"description": "x" * 51})
    assert r.status_code == 400 and "description" in r.json()["message"]


def test_openapi_document_lists_both_generations(client: TestClient) -> None:
    doc = _ok(client.get("/openapi.json"))
    paths = set(doc["paths"])
    assert f"{B}/add" in paths and f"{B}/memory_nodes/search" in paths
    assert "/{workspace_id}/memories/{memory_id}/memoryNodes/{memory_node_id}" in paths
    assert "AddMemoryBody" in doc["components"]["schemas"]


def test_served_by_convmem_serve_app(tmp_path: Path) -> None:
    pytest.importorskip("pydantic_settings", reason="the server extra is not installed")
    from convmem_graph.server.app import create_app
    from convmem_graph.server.settings import ServeSettings

    db = str(tmp_path / "served.db")
    open_app = TestClient(create_app(ServeSettings(db=db, token=None)), base_url="http://127.0.0.1")
    body = {"user_id": "u_s", "custom_content": "用户喜欢喝茶。"}
    assert (
        open_app.post(f"{B}/add", json=body, headers={"Authorization": "Bearer sk-dashscope"}).status_code
        == 200
    )
    assert open_app.get("/memories/u_s").status_code == 200  # the viewer is there too
    locked = TestClient(create_app(ServeSettings(db=db, token="t0k")), base_url="http://127.0.0.1")
    assert locked.post(f"{B}/memory_nodes/search", json={"user_id": "u_s", "query": "茶"}).status_code == 401
    found = locked.post(
        f"{B}/memory_nodes/search",
        json={"user_id": "u_s", "query": "茶"},
        headers={"Authorization": "Bearer t0k"},
    )
    assert [n["content"] for n in _ok(found)["memory_nodes"]] == ["用户喜欢喝茶。"]
