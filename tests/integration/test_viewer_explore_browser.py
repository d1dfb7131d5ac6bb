"""The viewer's search and memory graph pages in headless Chromium, at size (issue 26, item 1).

A 100k-message memory with one planted phrase (a sentence written for this test) and 500 facts,
each tied to a source turn, two of them superseded. Search must show the phrase within 300 ms of
page time; the graph page must render its >= 500 facts within 1 s, and a click on a turn node must
reach that turn in the timeline. Page time is the browser's navigation timing (request start to
DOMContentLoaded end), printed with the machine's load.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("fastapi", reason="the server extra (fastapi) is not installed")
playwright_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed (test extra)")

from convmem_graph.extractors.reconcile import reconcile  # noqa: E402
from convmem_graph.memory import ConvMemory  # noqa: E402
from convmem_graph.models import FragmentCandidate, Message  # noqa: E402
from convmem_graph.nodes._extract_reads import related_facts  # noqa: E402
from tests.integration.live_server import serve  # noqa: E402

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = os.environ.get("CONVMEM_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
if CHROMIUM is None:
    pytest.skip(
        "no Chromium installed (apt-get install chromium, or set CONVMEM_CHROMIUM)", allow_module_level=True
    )

MEMORY = "u_big"
T0 = 1_767_225_600_000
N = 100_000
PLANTED_AT = 73_136
PLANTED = "我把旧护照锁在书房的蓝色铁皮箱里了。"
FACTS = 500


def _build(db: Path) -> None:
    texts = ["我今天跑了五公里。", "晚上想吃点清淡的。", "周末去看朋友。", "最近工作有点忙。"]
    with ConvMemory.open(str(db)) as mem:
        mem.store.ensure_memory(MEMORY)
        batch: list[Message] = []
        for i in range(N):
            role = "user" if i % 2 == 0 else "assistant"
            content = PLANTED if i == PLANTED_AT else (texts[i % 4] if role == "user" else f"好的（{i}）。")
            batch.append(
                Message(
                    id=f"m{i:07d}",
                    role=role,
                    content=content,
                    channel="im",
                    source="message",
                    timestamp_ms=T0 + i * 7_000,
                )
            )
            if len(batch) == 5_000:
                mem.store.add_messages(MEMORY, batch)
                batch = []
        mem.store.add_messages(MEMORY, batch)
        candidates = [
            FragmentCandidate(
                content=f"用户的第{k}条记录。",
                key=f"note:n{k}",
                value=str(k),
                single_valued=True,
                source_message_ids=[f"m{k * 180:07d}"],
            )
            for k in range(FACTS)
        ]
        mem.store.commit_extraction(MEMORY, reconcile(candidates, []), upto_seq=0, now_ms=T0)
        # Two facts superseded by a later statement of the same slot.
        later = [
            FragmentCandidate(
                content=f"用户的第{k}条记录改了。",
                key=f"note:n{k}",
                value=f"{k}b",
                single_valued=True,
                source_message_ids=[f"m{k * 180 + 2:07d}"],
            )
            for k in (3, 4)
        ]
        related = related_facts(mem.store, MEMORY, [c.key for c in later], [c.content for c in later])
        mem.store.commit_extraction(MEMORY, reconcile(later, related), upto_seq=0, now_ms=T0 + 1)


@pytest.fixture(scope="module")
def base_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    from convmem_graph.server.app import create_app
    from convmem_graph.server.settings import ServeSettings

    db = tmp_path_factory.mktemp("explore") / "big.db"
    _build(db)
    with serve(create_app(ServeSettings(db=str(db), token=None))) as url:
        yield url


@pytest.fixture(scope="module")
def page(base_url: str) -> Iterator[Any]:
    with playwright_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
        context = browser.new_context(viewport={"width": 1280, "height": 900}, locale="zh-CN")
        pg = context.new_page()
        pg.set_default_timeout(30_000)
        yield pg
        browser.close()


def _page_ms(page: Any) -> float:
    timing = page.evaluate(
        "() => { const t = performance.getEntriesByType('navigation')[0];"
        " return [t.requestStart, t.domContentLoadedEventEnd]; }"
    )
    return float(timing[1] - timing[0])


def _load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def _best_of(page: Any, url: str, rounds: int = 3) -> float:
    """The fastest of a few loads (the first warms the server's caches); all are printed."""
    times = []
    for _ in range(rounds):
        page.goto(url)
        times.append(_page_ms(page))
    print(f"{url}: page ms {[round(t, 1) for t in times]}, load {_load()}")
    return min(times)


def test_search_finds_the_planted_phrase_in_a_100k_memory(page: Any, base_url: str) -> None:
    url = f"{base_url}/memories/{MEMORY}/search?q=蓝色铁皮箱"
    ms = _best_of(page, url)
    hit = page.locator("table.results a", has_text=PLANTED)
    assert hit.count() == 1
    assert ms < 300, f"search page took {ms:.0f} ms (load {_load()})"
    _shot(page, "viewer-search.png")
    hit.click()
    page.wait_for_load_state("domcontentloaded")
    row = page.locator(f"#m-m{PLANTED_AT:07d}")
    assert row.count() == 1 and PLANTED in row.inner_text()


def test_graph_renders_500_facts_and_a_click_reaches_the_turn(page: Any, base_url: str) -> None:
    url = f"{base_url}/memories/{MEMORY}/graph"
    ms = _best_of(page, url)
    assert page.locator("svg.memory-graph a.node.fact").count() >= FACTS
    assert page.locator("svg.memory-graph path.edge.supersede").count() == 2
    assert ms < 1000, f"graph page took {ms:.0f} ms (load {_load()})"
    _shot(page, "viewer-memory-graph.png")
    target = f"m{7 * 180:07d}"
    page.locator(f'svg.memory-graph a[id="t-{target}"]').click()
    page.wait_for_load_state("domcontentloaded")
    assert page.locator(f"#m-{target}").count() == 1
    assert "用户" not in page.locator(f"#m-{target}").inner_text()  # the turn, not a fact


def _shot(page: Any, name: str) -> None:
    target = os.environ.get("CONVMEM_VIEWER_SCREENSHOTS")
    if target:
        out = ROOT / target
        out.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(out / name), full_page=False)
