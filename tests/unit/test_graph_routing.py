"""The lifecycle graph's routes: nodes that choose their next step take the paths conditional edges took.

``normalize``, ``extract`` and ``update_variables`` return a ``Command`` whose ``goto`` their route
function picks from the node's input and update (issue 24 item 2: a conditional edge made LangGraph
copy every channel to read the state again). The drawn graph and the path of every run stay those of
the conditional-edge wiring.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command

from convmem_graph import graph as lifecycle
from convmem_graph.state import MemoryState

NODES = ("ingest", "normalize", "extract", "update_variables", "summarize", "inject")
ROUTES = {
    "normalize": lifecycle._after_normalize,
    "extract": lifecycle._after_extract,
    "update_variables": lifecycle._after_variables,
}
#: What each node may set that a route reads.
FLAGS = ("pending_extraction", "fragments_changed", "summary_due", "variables_changed")


def _edges(graph: Any) -> set[tuple[str, str, bool]]:
    return {(e.source, e.target, e.conditional) for e in graph.get_graph().edges}


def test_drawn_edges_are_the_routes() -> None:
    dotted = {(node, to, True) for node, route in ROUTES.items() for to in lifecycle._destinations(route)}
    solid = {
        (START, "ingest", False),
        ("ingest", "normalize", False),
        ("summarize", "inject", False),
    }
    assert _edges(lifecycle.build_memory_graph().compile()) == dotted | solid | {("inject", END, False)}
    with_report = lifecycle.build_memory_graph(report=True).compile()
    assert _edges(with_report) == dotted | solid | {("inject", "report", False), ("report", END, False)}
    assert dotted >= {("normalize", "extract", True), ("extract", "update_variables", True)}


def test_a_routed_node_returns_its_update_and_the_route_of_the_state_after_it() -> None:
    update = {"fragments_changed": True, "ingested": 2}

    def node(state: dict[str, Any]) -> dict[str, Any]:
        return update

    routed = lifecycle._routed(node, lifecycle._after_extract)
    out = routed({"memory_id": "m", "fragments_changed": False, "summary_due": True})
    assert isinstance(out, Command) and out.update is update and out.goto == "update_variables"
    assert routed.__wrapped__ is node  # type: ignore[attr-defined]  # LangGraph reads the signature


_updates = st.fixed_dictionaries(
    {},
    optional={
        "pending_extraction": st.booleans(),
        "fragments_changed": st.booleans(),
        "summary_due": st.booleans(),
        "variables_changed": st.lists(st.sampled_from(["city", "hobbies"]), max_size=2),
    },
)


class _Script:
    """Stub nodes that log their name and return the update drawn for them."""

    def __init__(self) -> None:
        self.updates: dict[str, dict[str, Any]] = {}
        self.path: list[str] = []

    def node(self, name: str) -> Callable[[dict[str, Any]], dict[str, Any]]:
        def run(state: dict[str, Any]) -> dict[str, Any]:
            self.path.append(name)
            # ingest resets every key at a run's start, as the real one does
            reset = dict.fromkeys(FLAGS, False) if name == "ingest" else {}
            return {**reset, **self.updates.get(name, {})}

        run.__name__ = name
        return run


def _edge_wired(script: _Script) -> Any:
    """The wiring before: the same nodes with LangGraph conditional edges."""
    g: StateGraph[MemoryState, None, MemoryState, MemoryState] = StateGraph(MemoryState)
    for name in NODES:
        g.add_node(name, script.node(name))
    g.add_edge(START, "ingest")
    g.add_edge("ingest", "normalize")
    for name, route in ROUTES.items():
        g.add_conditional_edges(name, route)
    g.add_edge("summarize", "inject")
    g.add_edge("inject", END)
    return g.compile()


@pytest.fixture(scope="module")
def wired() -> Iterator[tuple[_Script, Any, _Script, Any]]:
    before = _Script()
    now = _Script()
    patch = pytest.MonkeyPatch()
    for name in NODES:
        patch.setattr(lifecycle, name, now.node(name))
    try:
        built = lifecycle.build_memory_graph().compile()
    finally:
        patch.undo()
    yield before, _edge_wired(before), now, built


@settings(max_examples=120, deadline=None)
@given(per_node=st.fixed_dictionaries({name: _updates for name in ("ingest", *ROUTES)}))
def test_every_run_takes_the_path_conditional_edges_took(
    wired: tuple[_Script, Any, _Script, Any], per_node: dict[str, dict[str, Any]]
) -> None:
    before, edge_graph, now, graph = wired
    outs = []
    for script, compiled in ((before, edge_graph), (now, graph)):
        script.updates, script.path = per_node, []
        outs.append(compiled.invoke({"memory_id": "m"}))
    assert now.path == before.path
    assert now.path[:2] == ["ingest", "normalize"] and now.path[-1] == "inject"
    first, second = outs
    assert {k: v for k, v in second.items() if k != "node_ms"} == {
        k: v for k, v in first.items() if k != "node_ms"
    }
    assert list(second["node_ms"]) == now.path  # timed in run order, as before
