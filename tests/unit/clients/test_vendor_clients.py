from __future__ import annotations

import asyncio
from urllib.parse import urlparse

import pytest

from convmem_graph import ConvMemory, MemoryConfig
from convmem_graph.clients import (
    AgoraConvoAIClient,
    AgoraError,
    AsyncAgoraConvoAIClient,
    AsyncTencentIMClient,
    RetryPolicy,
    TencentIMClient,
    TencentIMError,
)
from convmem_graph.clients.trtc import TRTCClient, TRTCError
from convmem_graph.clients.usersig import decode_usersig, gen_usersig, verify_usersig
from tests.conftest import load_fixture
from tests.fakes.vendor_servers import (
    AGORA_APP_ID,
    AGORA_CUSTOMER,
    IM_ADMIN,
    IM_APP_ID,
    IM_KEY,
    TC_SECRET_ID,
    TC_SECRET_KEY,
    FakeVendors,
)

FAST = RetryPolicy(max_attempts=3, backoff_s=0.01, max_backoff_s=0.05)
WINDOW = {"min_time": 1767268800, "max_time": 1767268800 + 3600}


def test_usersig_round_trip_and_rejections() -> None:
    sig = gen_usersig(IM_APP_ID, IM_KEY, IM_ADMIN, expire=60, now=1_767_268_800)
    doc = decode_usersig(sig)
    assert doc["TLS.ver"] == "2.0" and doc["TLS.identifier"] == IM_ADMIN and doc["TLS.sdkappid"] == IM_APP_ID
    assert set(sig) <= set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789*-_")
    assert verify_usersig(sig, IM_APP_ID, IM_KEY, IM_ADMIN, now=1_767_268_850)
    assert not verify_usersig(sig, IM_APP_ID, IM_KEY, IM_ADMIN, now=1_767_268_861)  # expired
    assert not verify_usersig(sig, IM_APP_ID, IM_KEY, "someone_else", now=1_767_268_850)
    assert not verify_usersig(sig, 1400000001, IM_KEY, IM_ADMIN, now=1_767_268_850)
    assert not verify_usersig("not-a-sig", IM_APP_ID, IM_KEY, IM_ADMIN)
    with pytest.raises(ValueError, match="secret key"):
        gen_usersig(IM_APP_ID, "", IM_ADMIN)


@pytest.mark.vcr
def test_im_roam_pages_walk_back_to_complete_and_ingest(base_url: str, vendors: FakeVendors | None) -> None:
    with TencentIMClient(IM_APP_ID, IM_KEY, IM_ADMIN, base_url=base_url, retry=FAST) as client:
        doc = client.get_roam_messages("u_10086", "ai_xiaoyu_bot", **WINDOW)
    pages = doc["pages"]
    assert [p["response"]["MsgCnt"] for p in pages] == [4, 4, 2]
    assert [p["response"]["Complete"] for p in pages] == [0, 0, 1]
    # Each next request keeps MinTime and continues from the previous page's oldest message.
    for before, after in zip(pages, pages[1:], strict=False):
        assert after["request"]["MaxTime"] == before["response"]["LastMsgTime"]
        assert after["request"]["LastMsgKey"] == before["response"]["LastMsgKey"]
        assert after["request"]["MinTime"] == WINDOW["min_time"]
    with ConvMemory.open("sqlite://", config=MemoryConfig(bot_ids=["ai_xiaoyu_bot"])) as mem:
        mem.ingest("u_10086", doc, source="tencent_im")
        turns = mem.recent("u_10086", 20)
    assert [m.content for m in turns][:2] == ["第0条：我在杭州跑了0公里。", "第1条：好的，记住了。"]
    assert len(turns) == 10 and [m.role for m in turns[:2]] == ["user", "assistant"]
    if vendors is not None:
        assert {urlparse(c["path"]).path for c in vendors.calls} == {"/v4/openim/admin_getroammsg"}


@pytest.mark.vcr
def test_im_rate_limit_is_retried_and_a_bad_key_is_a_typed_error(
    base_url: str, vendors: FakeVendors | None
) -> None:
    if vendors is not None:
        vendors.im_rate_limit_next = True
    with TencentIMClient(IM_APP_ID, IM_KEY, IM_ADMIN, base_url=base_url, retry=FAST) as client:
        page = client.call(
            "openim/admin_getroammsg",
            {"Operator_Account": "u_10086", "Peer_Account": "ai_xiaoyu_bot", "MaxCnt": 2, **_window_body()},
        )
    assert page["MsgCnt"] == 2
    with TencentIMClient(IM_APP_ID, "wrong-key", IM_ADMIN, base_url=base_url, retry=FAST) as client:
        with pytest.raises(TencentIMError) as info:
            client.call(
                "openim/admin_getroammsg",
                {"Operator_Account": "u_10086", "Peer_Account": "x", "MaxCnt": 1, **_window_body()},
            )
    assert info.value.code == 70009
    assert "wrong-key" not in repr(client) and "wrong-key" not in str(info.value)


def _window_body() -> dict[str, int]:
    return {"MinTime": WINDOW["min_time"], "MaxTime": WINDOW["max_time"]}


@pytest.mark.vcr
def test_async_im_client_pages_the_same_way(base_url: str) -> None:
    async def pull() -> list[int]:
        async with AsyncTencentIMClient(IM_APP_ID, IM_KEY, IM_ADMIN, base_url=base_url, retry=FAST) as client:
            doc = await client.get_roam_messages("u_10086", "ai_xiaoyu_bot", **WINDOW)
        return [p["response"]["MsgCnt"] for p in doc["pages"]]

    assert asyncio.run(pull()) == [4, 4, 2]


@pytest.mark.vcr
def test_trtc_start_and_stop_through_the_official_sdk(base_url: str) -> None:
    host = urlparse(base_url).netloc
    client = TRTCClient(TC_SECRET_ID, TC_SECRET_KEY, endpoint=host, scheme="http", retry=FAST)
    body = load_fixture("trtc_start_ai_conversation_request.json")["body"]
    task_id = client.start_ai_conversation(body)
    assert task_id.startswith("task-")
    client.stop_ai_conversation(task_id)
    bad = TRTCClient(TC_SECRET_ID, "not-the-secret", endpoint=host, scheme="http", retry=FAST)
    with pytest.raises(TRTCError) as info:
        bad.stop_ai_conversation("task-x")
    assert info.value.code == "AuthFailure.SignatureFailure"
    assert "not-the-secret" not in repr(bad)
    broken = {**body, "LLMConfig": {"not": "a string"}}
    with pytest.raises(TRTCError) as info:
        client.start_ai_conversation(broken)
    assert info.value.code == "InvalidParameter"


@pytest.mark.vcr
def test_agora_join_history_update_leave_and_errors(base_url: str, vendors: FakeVendors | None) -> None:
    join = load_fixture("agora_join_request.json")
    customer_id, secret = AGORA_CUSTOMER
    with AgoraConvoAIClient(
        AGORA_APP_ID, customer_id=customer_id, customer_secret=secret, host=base_url, retry=FAST
    ) as client:
        if vendors is not None:
            vendors.agora_fail_next = True  # one 503, retried
        agent = client.join(join)
        assert agent["status"] == "RUNNING"
        history = client.history(agent["agent_id"])
        assert history["contents"][0]["content"] == "我对芒果过敏。"
        update = {
            "properties": {"llm": {"system_messages": [{"role": "system", "content": "x"}], "params": {}}}
        }
        assert client.update(agent["agent_id"], update)["status"] == "RUNNING"
        with pytest.raises(AgoraError) as info:
            client.join(join)  # the name is taken while the agent runs
        assert (info.value.status, info.value.code) == (409, "TaskConflict")
        assert client.leave(agent["agent_id"]) == {}
    with AgoraConvoAIClient(
        AGORA_APP_ID, customer_id=customer_id, customer_secret="nope", host=base_url, retry=FAST
    ) as wrong:
        with pytest.raises(AgoraError) as info:
            wrong.history("whatever")
    assert info.value.status == 401 and "nope" not in repr(wrong)


@pytest.mark.vcr
def test_async_agora_join(base_url: str) -> None:
    join = {**load_fixture("agora_join_request.json"), "name": "async-agent"}
    customer_id, secret = AGORA_CUSTOMER

    async def run() -> str:
        async with AsyncAgoraConvoAIClient(
            AGORA_APP_ID, customer_id=customer_id, customer_secret=secret, host=base_url, retry=FAST
        ) as client:
            agent = await client.join(join)
            await client.leave(agent["agent_id"])
            return str(agent["status"])

    assert asyncio.run(run()) == "RUNNING"
