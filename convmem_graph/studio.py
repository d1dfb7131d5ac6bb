"""The lifecycle graph for LangGraph Studio / ``langgraph dev`` (named in ``langgraph.json``).

The server supplies its own checkpointer. Runs take the memory id as input and the services as
context, e.g. input ``{"memory_id": "mem_u10086"}`` and context
``{"db_url": "convmem.db", "config": {"bot_ids": ["ai_xiaoyu_bot"]}, "inputs": [<payload>, ...]}``.
"""

from __future__ import annotations

from convmem_graph.graph import build_memory_graph

__all__ = ["graph"]

graph = build_memory_graph().compile(name="convmem_lifecycle")
