"""OpenTelemetry spans for the lifecycle nodes and the server's requests (no-op without OpenTelemetry).

When ``opentelemetry-api`` is installed, every lifecycle node runs in a span named
``convmem.<node>`` (attributes ``convmem.memory_id``, ``convmem.node``; an exception is recorded
and the span marked as an error), and ``convmem serve`` opens one span per request named after its
route template, ``POST /webhooks/trtc`` (:mod:`convmem_graph.server.request_spans`; ids never
appear in a name). Spans go to the process's tracer provider, as the application configured it
(``opentelemetry-sdk`` and an exporter, or ``opentelemetry-instrument``); without a configured
provider OpenTelemetry's API does nothing, and without the package nothing is wrapped at all.
:func:`use_tracer_provider` points convmem at a provider of its own (tests use an in-memory
exporter).

LangSmith tracing needs nothing from here: the lifecycle is a LangGraph graph, so
``LANGSMITH_TRACING=true`` traces its runs as for any graph.
"""

from __future__ import annotations

import functools
import importlib.util
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["enabled", "recording", "traced_node", "tracer", "use_tracer_provider"]

F = TypeVar("F", bound=Callable[..., Any])

_provider: Any = None


def enabled() -> bool:
    """Whether ``opentelemetry-api`` is installed (then nodes and requests are wrapped)."""
    return importlib.util.find_spec("opentelemetry") is not None


def use_tracer_provider(provider: Any) -> None:
    """Send convmem's spans to ``provider`` instead of the global one (``None``: the global one again)."""
    global _provider
    _provider = provider


def tracer() -> Any:
    """The OpenTelemetry tracer of convmem_graph (needs ``opentelemetry-api``)."""
    from opentelemetry import trace

    return trace.get_tracer("convmem_graph", tracer_provider=_provider)


def recording() -> bool:
    """Whether a span started now could be recorded: convmem's own provider, or a global one set.

    Until the application sets a tracer provider, OpenTelemetry's global one is a proxy whose
    spans record nothing; opening one per node then costs time and shows nowhere. Checked at
    each call, so a provider set after the graph was built is used from then on.
    """
    if _provider is not None:
        return True
    from opentelemetry import trace

    return not isinstance(trace.get_tracer_provider(), (trace.ProxyTracerProvider, trace.NoOpTracerProvider))


def traced_node(name: str, fn: F) -> F:
    """Return ``fn`` (a node ``(state, runtime)``) running in a ``convmem.<name>`` span, or ``fn``.

    The wrapper keeps ``fn``'s signature and annotations, so LangGraph still injects the runtime.
    No span is opened while no tracer provider is set (see :func:`recording`).
    """
    if not enabled():
        return fn

    @functools.wraps(fn)
    def node(*args: Any, **kwargs: Any) -> Any:
        if not recording():
            return fn(*args, **kwargs)
        state = args[0] if args else kwargs.get("state")
        memory_id = state.get("memory_id") if isinstance(state, dict) else None
        with tracer().start_as_current_span(f"convmem.{name}") as span:
            span.set_attribute("convmem.node", name)
            if isinstance(memory_id, str):
                span.set_attribute("convmem.memory_id", memory_id)
            result = fn(*args, **kwargs)
            if isinstance(result, dict) and isinstance(result.get("model_calls"), int):
                span.set_attribute("convmem.model_calls", result["model_calls"])
            return result

    return node  # type: ignore[return-value]
