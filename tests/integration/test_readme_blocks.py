"""The README's Python blocks run as written (issue 26 item 4), the Quick start on the bundled examples.

They run in a fresh process whose folder holds the repository's ``examples/`` (as the repository
root does) and nothing else, so the Quick start's ``./convmem.db`` is a new file in a temporary
folder, never one in the repository.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.readme_blocks import python_blocks

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]


def test_every_python_block_of_the_readme_runs(tmp_path: Path) -> None:
    (tmp_path / "examples").symlink_to(REPO / "examples", target_is_directory=True)
    blocks = python_blocks((REPO / "README.md").read_text(encoding="utf-8"))
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
    }
    env.pop("CONVMEM_DB", None)
    proc = subprocess.run(
        [sys.executable, str(REPO / "tests" / "integration" / "readme_blocks.py"), str(REPO / "README.md")],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    ran = [line for line in proc.stdout.splitlines() if line.startswith("ok README.md:")]
    assert len(ran) == len(blocks) >= 3
    # The Quick start stored the bundled IM history and TRTC call in ./convmem.db.
    assert (tmp_path / "convmem.db").exists()
    from convmem_graph.memory import ConvMemory

    with ConvMemory.open(str(tmp_path / "convmem.db")) as mem:
        info = mem.info("u_10086")
        assert info.message_count > 10 and info.fragment_count > 0
        assert mem.variables("u_10086")["city"].value == "杭州"


def test_the_quick_start_defines_what_it_uses() -> None:
    quick_start = python_blocks((REPO / "README.md").read_text(encoding="utf-8"))[0][1]
    for name in ("im_roam_response", "trtc_callbacks", "agent_config", "tts_config"):
        assert re.search(rf"^(\w+, )*{name}(, \w+)* = ", quick_start, re.MULTILINE), name
    assert "{...}" not in quick_start
