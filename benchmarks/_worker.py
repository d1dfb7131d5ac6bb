"""The baseline worker the same-run benchmarks start: one JSON document per line on its stdout."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any


def read_reply(proc: subprocess.Popen[str]) -> dict[str, Any]:
    """The worker's next reply; a worker that exited raises (its stderr is already on the console)."""
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line:
        raise RuntimeError("the baseline worker exited (see its stderr above)")
    return dict(json.loads(line))


class LineWorker:
    """A worker process spoken to a line at a time: one request line in, one JSON reply out.

    Closing its stdin tells it to close its memories and exit.
    """

    def __init__(
        self,
        cmd: Sequence[str],
        env: Mapping[str, str],
        *,
        cwd: Path | None = None,
        close_timeout: float = 60,
    ) -> None:
        self.proc = subprocess.Popen(
            list(cmd),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=dict(env),
            cwd=None if cwd is None else str(cwd),
        )
        self._close_timeout = close_timeout

    def read(self) -> dict[str, Any]:
        """The worker's next reply (see :func:`read_reply`)."""
        return read_reply(self.proc)

    def request(self, line: str) -> dict[str, Any]:
        """Send one request line; the worker's reply."""
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
        return self.read()

    def close(self) -> None:
        """Let the worker close what it opened and exit."""
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(timeout=self._close_timeout)
