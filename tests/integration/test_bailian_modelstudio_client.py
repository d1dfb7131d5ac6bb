"""Generation-B calls made by Alibaba's newer client, agentscope-runtime's ``modelstudio_memory``.

Every component the client ships is called against ``convmem serve`` on loopback (a real process,
with a bearer token): AddMemory, SearchMemory, ListMemory, UpdateMemory (with the docs' update
example, ``meta_data: {"location_name": "杭州"}``), DeleteMemory, CreateProfileSchema,
GetProfileSchema (``name`` and ``attributes[].attribute_id`` at the top level),
ListProfileSchemas, UpdateProfileSchema (``attributes_operations`` add / update / delete),
GetUserProfile, DeleteProfileSchema and DeleteEntity. The client is async (aiohttp); the calls
are in ``modelstudio_driver.py``.

Why a venv of its own: agentscope-runtime 1.1.6.post2 imports ``mcp.server.fastmcp`` (mcp 1.x)
but declares only ``mcp>=1.13`` and ``agentscope>=1.0.14``; a resolver then picks agentscope 2,
which requires ``mcp>=2``, where FastMCP no longer exists, and the import fails. Pinning
``agentscope<2`` and ``mcp<2`` resolves, but also brings kubernetes (which needs pydantic>=2.14.2),
celery, redis and some 60 other packages into the environment the whole suite runs in. So the
client gets a virtualenv of its own with :data:`PINS`, built on first use and cached under a path
keyed by the pins and the Python version (``CONVMEM_TEST_VENV_DIR``, default
``~/.cache/convmem-graph/test-venvs``). The test is skipped, saying so, only when the package
registry cannot be reached to build it.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

pytest.importorskip("fastapi", reason="the server extra (fastapi) is not installed")


from convmem_graph.memory import ConvMemory  # noqa: E402
from tests.integration.live_server import serve_process  # noqa: E402

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
DRIVER = Path(__file__).with_name("modelstudio_driver.py")
#: The client and the two pins that make it importable (see the module docstring).
PINS = ("agentscope-runtime==1.1.6.post2", "agentscope==1.0.21", "mcp==1.30.0")
TOKEN = "sk-modelstudio-test"


def _venv_dir() -> Path:
    root = Path(
        os.environ.get("CONVMEM_TEST_VENV_DIR") or Path.home() / ".cache" / "convmem-graph" / "test-venvs"
    )
    key = hashlib.sha256("\n".join((sys.version, *PINS)).encode()).hexdigest()[:16]
    return root / f"agentscope-runtime-{key}"


def _pip(python: Path, *args: str, timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(python), "-m", "pip", "--disable-pip-version-check", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def _client_python() -> Path:
    """The Python of the cached client venv; built (under a lock, then moved in place) when missing."""
    target = _venv_dir()
    python = target / "bin" / "python"
    if python.exists():
        return python
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another test run building the same venv: wait for it
        if python.exists():
            return python
        # The registry first: unreachable is the one reason to skip.
        probe_dir = target.with_name(target.name + ".probe")
        probe = _pip(
            Path(sys.executable), "download", "--no-deps", "-q", "-d", str(probe_dir), PINS[0], timeout=300
        )
        shutil.rmtree(probe_dir, ignore_errors=True)
        if probe.returncode != 0:
            # "from versions: none": no index listed the package at all (offline, or only the local
            # mirrors answered). A listing without the pinned version is a stale pin: fail on it.
            unreachable = "(from versions: none)" in probe.stderr or "NewConnectionError" in probe.stderr
            last = (probe.stderr.strip().splitlines() or ["no output"])[-1]
            assert unreachable, f"the registry answers, but not with {PINS[0]}:\n{probe.stderr[-2000:]}"
            pytest.skip(f"the package registry is unreachable, cannot build the {PINS[0]} venv: {last}")
        building = target.with_name(target.name + ".building")
        shutil.rmtree(building, ignore_errors=True)
        subprocess.run([sys.executable, "-m", "venv", str(building)], check=True, timeout=300)
        installed = _pip(building / "bin" / "python", "install", "-q", *PINS, timeout=1800)
        assert installed.returncode == 0, f"pip install {' '.join(PINS)} failed:\n{installed.stderr[-4000:]}"
        building.rename(target)  # only a complete venv gets the cached name
    return python


@contextmanager
def _serve(db: Path) -> Iterator[str]:
    """``convmem serve`` on a free loopback port with an admin token; yields its base URL."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CONVMEM_")}
    env.update(PYTHONPATH=str(REPO), CONVMEM_SERVE_TOKEN=TOKEN)
    with serve_process(db, env) as (base, _):
        yield base


def test_every_modelstudio_memory_call(tmp_path: Path) -> None:
    python = _client_python()
    db = tmp_path / "ms.db"
    with _serve(db) as base:
        driver = subprocess.Popen(
            [str(python), str(DRIVER), base + "/api/v2/apps/memory", TOKEN],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            encoding="utf-8",
            # The client's venv alone: nothing of this checkout or its environment on the path.
            env={k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")},
        )
        assert driver.stdin is not None and driver.stdout is not None
        done: dict[str, object] = {}
        try:
            for line in driver.stdout:
                step = json.loads(line)
                if step["event"] == "done":
                    done = step
                    break
                with ConvMemory.open(str(db)) as mem:  # the server's database, from this process
                    if step["event"] == "listed":
                        assert step["total"] == len(mem.fragments(step["user"]))
                    elif step["event"] == "set_variable":
                        mem.set_variable(step["user"], step["name"], step["value"])
                    elif step["event"] == "user_deleted":
                        assert [i.memory_id for i in mem.memories()] == []
                driver.stdin.write("ok\n")
                driver.stdin.flush()
            driver.stdin.close()
            assert driver.wait(timeout=120) == 0, driver.stderr.read() if driver.stderr else ""
        finally:
            if driver.poll() is None:
                driver.kill()
                driver.wait(timeout=10)
    calls = done.get("calls")
    assert isinstance(calls, list)
    assert set(calls) == {
        "CreateProfileSchema",
        "GetProfileSchema",
        "ListProfileSchemas",
        "UpdateProfileSchema",
        "AddMemory",
        "SearchMemory",
        "ListMemory",
        "UpdateMemory",
        "GetUserProfile",
        "DeleteMemory",
        "DeleteProfileSchema",
        "DeleteEntity",
    }
