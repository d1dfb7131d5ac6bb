"""Allow ``python -m convmem_graph``."""

from __future__ import annotations

from convmem_graph.cli import run

run()
