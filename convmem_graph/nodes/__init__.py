"""The lifecycle steps, one module each; every node is usable alone in another StateGraph.

Each node has the signature ``node(state: MemoryState, runtime: Runtime[MemoryContext]) -> dict``.
"""

from __future__ import annotations

from convmem_graph.nodes.extract import extract
from convmem_graph.nodes.ingest import ingest
from convmem_graph.nodes.inject import inject
from convmem_graph.nodes.normalize import normalize
from convmem_graph.nodes.summarize import summarize
from convmem_graph.nodes.variables import update_variables

__all__ = ["extract", "ingest", "inject", "normalize", "summarize", "update_variables"]
