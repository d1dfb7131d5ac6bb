"""The memory a server process serves: one place that opens it from the settings.

The app and its worker process (``CONVMEM_WORKER_PROCESS``) each open their own from the same
settings, so both see the same database, bot ids and embeddings model.
"""

from __future__ import annotations

from convmem_graph.config import MemoryConfig
from convmem_graph.memory import ConvMemory
from convmem_graph.server.settings import ServeSettings

__all__ = ["open_served_memory"]


def open_served_memory(settings: ServeSettings) -> ConvMemory:
    """The memory the server (or its worker process) serves: ``settings.db``, bot ids, embeddings.

    With ``CONVMEM_EMBEDDINGS`` new turns are embedded by a background thread after each run, and
    call starts with a query search them by meaning beside the words.

    Raises:
        ValueError: ``CONVMEM_EMBEDDINGS`` names no known model (the message says which are).
    """
    embeddings = None
    if settings.embeddings:
        from convmem_graph.embeddings import embeddings_from_name

        embeddings = embeddings_from_name(settings.embeddings)
    return ConvMemory.open(
        settings.db,
        config=MemoryConfig(bot_ids=list(settings.bot_ids)),
        pools=settings.pools(),
        embeddings=embeddings,
    )
