"""The viewer's search and memory graph pages in process (issue 26, item 1).

Search finds a planted phrase in the timeline through the store's index and in the facts, filters
narrow it, each hit links to its turn; the graph joins facts to their source turns, the variables
they feed and the facts that superseded them, and a turn node's link opens the timeline at it.
"""

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
from convmem_graph.viewer.routes import build_router  # noqa: E402

MID = "u_explore"
PATH = f"/memories/{MID}"
DAY = 86_400_000
T0 = 1_767_225_600_000  # 2026-01-01 00:00 UTC


@pytest.fixture
def mem(tmp_path: Path) -> Iterator[ConvMemory]:
    memory = ConvMemory.open(str(tmp_path / "explore.db"))
    turns = [
        {"role": "user", "content": "我住在杭州。", "timestamp": T0},
        {"role": "assistant", "content": "杭州的西湖很美。", "timestamp": T0 + 1000},
        {"role": "user", "content": "我对芒果过敏，吃了会起疹子。", "timestamp": T0 + DAY},
        {"role": "user", "content": "我搬到上海了。", "timestamp": T0 + 3 * DAY},
    ]
    for t in turns:
        memory.ingest(MID, [t], source="openai")
    yield memory
    memory.close()


@pytest.fixture
def client(mem: ConvMemory) -> TestClient:
    app = FastAPI()
    app.include_router(build_router(mem))
    return TestClient(app)


def _links(page: str) -> list[str]:
    return [html.unescape(h) for h in re.findall(r'href="([^"]+)"', page)]


def test_search_finds_turns_and_facts_and_links_to_the_turn(client: TestClient, mem: ConvMemory) -> None:
    page = client.get(f"{PATH}/search", params={"q": "芒果"}).text
    assert "我对芒果过敏，吃了会起疹子。" in page
    turn_links = [h for h in _links(page) if "#m-" in h]
    assert len(turn_links) == 1
    # The link opens the timeline with that turn on it.
    target = client.get(turn_links[0].split("#")[0]).text
    message_id = turn_links[0].split("#m-")[1]
    assert f'id="m-{message_id}"' in target
    fact = next(f for f in mem.fragments(MID) if "芒果" in f.content)
    assert any(f"fact={fact.id}" in h for h in _links(page))


def test_search_filters(client: TestClient) -> None:
    both = client.get(f"{PATH}/search", params={"q": "杭州"}).text
    assert "我住在杭州。" in both and "杭州的西湖很美。" in both
    users = client.get(f"{PATH}/search", params={"q": "杭州", "role": "user"}).text
    assert "我住在杭州。" in users and "杭州的西湖很美。" not in users
    later = client.get(f"{PATH}/search", params={"q": "杭州", "since": "2026-01-02"}).text
    assert "我住在杭州。" not in later and "no turn found" in later
    # The move superseded the city fact: it is found among superseded facts only.
    superseded = client.get(f"{PATH}/search", params={"q": "杭州", "status": "superseded"}).text
    active = client.get(f"{PATH}/search", params={"q": "杭州", "status": "active"}).text
    assert "用户住在杭州" in superseded.split('id="facts"')[1]
    assert "用户住在杭州" not in active.split('id="facts"')[1]
    bad = client.get(f"{PATH}/search", params={"q": "x", "since": "yesterday"})
    assert bad.status_code == 400 and "since" in bad.text


def test_search_of_an_unknown_memory_is_404(client: TestClient) -> None:
    assert client.get("/memories/nobody/search", params={"q": "x"}).status_code == 404


def test_graph_joins_facts_turns_variables_and_supersedes(client: TestClient, mem: ConvMemory) -> None:
    page = client.get(f"{PATH}/graph").text
    # Server-rendered SVG: no inline script (the CSP forbids it), no CDN.
    assert re.search(r"<script(?![^>]*\bsrc=\"/viewer/static/)", page) is None
    assert '<svg class="memory-graph"' in page and "https://" not in page
    facts = mem.fragments(MID, status=None)
    for f in facts:
        assert f'id="f-{f.id}"' in page
        for sid in f.source_message_ids:
            assert f'id="t-{sid}"' in page
    old = next(f for f in facts if f.superseded_by)
    assert 'class="edge supersede"' in page and old.superseded_by in page
    assert 'id="v-city"' in page and 'class="edge feeds"' in page
    # A turn node's link opens the timeline at that turn.
    turn_href = next(h for h in _links(page) if "#m-" in h)
    message_id = turn_href.split("#m-")[1]
    assert f'id="m-{message_id}"' in client.get(turn_href.split("#")[0]).text


def test_graph_of_500_facts_renders(client: TestClient, mem: ConvMemory) -> None:
    # The facts in one transaction and one lifecycle run after them (mem.add_fragment runs the
    # lifecycle after each fact: 500 runs cost this test ten seconds and test nothing of the page).
    with mem.store.session() as session, session.transaction(MID):
        for n in range(500):
            session.add_fragment(MID, f"用户的第{n}条备注。", category="other", origin="manual")
    mem.lifecycle.run(MID)
    assert len(mem.fragments(MID)) >= 500
    page = client.get(f"{PATH}/graph")
    assert page.status_code == 200 and page.text.count('class="node fact') >= 500


def test_memory_page_links_to_search_and_graph(client: TestClient) -> None:
    page = client.get(PATH).text
    assert f'href="{PATH}/search"' in page and f'href="{PATH}/graph"' in page


def test_add_fact_form(client: TestClient, mem: ConvMemory) -> None:
    page = client.get(PATH).text
    assert f'action="{PATH}/fragments"' in page and 'class="add-fact"' in page
    added = client.post(
        f"{PATH}/fragments",
        data={"content": "用户周末常去爬山。", "category": "hobby"},
        follow_redirects=False,
    )
    assert added.status_code == 303 and "notice=fact+added" in added.headers["location"]
    fact = next(f for f in mem.fragments(MID) if f.content == "用户周末常去爬山。")
    assert (fact.category, fact.origin) == ("hobby", "manual")
    assert any(a.action == "add" and a.object_id == fact.id for a in mem.store.list_audit(MID))
    assert client.post(f"{PATH}/fragments", data={"content": " "}).status_code == 400
    assert client.post("/memories/nobody/fragments", data={"content": "x。"}).status_code == 404
    assert [i.memory_id for i in mem.memories()] == [MID]
    foreign = client.post(
        f"{PATH}/fragments", data={"content": "y。"}, headers={"Sec-Fetch-Site": "cross-site"}
    )
    assert foreign.status_code == 403


def test_audit_entries_say_what_changed(client: TestClient, mem: ConvMemory) -> None:
    fact = mem.add_fragment(MID, "用户喜欢喝绿茶。", category="preference")
    mem.update_fragment(MID, fact.id, content="用户喜欢喝乌龙茶。")
    page = client.get(PATH).text
    audit = page.split('id="audit"')[1]
    assert "<s>用户喜欢喝绿茶。</s> → 用户喜欢喝乌龙茶。" in audit
    assert '<span class="muted">content:</span> 用户喜欢喝绿茶。' in audit  # the add
