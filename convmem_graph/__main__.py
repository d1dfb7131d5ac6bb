"""Allow ``python -m convmem_graph``."""

from __future__ import annotations

import sys

from convmem_graph.cli import main

sys.exit(main())
