"""The lifecycle graph for LangGraph Studio / ``langgraph dev`` (named in ``langgraph.json``).

The server supplies its own checkpointer. Runs take the memory id as input and the services as
context, e.g. input ``{"memory_id": "mem_u10086"}`` and context
``{"db_url": "convmem.db", "config": {"bot_ids": ["ai_xiaoyu_bot"]}, "inputs": [<payload>, ...],
"vendors": ["trtc"]}``. The store is opened from ``db_url`` by the first node that needs it (in a
worker thread, not on the server's event loop), once per database for the server's lifetime. The
output carries the built payloads (``payload_bodies``) and the memory block (``memory_block``).
"""

from __future__ import annotations

from convmem_graph.graph import build_memory_graph

__all__ = ["graph"]

graph = build_memory_graph(report=True).compile(name="convmem_lifecycle")
