"""The lifecycle graph for LangGraph Studio / ``langgraph dev`` (named in ``langgraph.json``).

The server supplies its own checkpointer. A run needs only the memory id as input,
``{"memory_id": "mem_u10086"}``: it runs the lifecycle on that memory (in ``convmem.db`` of the
server's folder unless the context names ``db_url``) and returns the memory block. The context may
add payloads to store and vendor payloads to build, e.g. ``{"db_url": "convmem.db", "config":
{"bot_ids": ["ai_xiaoyu_bot"]}, "inputs": [<payload>, ...], "vendors": ["openai"]}``.

Vendor payloads are built only when their options are given: a vendor named in ``vendors`` whose
required options are missing (``trtc`` needs ``sdk_app_id``, ``room_id``, ``agent_config``,
``tts_config`` in ``inject_options.trtc``) is not built and the output's ``payload_errors`` says
what to add, while the run still stores the payloads and returns the block. A vendor with options
in ``inject_options`` is built even when ``vendors`` is empty. The store is opened from ``db_url``
by the first node that needs it (in a worker thread, not on the server's event loop), once per
database for the server's lifetime. The output carries the built payloads (``payload_bodies``) and
the memory block (``memory_block``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated

from pydantic.json_schema import SkipJsonSchema
from typing_extensions import TypedDict

from convmem_graph.graph import build_memory_graph
from convmem_graph.models import MemorySnapshot
from convmem_graph.state import MemoryContext

__all__ = ["StudioContext", "StudioInput", "graph"]


class StudioInput(TypedDict):
    """A Studio run's input: the memory to run the lifecycle on (all else is in the context)."""

    memory_id: str


@dataclass(kw_only=True)
class StudioContext(MemoryContext):
    """:class:`MemoryContext` that builds only the vendor payloads whose options are complete.

    Attributes:
        payload_errors: Vendors left out, with what their options lack (returned in the output).
    """

    payload_errors: Annotated[dict[str, str], SkipJsonSchema()] = field(default_factory=dict)

    def __post_init__(self) -> None:
        super().__post_init__()
        from convmem_graph.payloads.render import render_payload

        wanted = list(self.vendors) or list(self.inject_options)
        buildable: list[str] = []
        for vendor in wanted:
            # A dry build on an empty memory: missing or invalid options fail here, before the
            # run stores anything, and independently of the memory's content (CPU only, no I/O).
            try:
                render_payload(
                    vendor, MemorySnapshot(memory_id="options-check"), self.inject_options.get(vendor, {})
                )
            except ValueError as exc:
                self.payload_errors[vendor] = f"{exc} (set them in context.inject_options.{vendor})"
            else:
                buildable.append(vendor)
        self.vendors = tuple(buildable)


graph = build_memory_graph(report=True, input_schema=StudioInput, context_schema=StudioContext).compile(
    name="convmem_lifecycle"
)
