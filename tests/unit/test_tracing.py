"""OpenTelemetry spans (issue 26, item 6): one span per lifecycle node run, one per server request.

An in-memory exporter on a tracer provider of convmem's own (:func:`use_tracer_provider`), so the
process's global provider is left alone.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("opentelemetry.sdk", reason="opentelemetry-sdk is not installed")

from opentelemetry.sdk.trace import TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter  # noqa: E402

from convmem_graph.memory import ConvMemory  # noqa: E402
from convmem_graph.tracing import use_tracer_provider  # noqa: E402


@pytest.fixture
def exporter() -> Iterator[InMemorySpanExporter]:
    spans = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    use_tracer_provider(provider)
    yield spans
    use_tracer_provider(None)
    provider.shutdown()


def test_one_span_per_node_that_ran(exporter: InMemorySpanExporter, tmp_path: Path) -> None:
    with ConvMemory.open(str(tmp_path / "t.db")) as mem:
        exporter.clear()
        mem.ingest("u_1", [{"role": "user", "content": "我住在杭州，我对芒果过敏。"}], source="openai")
    names = [s.name for s in exporter.get_finished_spans()]
    # A first run with a new fact goes through every node: the changed variable (city) sends it
    # through summarize, which starts no summary on so little text but still ran.
    assert names == [
        "convmem.ingest",
        "convmem.normalize",
        "convmem.extract",
        "convmem.update_variables",
        "convmem.summarize",
        "convmem.inject",
    ]
    for span in exporter.get_finished_spans():
        assert span.attributes is not None
        assert span.attributes["convmem.memory_id"] == "u_1"
        assert span.attributes["convmem.node"] == span.name.removeprefix("convmem.")


def test_a_failing_node_records_the_error(exporter: InMemorySpanExporter) -> None:
    from convmem_graph.tracing import traced_node

    def boom(state: dict[str, str]) -> dict[str, int]:
        raise RuntimeError("model endpoint down")

    node = traced_node("extract", boom)
    with pytest.raises(RuntimeError):
        node({"memory_id": "u_2"})
    (span,) = exporter.get_finished_spans()
    assert span.name == "convmem.extract" and not span.status.is_ok
    assert span.events and span.events[0].name == "exception"
    assert node.__name__ == "boom" and node.__wrapped__ is boom  # type: ignore[attr-defined]


def test_one_span_per_server_request(
    exporter: InMemorySpanExporter, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("fastapi", reason="the server extra (fastapi) is not installed")
    from fastapi.testclient import TestClient

    from convmem_graph.server.app import create_app
    from tests.unit.server.conftest import make_settings

    monkeypatch.delenv("CONVMEM_SERVE_TOKEN", raising=False)
    with TestClient(create_app(make_settings(tmp_path))) as client:
        exporter.clear()
        assert client.get("/livez").status_code == 200
        assert client.get("/api/v2/apps/memory/memory_nodes/n_404").status_code == 404
    server = [s for s in exporter.get_finished_spans() if s.attributes and "http.route" in s.attributes]
    assert [s.name for s in server] == ["GET /livez", "GET /api/v2/apps/memory/memory_nodes/{memory_node_id}"]
    assert [s.attributes["http.response.status_code"] for s in server if s.attributes] == [200, 404]


def test_no_span_is_opened_while_no_provider_is_set(monkeypatch: pytest.MonkeyPatch) -> None:
    """Before the application sets a provider, OpenTelemetry's spans record nothing: none is opened."""
    from opentelemetry import trace

    from convmem_graph import tracing

    if not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider):
        pytest.skip("this process has a global tracer provider set")
    opened: list[str] = []
    real = tracing.tracer

    def counting_tracer() -> object:
        opened.append("span")
        return real()

    monkeypatch.setattr(tracing, "tracer", counting_tracer)
    node = tracing.traced_node("ingest", lambda state: {"ingested": 1})
    assert not tracing.recording()
    assert node({"memory_id": "u_3"}) == {"ingested": 1} and opened == []
    spans = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    use_tracer_provider(provider)  # set after the node was built: used from the next call on
    try:
        assert tracing.recording()
        assert node({"memory_id": "u_3"}) == {"ingested": 1} and opened == ["span"]
        assert [s.name for s in spans.get_finished_spans()] == ["convmem.ingest"]
    finally:
        use_tracer_provider(None)
        provider.shutdown()
