"""The baseline worker the same-run benchmarks start: one JSON document per line on its stdout."""

from __future__ import annotations

import json
import subprocess
from typing import Any


def read_reply(proc: subprocess.Popen[str]) -> dict[str, Any]:
    """The worker's next reply; a worker that exited raises (its stderr is already on the console)."""
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line:
        raise RuntimeError("the baseline worker exited (see its stderr above)")
    return dict(json.loads(line))
