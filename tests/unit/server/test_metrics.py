"""``GET /metrics`` of ``convmem serve`` (issue 26, item 6), parsed with prometheus_client's parser.

Deliveries, queue depth, proxy latency, lifecycle runs and errors, after real traffic: signed TRTC
deliveries, a proxied chat completion (fake upstream) and a failing upstream.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("fastapi", reason="the server extra (fastapi) is not installed")
pytest.importorskip("prometheus_client", reason="the metrics extra is not installed")

import httpx  # noqa: E402
from fastapi.testclient import TestClient  # noqa: E402
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

from convmem_graph.server.app import create_app  # noqa: E402
from convmem_graph.signatures import sign_trtc  # noqa: E402
from tests.unit.server.conftest import TRTC_KEY, make_settings  # noqa: E402

UPSTREAM = "http://upstream.test/v1"
UPSTREAM_KEY = "sk-upstream-test"


class Upstream:
    """A model endpoint answering one completion, or a 502 when told to."""

    def __init__(self) -> None:
        self.fail = False

    def handler(self, request: httpx.Request) -> httpx.Response:
        if self.fail:
            return httpx.Response(502, content=b"bad gateway")
        answer = {
            "id": "c",
            "object": "chat.completion",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "好的。"}}],
        }
        return httpx.Response(200, json=answer)


@pytest.fixture
def upstream() -> Upstream:
    return Upstream()


@pytest.fixture
def client(tmp_path: Path, upstream: Upstream, monkeypatch: pytest.MonkeyPatch) -> Iterator[TestClient]:
    monkeypatch.delenv("CONVMEM_SERVE_TOKEN", raising=False)
    settings = make_settings(tmp_path, upstream_url=UPSTREAM, upstream_api_key=UPSTREAM_KEY)
    with TestClient(create_app(settings, upstream_transport=httpx.MockTransport(upstream.handler))) as c:
        yield c


def _samples(client: TestClient) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    response = client.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain; version=0.0.4")
    out: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    for family in text_string_to_metric_families(response.text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def _value(samples: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def test_metrics_after_deliveries_proxy_and_errors(
    client: TestClient, upstream: Upstream, trtc_call: dict[str, Any]
) -> None:
    bodies = [d["raw_body"] for d in trtc_call["deliveries"]]
    for raw in bodies:
        body = raw.encode("utf-8")
        headers = {"Content-Type": "application/json", "Sign": sign_trtc(body, TRTC_KEY)}
        assert client.post("/webhooks/trtc", content=body, headers=headers).status_code == 200
    forged = client.post("/webhooks/trtc", content=bodies[0].encode(), headers={"Sign": "bm9wZQ=="})
    assert forged.status_code == 401
    assert client.app.state.worker.wait_idle(30)  # type: ignore[attr-defined]
    # Queue depth: every delivery processed.
    drained = _samples(client)
    assert _value(drained, "convmem_inbox_deliveries", status="pending") == 0.0
    assert _value(drained, "convmem_inbox_deliveries", status="done") == float(len(set(bodies)))

    request = {"model": "m", "messages": [{"role": "user", "content": "推荐个水果"}], "user": "u_9"}
    assert client.post("/v1/chat/completions", json=request).status_code == 200
    upstream.fail = True
    failed = client.post("/v1/chat/completions", json=request)
    assert failed.status_code >= 500

    samples = _samples(client)
    n = float(len(bodies))
    assert _value(samples, "convmem_webhook_deliveries_total", source="trtc", status="200") == n
    assert _value(samples, "convmem_webhook_deliveries_total", source="trtc", status="401") == 1.0
    assert (
        _value(samples, "convmem_http_requests_total", route="/webhooks/trtc", method="POST", status="200")
        == n
    )
    # The proxied turn may still wait in the inbox: the pending gauge is always exported.
    assert ("convmem_inbox_deliveries", (("status", "pending"),)) in samples
    # Proxy latency: both answers observed.
    assert _value(samples, "convmem_proxy_request_duration_seconds_count") == 2.0
    assert _value(samples, "convmem_proxy_request_duration_seconds_sum") > 0.0
    # Lifecycle runs of the worker and the 5xx answer.
    assert _value(samples, "convmem_lifecycle_runs_total") >= 1.0
    assert _value(samples, "convmem_lifecycle_errors_total") == 0.0
    assert _value(samples, "convmem_http_errors_total", route="/v1/chat/completions") == 1.0
    # Route templates, never ids.
    assert all("u_9" not in json.dumps(labels) for _, labels in samples)


def test_metrics_need_the_admin_token(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CONVMEM_SERVE_TOKEN", raising=False)
    settings = make_settings(tmp_path, token="s3cret")
    with TestClient(create_app(settings)) as c:
        assert c.get("/metrics").status_code == 401
        ok = c.get("/metrics", headers={"Authorization": "Bearer s3cret"})
        assert ok.status_code == 200 and "convmem_inbox_deliveries" in ok.text
