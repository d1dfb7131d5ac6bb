"""The memory lifecycle as a LangGraph state machine.

```
START -> ingest -> normalize -> extract -> update_variables -> summarize -> inject -> END
```

Conditional routes skip steps with nothing to do: no message past the extraction cursor skips
``extract``; no fragment change skips ``update_variables``; too little new content skips
``summarize``. The three routing nodes decide their next step themselves (they return a
:class:`~langgraph.types.Command` whose ``goto`` the route functions choose from the node's input
and its own update; declared ``destinations`` draw the same dotted edges): a conditional edge would
have LangGraph copy every channel of the state to read it afresh after each of those nodes.
``extract`` and ``summarize`` carry a :class:`~langgraph.types.RetryPolicy` because they may call
a model. Services reach the nodes through the run context
(:class:`~convmem_graph.state.MemoryContext`), so every node also works in someone else's graph.

Example:
    >>> from convmem_graph.graph import build_memory_graph
    >>> graph = build_memory_graph().compile()
    >>> sorted(n for n in graph.get_graph().nodes if not n.startswith("__"))
    ['extract', 'ingest', 'inject', 'normalize', 'summarize', 'update_variables']
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any, Literal, TypeVar, get_args, get_type_hints

from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, RetryPolicy

from convmem_graph.accounting import accounted_node, timed_node
from convmem_graph.errors import ExtractionError
from convmem_graph.nodes import extract, ingest, inject, normalize, summarize, update_variables
from convmem_graph.nodes.report import ReportState
from convmem_graph.nodes.report import report as report_node
from convmem_graph.state import MemoryContext, MemoryState
from convmem_graph.tracing import traced_node

__all__ = ["MemoryContext", "MemoryState", "build_memory_graph", "model_retry_policy", "retry_on"]

F = TypeVar("F", bound=Callable[..., Any])


def retry_on(exc: Exception) -> bool:
    """Decide whether a failed model-calling node is retried by LangGraph.

    Network failures, timeouts and rate limits are retried; an :class:`ExtractionError` is not
    (the extractor already retried invalid output), and neither are programming errors.
    """
    if isinstance(exc, ExtractionError):
        return False
    from convmem_graph.extractors.llm import is_retryable

    return is_retryable(exc)


def model_retry_policy(max_attempts: int = 3) -> RetryPolicy:
    """Return the retry policy used on model-calling nodes."""
    return RetryPolicy(max_attempts=max_attempts, initial_interval=0.5, max_interval=10.0, retry_on=retry_on)


def _after_normalize(state: MemoryState) -> Literal["extract", "update_variables", "summarize", "inject"]:
    if state.get("pending_extraction"):
        return "extract"
    if state.get("fragments_changed"):
        return "update_variables"
    return "summarize" if state.get("summary_due") else "inject"


def _after_extract(state: MemoryState) -> Literal["update_variables", "summarize", "inject"]:
    if state.get("fragments_changed"):
        return "update_variables"
    return "summarize" if state.get("summary_due") else "inject"


def _after_variables(state: MemoryState) -> Literal["summarize", "inject"]:
    # A changed variable refreshes the summary that names it, however few tokens the run brought.
    return "summarize" if state.get("summary_due") or state.get("variables_changed") else "inject"


def _destinations(route: Callable[[MemoryState], str]) -> tuple[str, ...]:
    """The nodes ``route`` may choose (its ``Literal`` return annotation)."""
    return tuple(get_args(get_type_hints(route)["return"]))


def _routed(fn: F, route: Callable[[MemoryState], str]) -> F:
    """Return the node ``fn`` ending in ``Command(update=<its update>, goto=route(<state after it>))``.

    The state after the node is its input with its update applied: what a conditional edge reads
    (every key of :class:`MemoryState` is a plain last-value channel), without LangGraph copying
    every channel to read it. The node itself stays a plain function returning a dict, usable in
    someone else's graph.
    """

    @functools.wraps(fn)
    def node(state: Mapping[str, Any], *args: Any, **kwargs: Any) -> Any:
        update = fn(state, *args, **kwargs)
        after = {**state, **update} if isinstance(update, dict) else state
        return Command(update=update, goto=route(after))  # type: ignore[arg-type]

    return node  # type: ignore[return-value]


def build_memory_graph(
    *,
    max_attempts: int = 3,
    report: bool = False,
    input_schema: type[Any] | None = None,
    context_schema: type[MemoryContext] = MemoryContext,
) -> StateGraph[MemoryState, MemoryContext, MemoryState, MemoryState]:
    """Build (not compile) the lifecycle graph; compile it with the checkpointer of your choice.

    Args:
        max_attempts: Attempts of model-calling nodes (``extract``, ``summarize``) before the run
            raises; what was stored before stays stored and the next run resumes from the cursors.
        report: End with a ``report`` node that puts the built payloads and the memory block into
            the output (:class:`~convmem_graph.nodes.report.ReportState`), for LangGraph Studio.
        input_schema: The keys a run's input may set (default: the whole state); Studio's input
            form shows these.
        context_schema: The run context class (a :class:`MemoryContext` subclass).
    """
    policy = model_retry_policy(max_attempts)
    g: StateGraph[MemoryState, MemoryContext, MemoryState, MemoryState] = StateGraph(
        MemoryState,
        context_schema=context_schema,
        input_schema=input_schema or MemoryState,
        output_schema=ReportState if report else MemoryState,
    )
    # Each node timed into the state's node_ms (kept in the end state, so "exit" runs show their
    # per-node times too), and in an OpenTelemetry span when opentelemetry is installed.
    g.add_node("ingest", traced_node("ingest", timed_node("ingest", ingest, starts_run=True)))
    g.add_node(
        "normalize",
        _routed(traced_node("normalize", timed_node("normalize", normalize)), _after_normalize),
        destinations=_destinations(_after_normalize),
    )
    g.add_node(
        "extract",
        _routed(
            traced_node("extract", timed_node("extract", accounted_node("extract", extract))), _after_extract
        ),
        retry_policy=policy,
        destinations=_destinations(_after_extract),
    )
    g.add_node(
        "update_variables",
        _routed(
            traced_node("update_variables", timed_node("update_variables", update_variables)),
            _after_variables,
        ),
        destinations=_destinations(_after_variables),
    )
    g.add_node(
        "summarize",
        traced_node("summarize", timed_node("summarize", accounted_node("summarize", summarize))),
        retry_policy=policy,
    )
    g.add_node("inject", traced_node("inject", timed_node("inject", inject)))
    g.add_edge(START, "ingest")
    g.add_edge("ingest", "normalize")
    g.add_edge("summarize", "inject")
    if report:
        g.add_node("report", traced_node("report", timed_node("report", report_node)))
        g.add_edge("inject", "report")
        g.add_edge("report", END)
    else:
        g.add_edge("inject", END)
    return g
