"""``convmem serve``: vendor webhooks, an OpenAI-compatible memory proxy, and the inbox worker.

Install with ``pip install 'convmem-graph[server]'``. Nothing below this package imports it.
"""

from __future__ import annotations

from convmem_graph.server.app import create_app
from convmem_graph.server.settings import ServeSettings

__all__ = ["ServeSettings", "create_app"]
