"""The memory viewer: server-rendered HTML pages over a :class:`~convmem_graph.memory.ConvMemory`.

Served by ``convmem serve`` at ``/`` and opened locally by ``convmem view``. Pages are plain HTML
with real links (they work without JavaScript); a small script shipped beside them localizes times
and lights up a fact's source messages without a reload. Nothing is loaded from a network.
Everything shown is escaped (memory text is user input); every edit goes through the
ConvMemory / store API and its audit log, like the CLI.
"""

from __future__ import annotations

__all__: list[str] = []
