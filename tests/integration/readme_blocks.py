"""Run every ```python block of a Markdown file, in order, in one namespace, as a reader would.

Usage (from a folder where the blocks' relative paths resolve, e.g. the repository root)::

    python tests/integration/readme_blocks.py README.md

The blocks share one namespace, as a reader pastes them into one session: a later block may use
what an earlier one defined (``mem`` of the Quick start). The only name supplied from outside is
``model``, the chat model the README leaves to the reader: an offline fake that answers once.
Each block is compiled under the name ``README.md:<line>``, so a traceback points at the README.
Prints ``ok README.md:<line>`` per block; exits 1 at the first block that raises.
"""

from __future__ import annotations

import re
import sys
import traceback
from pathlib import Path
from typing import Any

__all__ = ["python_blocks", "run_blocks"]

_BLOCK = re.compile(r"^```python\n(.*?)^```", re.DOTALL | re.MULTILINE)


def python_blocks(markdown: str) -> list[tuple[int, str]]:
    """The ``python`` fenced blocks of ``markdown`` with the line number of their first code line.

    Example:
        >>> python_blocks("text\\n```python\\nx = 1\\n```\\n")
        [(3, 'x = 1\\n')]
    """
    return [(markdown[: m.start()].count("\n") + 2, m.group(1)) for m in _BLOCK.finditer(markdown)]


def _reader_names() -> dict[str, Any]:
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
    from langchain_core.messages import AIMessage

    return {"__name__": "__readme__", "model": GenericFakeChatModel(messages=iter([AIMessage("芒果不错")]))}


def run_blocks(path: Path) -> int:
    """Run the blocks of ``path``; return the exit code (0: every block ran)."""
    blocks = python_blocks(path.read_text(encoding="utf-8"))
    if not blocks:
        print(f"{path}: no python blocks", file=sys.stderr)
        return 1
    namespace = _reader_names()
    for line, code in blocks:
        where = f"{path.name}:{line}"
        try:
            exec(compile(code, where, "exec"), namespace)  # noqa: S102 - running the docs is the point
        except Exception:
            traceback.print_exc()
            print(f"FAILED {where}", file=sys.stderr)
            return 1
        print(f"ok {where}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(run_blocks(Path(sys.argv[1])))
