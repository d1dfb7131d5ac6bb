"""Arrows point down: no import cycle between modules and no import from a lower layer to a higher.

Every module of the package is parsed with :mod:`ast` (nothing is imported). Every import of a
``convmem_graph`` module counts: module level, inside functions (lazy) and under ``TYPE_CHECKING``.
The order is the README's "Layers" section; a module may import its own layer and the layers below.
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterator
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "convmem_graph"

#: Lowest first. A prefix names a module or a package with everything under it.
LAYERS: list[tuple[str, ...]] = [
    # Leaves: they import nothing of the package.
    (
        "errors",
        "_ids",
        "_time",
        "_lazy",
        "_heap",
        "tokens",
        "text",
        "_query_dates",
        "signatures",
        "_embedding_names",
        "_inline_background",
        "_memory_state",
        "_text_caches",
    ),
    ("accounting", "tracing", "embeddings"),
    ("models", "config"),
    ("_copies", "_held", "sources"),
    ("payloads",),
    ("extractors",),
    ("store",),
    ("state", "snapshot"),
    ("nodes",),
    ("graph",),
    ("checkpoints",),
    ("runner",),
    ("assembly",),
    ("memory_api", "memory_ops", "replay"),
    ("integrations", "langgraph_store"),
    ("memory",),
    ("settings",),
    ("clients",),
    ("server",),
    ("viewer",),
    ("cli", "studio", "__main__", ""),
]

#: (importer, imported) pairs allowed against the order, each with its reason. Keep it short.
ALLOWED: dict[tuple[str, str], str] = {}


def _modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


MODULES = _modules()


def _resolve(dotted: str) -> str | None:
    """The package module a ``convmem_graph...`` import names (a name inside a module -> the module)."""
    name = dotted.removeprefix("convmem_graph").removeprefix(".")
    while name not in MODULES:
        if not name:
            return None
        name = name.rpartition(".")[0]
    return name


def imports_of(module: str) -> Iterator[tuple[str, int]]:
    """The package modules ``module`` imports, with the line of each import."""
    yield from _imports_of(module)


@functools.cache
def _imports_of(module: str) -> tuple[tuple[str, int], ...]:
    # Parsed once per run: both checks walk every module.
    return tuple(_walk_imports(module))


def _walk_imports(module: str) -> Iterator[tuple[str, int]]:
    tree = ast.parse(MODULES[module].read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level:
            raise AssertionError(f"{module}:{node.lineno}: relative import (the house uses absolute imports)")
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names = [f"{node.module}.{a.name}" for a in node.names]
        else:
            continue
        for name in names:
            if name == "convmem_graph" or name.startswith("convmem_graph."):
                target = _resolve(name)
                if target is not None and target != module:
                    yield target, node.lineno


def layer_of(module: str) -> int:
    """Index of the layer ``module`` belongs to (its longest matching prefix)."""
    best: tuple[int, int] | None = None
    for i, prefixes in enumerate(LAYERS):
        for prefix in prefixes:
            if module == prefix or (prefix and module.startswith(prefix + ".")):
                if best is None or len(prefix) > best[1]:
                    best = (i, len(prefix))
            elif prefix == "" and module == "":
                best = (i, 0)
    if best is None:
        raise AssertionError(f"convmem_graph.{module} is in no layer: add it to LAYERS and the README")
    return best[0]


def _graph() -> dict[str, set[str]]:
    return {m: {t for t, _ in imports_of(m)} for m in MODULES}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle of ``graph`` (as a closed path), or ``None``."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return [*stack[stack.index(nxt) :], nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return None


def test_every_module_has_a_layer() -> None:
    for module in MODULES:
        layer_of(module)


def test_no_import_goes_up_a_layer() -> None:
    upward = [
        f"convmem_graph.{m}:{line} imports convmem_graph.{t} "
        f"(layer {layer_of(m)} -> {layer_of(t)}: {LAYERS[layer_of(t)]})"
        for m in sorted(MODULES)
        for t, line in imports_of(m)
        if layer_of(t) > layer_of(m) and (m, t) not in ALLOWED
    ]
    assert not upward, "imports from a lower layer to a higher one:\n" + "\n".join(upward)


def test_no_import_cycle() -> None:
    graph = _graph()
    for importer, imported in ALLOWED:
        graph[importer].discard(imported)
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(
        f"convmem_graph.{m}" if m else "convmem_graph" for m in cycle
    )


def test_the_checks_see_an_upward_import_and_a_cycle() -> None:
    assert layer_of("store.repository") > layer_of("text.keys")
    assert layer_of("payloads.render") < layer_of("memory")
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


@pytest.mark.parametrize(
    "module", ["store.repository", "payloads._quotes", "integrations", "langgraph_store"]
)
def test_the_modules_named_in_issue_22_import_nothing_above_them(module: str) -> None:
    assert all(layer_of(t) <= layer_of(module) for t, _ in imports_of(module))
