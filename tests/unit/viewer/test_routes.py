"""The viewer's pages and forms in process (no browser): links, escaping, paging, edits, errors."""

from __future__ import annotations

import html
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("fastapi", reason="the server extra (fastapi) is not installed")

from fastapi import FastAPI  # noqa: E402
from fastapi.testclient import TestClient  # noqa: E402

from convmem_graph.memory import ConvMemory  # noqa: E402
from convmem_graph.models import Message  # noqa: E402
from convmem_graph.viewer.routes import build_router  # noqa: E402


@pytest.fixture
def mem(tmp_path: Path) -> Iterator[ConvMemory]:
    memory = ConvMemory.open(str(tmp_path / "viewer.db"))
    memory.ingest(
        "u/1 <b>",
        [
            {"role": "user", "content": "我对芒果过敏。"},
            {"role": "assistant", "content": "<script>alert(1)</script>好的"},
            {"role": "user", "content": "我住在杭州。"},
        ],
        source="openai",
    )
    yield memory
    memory.close()


@pytest.fixture
def client(mem: ConvMemory) -> TestClient:
    app = FastAPI()
    app.include_router(build_router(mem))
    return TestClient(app)


MID = "u/1 <b>"
PATH = "/memories/u%2F1%20%3Cb%3E"


def test_list_links_to_the_memory_by_id_and_escapes_it(client: TestClient) -> None:
    html = client.get("/").text
    assert f'href="{PATH}"' in html
    assert "u/1 &lt;b&gt;" in html and "<b>" not in html.split("<main>")[1]
    assert client.get("/", params={"q": "u/1"}).text.count('class="memory-link"') == 1
    assert "no memory matches" in client.get("/", params={"q": "nobody"}).text


def test_memory_page_escapes_text_and_links_facts_to_messages(client: TestClient, mem: ConvMemory) -> None:
    html = client.get(PATH).text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html and "<script>alert" not in html
    fact = next(f for f in mem.fragments(MID) if "芒果" in f.content)
    assert f'href="{PATH}?fact={fact.id}#timeline"' in html
    selected = client.get(PATH, params={"fact": fact.id}).text
    lit = re.findall(r'<tr id="m-([^"]+)" data-message="[^"]+" class="message role-user hl"', selected)
    assert set(lit) == set(fact.source_message_ids)


def test_timeline_pages_by_time_with_cursors(mem: ConvMemory, client: TestClient) -> None:
    mem.store.add_messages(
        MID,
        [
            Message(
                id=f"bulk{i}",
                role="user",
                content=f"第{i}条",
                channel="im",
                source="message",
                timestamp_ms=10 + i,
            )
            for i in range(120)
        ],
    )
    first = client.get(PATH).text
    assert first.count('class="message ') == 50
    older = re.search(r'<a rel="prev" href="([^"]+)"', first)
    assert older is not None
    second = client.get(older.group(1).replace("&amp;", "&")).text
    assert second.count('class="message ') == 50 and "第0条" not in second
    assert client.get(PATH, params={"before": "garbage"}).status_code == 400


def test_edits_go_through_the_store_and_audit(client: TestClient, mem: ConvMemory) -> None:
    r = client.post(
        f"{PATH}/variables", data={"name": "city", "value": "上海", "action": "set"}, follow_redirects=False
    )
    assert r.status_code == 303 and r.headers["location"].startswith(PATH)
    assert (mem.variables(MID)["city"].value, mem.variables(MID)["city"].origin) == ("上海", "manual")
    bad = client.post(f"{PATH}/variables", data={"name": "birth_year", "value": "soon", "action": "set"})
    assert bad.status_code == 400 and "integer" in bad.text
    client.post(f"{PATH}/variables", data={"name": "city", "action": "clear"})
    assert mem.variables(MID)["city"].origin == "inferred"

    fact = next(f for f in mem.fragments(MID) if "芒果" in f.content)
    client.post(f"{PATH}/fragments/{fact.id}/edit", data={"content": "用户对芒果严重过敏。"})
    assert mem.store.get_fragment(MID, fact.id).content == "用户对芒果严重过敏。"
    client.post(f"{PATH}/fragments/{fact.id}/delete")
    assert fact.id not in {f.id for f in mem.fragments(MID)}
    assert {a.cause for a in mem.store.list_audit(MID) if a.object_id == fact.id} >= {
        "edited by hand",
        "deleted by hand",
    }
    assert client.post(f"{PATH}/fragments/nope/delete").status_code == 404

    foreign = client.post(
        f"{PATH}/variables", data={"name": "city", "value": "x"}, headers={"Origin": "https://evil.example"}
    )
    assert foreign.status_code == 403 and mem.variables(MID)["city"].value != "x"

    assert client.post(f"{PATH}/delete", data={"confirm": "u/1"}).status_code == 400
    gone = client.post(f"{PATH}/delete", data={"confirm": MID}, follow_redirects=False)
    assert gone.status_code == 303
    assert client.get(PATH).status_code == 404


def test_inject_and_lifecycle_pages(client: TestClient) -> None:
    trtc = client.get(f"{PATH}/inject").text
    assert "LLMConfig" in trtc and "&lt;user_memory&gt;" in trtc
    openai = client.get(f"{PATH}/inject", params={"vendor": "openai", "query": "芒果", "budget": 120}).text
    payload = openai.split('<section id="payload">')[1].split("</section>")[0]
    assert "LLMConfig" not in payload and "&quot;role&quot;: &quot;system&quot;" in payload
    assert "/ 120 tokens" in openai and "matches the query" in openai
    assert re.search(r'<tr class="pick included"><td>variable city = 杭州</td>', openai)
    broken = client.get(f"{PATH}/inject", params={"vendor": "trtc", "options": "{not json"}).text
    assert 'class="error"' in broken and "options: not JSON" in broken
    graph = client.get(f"{PATH}/lifecycle").text
    assert "<svg" in graph and 'data-node="extract"' in graph
    assert client.get("/memories/nobody/inject").status_code == 404
    assert client.get("/viewer/static/viewer.js").status_code == 200
    assert client.get("/viewer/static/secret.py").status_code == 404


def test_inject_preview_shows_the_block_the_payload_sends(client: TestClient, mem: ConvMemory) -> None:
    # A stored turn that matches the query (a question: no fact is extracted from it).
    turn = "你知道西溪湿地的船票多少钱吗？"
    mem.ingest(MID, [{"role": "user", "content": turn}], source="openai")
    query = {"query": "西溪湿地船票", "budget": 200}

    def preview_block(vendor: str) -> str:
        page = client.get(f"{PATH}/inject", params={"vendor": vendor, **query}).text
        return page.split('<pre class="block">')[1].split("</pre>")[0]

    # The newest 10 turns travel with an OpenAI payload, so its block does not quote them.
    openai = mem.memory_block(MID, "西溪湿地船票", budget_tokens=200, skip_recent_turns=10).text
    assert preview_block("openai") == html.escape(openai, quote=True) and turn not in openai
    # An Agora join sends no turns: the payload's block quotes the turn, and so does the preview.
    assert turn in preview_block("agora")
