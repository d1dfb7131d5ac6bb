"""One input boundary (issue 21 item 1): bad input is a 4xx naming the field, never a 500.

Each case here failed before ``server/_boundary.py``: a 500 (nesting ~1,000 deep raised
``RecursionError``, a lone surrogate escape could not be encoded, ``EventType`` ``"²"`` or 5,000
digits broke ``int()``, a page past SQLite's 64-bit OFFSET), or a value accepted that PostgreSQL
or the store refuses later (NUL, an id of 256 characters). Signed webhook deliveries keep their 200
(a vendor retries a non-2xx): an unusable one is kept in the inbox as ``failed`` with a note naming
the field, and nothing of it is queued.

The cases are data (:data:`CASES`): ``tests/integration/test_fuzz_openapi.py`` runs the same list
against PostgreSQL.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select

from convmem_graph.server.app import create_app
from convmem_graph.server.settings import ServeSettings
from convmem_graph.signatures import sign_agora_v2, sign_trtc
from convmem_graph.store.registry import inbox_table, tasks_table
from tests.unit.server.conftest import AGORA_SECRET, TRTC_KEY, make_settings

UPSTREAM = "http://upstream.test/v1/chat/completions"
#: One character over the identifier rule's 255, still inside PostgreSQL's varchar(256).
LONG_ID = "m" * 256
DEEP = "[" * 1000 + "]" * 1000
HUGE_PAGE = "66843523535228174336"
B = "/api/v2/apps/memory"


def upstream_handler(request: httpx.Request) -> httpx.Response:
    """A fake OpenAI upstream: one short non-stream answer."""
    answer = {"id": "c1", "object": "chat.completion", "choices": [{"message": {"content": "ok"}}]}
    return httpx.Response(200, json=answer)


def boundary_settings(tmp_path: Path, db: str | None = None) -> ServeSettings:
    """Both webhook secrets, a fake upstream, and the store at ``db`` (a SQLite file by default)."""
    extra: dict[str, Any] = {"upstream_url": UPSTREAM, "upstream_api_key": "sk-upstream-test"}
    if db is not None:
        extra["db"] = db
    return make_settings(tmp_path, **extra)


def open_client(settings: ServeSettings) -> TestClient:
    """A client whose server errors come back as 500 responses (not raised), like a real caller's."""
    app = create_app(settings, upstream_transport=httpx.MockTransport(upstream_handler))
    return TestClient(app, raise_server_exceptions=False)


def trtc(client: TestClient, body: str | bytes) -> httpx.Response:
    """POST a correctly signed TRTC callback."""
    raw = body.encode("utf-8") if isinstance(body, str) else body
    return client.post("/webhooks/trtc", content=raw, headers={"Sign": sign_trtc(raw, TRTC_KEY)})


def agora(client: TestClient, body: str | bytes) -> httpx.Response:
    """POST a correctly signed Agora notification (V2 signature)."""
    raw = body.encode("utf-8") if isinstance(body, str) else body
    headers = {"Agora-Signature-V2": sign_agora_v2(raw, AGORA_SECRET)}
    return client.post("/webhooks/agora", content=raw, headers=headers)


def trtc_903(*, event: Any = 903, task: str = "task-1", user: str = "u_1", text: str = "你好") -> str:
    """A TRTC 903 (a sentence) body; ``text`` may be a raw JSON escape placeholder."""
    doc = {
        "EventGroupId": 9,
        "EventType": event,
        "CallbackTs": 1_767_272_400_040,
        "EventInfo": {
            "EventMsTs": 1_767_272_400_000,
            "TaskId": task,
            "RoomId": "room-1",
            "Payload": {"UserId": user, "Text": text, "RoundId": "r-1"},
        },
    }
    return json.dumps(doc, ensure_ascii=False)


def agora_103(memory_id: str, notice: str = "n-1") -> str:
    """An Agora 103 (agent history) labelled with ``memory_id``."""
    doc = {
        "noticeId": notice,
        "productId": 17,
        "eventType": 103,
        "notifyMs": 1_767_272_400_000,
        "payload": {
            "agent_id": "agent-1",
            "labels": {"memory_id": memory_id},
            "contents": [{"role": "user", "content": "你好"}],
        },
    }
    return json.dumps(doc)


def chat(client: TestClient, raw: bytes | str) -> httpx.Response:
    """POST raw bytes to the memory proxy."""
    data = raw.encode("utf-8") if isinstance(raw, str) else raw
    return client.post("/v1/chat/completions", content=data, headers={"Content-Type": "application/json"})


def user_turn(content: str, **extra: Any) -> str:
    """A proxy body with one user message (``content`` may hold a raw escape)."""
    return json.dumps({"memory_id": "u_1", "messages": [{"role": "user", "content": content}], **extra})


# -- expectations ---------------------------------------------------------------------------------
def inbox_rows(client: TestClient) -> list[tuple[str, str, str | None]]:
    """``(vendor, status, note)`` of every inbox row."""
    store = client.app.state.mem.store  # type: ignore[attr-defined]
    query = select(inbox_table.c.vendor, inbox_table.c.status, inbox_table.c.note).order_by(inbox_table.c.seq)
    with store.read() as conn:
        return [(r.vendor, r.status, r.note) for r in conn.execute(query)]


def kept_as_failed(field: str) -> Callable[[TestClient, httpx.Response], None]:
    """A signed delivery answered 200, stored as failed with a note naming ``field``, none queued."""

    def check(client: TestClient, response: httpx.Response) -> None:
        assert response.status_code == 200, response.text
        rows = inbox_rows(client)
        assert [status for _, status, _ in rows] == ["failed"], rows
        note = rows[0][2] or ""
        assert note.startswith(field), rows

    return check


def openai_400(param: str) -> Callable[[TestClient, httpx.Response], None]:
    """An OpenAI-shaped 400 whose ``param`` names the field; nothing stored."""

    def check(client: TestClient, response: httpx.Response) -> None:
        assert response.status_code == 400, response.text
        error = response.json()["error"]
        assert error["param"] == param, error
        assert error["type"] == "invalid_request_error"
        assert param in error["message"]
        assert inbox_rows(client) == []

    return check


def bailian_400(field: str, *, generation: str = "B") -> Callable[[TestClient, httpx.Response], None]:
    """A Bailian ``InvalidParameter`` 400 in the generation's shape, naming ``field``."""

    def check(client: TestClient, response: httpx.Response) -> None:
        assert response.status_code == 400, response.text
        body = response.json()
        assert body["code"] == "InvalidParameter", body
        assert field in body["message"], body
        assert ("request_id" if generation == "B" else "requestId") in body

    return check


def viewer_400(field: str) -> Callable[[TestClient, httpx.Response], None]:
    """The viewer's HTML 400 page naming ``field``."""

    def check(client: TestClient, response: httpx.Response) -> None:
        assert response.status_code == 400, response.text[:300]
        assert response.headers["content-type"].startswith("text/html")
        assert field in response.text

    return check


def service_400(field: str) -> Callable[[TestClient, httpx.Response], None]:
    """A 400 ``{"detail", "field"}`` of the service routes, nothing registered."""

    def check(client: TestClient, response: httpx.Response) -> None:
        assert response.status_code == 400, response.text
        assert response.json()["field"] == field
        store = client.app.state.mem.store  # type: ignore[attr-defined]
        with store.read() as conn:  # nothing registered (PostgreSQL cannot even look up a NUL id)
            assert conn.execute(select(func.count()).select_from(tasks_table)).scalar() == 0

    return check


@dataclass(frozen=True)
class Case:
    """One bad request and what the boundary must answer."""

    name: str
    send: Callable[[TestClient], httpx.Response]
    check: Callable[[TestClient, httpx.Response], None]


CASES: list[Case] = [
    # TRTC: signed, so 200; kept as failed naming the field.
    Case(
        "trtc-nesting-1000",
        lambda c: trtc(c, '{"EventType": 903, "x": ' + DEEP + "}"),
        kept_as_failed("body"),
    ),
    Case(
        "trtc-lone-surrogate",
        lambda c: trtc(c, trtc_903(text="@").replace('"@"', '"\\ud800"')),
        kept_as_failed("EventInfo.Payload.Text"),
    ),
    Case("trtc-event-superscript-two", lambda c: trtc(c, trtc_903(event="²")), kept_as_failed("EventType")),
    Case(
        "trtc-event-5000-digits", lambda c: trtc(c, trtc_903(event="9" * 5000)), kept_as_failed("EventType")
    ),
    Case("trtc-taskid-300", lambda c: trtc(c, trtc_903(task="t" * 300)), kept_as_failed("EventInfo.TaskId")),
    Case("trtc-taskid-nul", lambda c: trtc(c, trtc_903(task="t\x00x")), kept_as_failed("EventInfo.TaskId")),
    Case(
        "trtc-userid-300",
        lambda c: trtc(c, trtc_903(user="u" * 300)),
        kept_as_failed("EventInfo.Payload.UserId"),
    ),
    # Agora: the same policy.
    Case("agora-nesting-1000", lambda c: agora(c, DEEP), kept_as_failed("body")),
    Case(
        "agora-label-lone-surrogate",
        lambda c: agora(c, agora_103("@").replace('"@"', '"\\udc00"')),
        kept_as_failed("payload.labels.memory_id"),
    ),
    Case(
        "agora-label-256", lambda c: agora(c, agora_103(LONG_ID)), kept_as_failed("payload.labels.memory_id")
    ),
    Case(
        "agora-label-nul", lambda c: agora(c, agora_103("u\x00")), kept_as_failed("payload.labels.memory_id")
    ),
    # The proxy: OpenAI-shaped 400s, nothing forwarded or stored.
    Case(
        "proxy-lone-surrogate",
        lambda c: chat(c, user_turn("@").replace('"@"', '"\\ud83d"')),
        openai_400("messages[0].content"),
    ),
    Case("proxy-nul-text", lambda c: chat(c, user_turn("a\x00b")), openai_400("messages[0].content")),
    Case("proxy-nesting-1000", lambda c: chat(c, '{"messages": [], "x": ' + DEEP + "}"), openai_400("body")),
    Case(
        "proxy-memory-id-256",
        lambda c: chat(c, user_turn("hi").replace('"u_1"', json.dumps(LONG_ID))),
        openai_400("memory_id"),
    ),
    Case(
        "proxy-infinite-number",
        lambda c: chat(c, user_turn("hi")[:-1] + ', "temperature": 1e400}'),
        openai_400("body"),
    ),
    # Bailian: InvalidParameter naming the field.
    Case(
        "bailian-custom-content-nul",
        lambda c: c.post(f"{B}/add", json={"user_id": "u_1", "custom_content": "a\x00b"}),
        bailian_400("custom_content"),
    ),
    Case(
        "bailian-add-nesting-1000",
        lambda c: c.post(
            f"{B}/add",
            content='{"user_id": "u_1", "meta_data": {"x": ' + DEEP + "}}",
            headers={"Content-Type": "application/json"},
        ),
        bailian_400("body"),
    ),
    Case("bailian-node-id-nul", lambda c: c.get(f"{B}/memory_nodes/fr%00x"), bailian_400("memory_node_id")),
    Case(
        "bailian-node-id-256", lambda c: c.get(f"{B}/memory_nodes/{LONG_ID}"), bailian_400("memory_node_id")
    ),
    Case(
        "bailian-user-id-nul",
        lambda c: c.get(f"{B}/memory_nodes", params={"user_id": "u\x00"}),
        bailian_400("user_id"),
    ),
    Case(
        "bailian-page-huge",
        lambda c: c.get(f"{B}/memory_nodes?user_id=u_1&page_num={HUGE_PAGE}"),
        bailian_400("page_num"),
    ),
    Case(
        "bailian-next-token-1e20",
        lambda c: c.get("/ws/memories?nextToken=" + "1" + "0" * 20),
        bailian_400("nextToken", generation="A"),
    ),
    Case(
        "bailian-a-memory-id-256",
        lambda c: c.get(f"/ws/memories/{LONG_ID}"),
        bailian_400("memoryId", generation="A"),
    ),
    Case(
        "bailian-a-description-nul",
        lambda c: c.post("/ws/memories?description=%00"),
        bailian_400("description", generation="A"),
    ),
    # The viewer: its 400 page naming the field.
    Case("viewer-q-nul", lambda c: c.get("/?q=%00"), viewer_400("q")),
    Case("viewer-page-huge", lambda c: c.get(f"/?page={HUGE_PAGE}"), viewer_400("page")),
    Case("viewer-inject-id-256", lambda c: c.get(f"/memories/{LONG_ID}/inject"), viewer_400("memory_id")),
    Case(
        "viewer-lifecycle-id-256", lambda c: c.get(f"/memories/{LONG_ID}/lifecycle"), viewer_400("memory_id")
    ),
    Case("viewer-delete-id-256", lambda c: c.get(f"/memories/{LONG_ID}/delete"), viewer_400("memory_id")),
    Case(
        "viewer-inject-budget-huge",
        lambda c: c.get(f"/memories/u_1/inject?budget={HUGE_PAGE}"),
        viewer_400("budget"),
    ),
    # The service routes (call registration).
    Case(
        "tasks-task-id-nul",
        lambda c: c.post("/tasks/trtc", json={"task_id": "t\x00", "memory_id": "u_1"}),
        service_400("task_id"),
    ),
    Case(
        "tasks-memory-id-256",
        lambda c: c.post("/tasks/agora", json={"agent_id": "a-1", "memory_id": LONG_ID}),
        service_400("memory_id"),
    ),
]


#: Cases that failed on PostgreSQL only (SQLite stored them): the integration test runs them too.
POSTGRES_CASES: list[Case] = [
    # Invalid JSON (a raw NUL byte): kept as failed with its text, whose NUL PostgreSQL refused.
    Case("trtc-raw-nul-byte", lambda c: trtc(c, b'{"EventType": "\x00"}'), kept_as_failed("body")),
]


@pytest.fixture
def boundary_client(tmp_path: Path) -> Iterator[TestClient]:
    """A served SQLite store with one memory ``u_1`` holding one fact."""
    with open_client(boundary_settings(tmp_path)) as client:
        client.app.state.mem.store.add_fragment("u_1", "喜欢爬山", category="other", origin="api")  # type: ignore[attr-defined]
        yield client


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_bad_input_is_a_4xx_naming_the_field(boundary_client: TestClient, case: Case) -> None:
    response = case.send(boundary_client)
    assert response.status_code < 500, (case.name, response.status_code, response.text[:300])
    case.check(boundary_client, response)


def test_a_good_delivery_and_request_still_pass(boundary_client: TestClient) -> None:
    """The boundary refuses only what it names: ordinary bodies go through as before."""
    assert trtc(boundary_client, trtc_903()).status_code == 200
    assert agora(boundary_client, agora_103("u_2")).status_code == 200
    assert [status for _, status, _ in inbox_rows(boundary_client)] != ["failed", "failed"]
    answer = chat(boundary_client, user_turn("今天天气怎么样", temperature=0.5))
    assert answer.status_code == 200, answer.text
    listed = boundary_client.get(f"{B}/memory_nodes", params={"user_id": "u_1", "page_num": 1})
    assert listed.status_code == 200 and listed.json()["total"] == 1
    assert boundary_client.get("/?page=2&q=u_").status_code == 200
    assert boundary_client.get("/memories/u_1/inject?budget=300").status_code == 200


def test_the_openapi_document_lists_the_boundary_status_codes(boundary_client: TestClient) -> None:
    doc = boundary_client.get("/openapi.json").json()
    assert set(doc["paths"]["/webhooks/trtc"]["post"]["responses"]) >= {"200", "401", "413"}
    assert set(doc["paths"]["/v1/chat/completions"]["post"]["responses"]) >= {"200", "400", "502", "503"}
    assert set(doc["paths"][f"{B}/add"]["post"]["responses"]) >= {"200", "400", "401", "404"}
    assert set(doc["paths"]["/tasks/trtc"]["post"]["responses"]) >= {"200", "400", "401", "403"}
    assert set(doc["paths"]["/memories/{memory_id}/inject"]["get"]["responses"]) >= {"200", "400", "404"}
