"""Unit tests run offline, each in the process running it, and start no process of their own.

Network sockets are disabled (unix sockets stay allowed for asyncio), and starting a process fails
the test: a test that needs another process, a fork or a live server belongs in
``tests/integration`` (marked ``integration``), where the tier's slower tests run. A test over
``backend_url`` / ``backend_store`` (``tests/backends.py``) runs here once per backend: its
``postgres`` run is marked ``integration`` and ``postgres`` and reaches the PostgreSQL test server
(libpq's own socket, which the socket guard does not see), or skips with the reason when
``CONVMEM_TEST_POSTGRES_URL`` is unset; ``-m "not integration"`` leaves it out. Run as a whole
(``python -m pytest tests/unit``), the tier spreads over the cores with pytest-xdist (see
:func:`pytest_cmdline_main`): its workers are started by pytest before any test runs.
"""

from __future__ import annotations

import _posixsubprocess
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import NoReturn

import httpcore  # noqa: F401  # see below
import pytest
from pytest_socket import disable_socket, enable_socket

# httpcore imports trio when it is installed, and trio's first import asks ``ldconfig`` for libc
# (``ctypes.util.find_library``): a process start, which ``_in_process`` below refuses. Importing
# it here, before any test, keeps that one-time start out of whichever test first makes an httpx client.

_UNIT = Path(__file__).parent
#: Workers the unit tier runs on when it is run as a whole (pytest-xdist): the tier is CPU-bound
#: and in-process, so it scales with the cores; capped to bound the workers' memory.
_MAX_WORKERS = 4


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config: pytest.Config) -> None:
    """Run the unit tier on every core when a run names only it or folders of it.

    ``python -m pytest tests/unit`` (or ``tests/unit/store``) then uses pytest-xdist with one
    worker per core (at most :data:`_MAX_WORKERS`); a run naming files or test ids, one with
    ``-n`` given, ``--pdb``, ``--collect-only``, or the whole suite (``python -m pytest``, which
    CI runs and whose integration tier must not run in parallel) stays in one process. ``-n 0``
    turns it off.
    """
    option = config.option
    if hasattr(config, "workerinput") or not config.pluginmanager.has_plugin("xdist"):
        return  # inside an xdist worker (which runs this hook too: it must not start workers), or no xdist
    if option.numprocesses is not None:
        return  # -n given
    if option.usepdb or option.collectonly:
        return
    args = [Path(a) for a in config.args]
    if not args or not all(a.is_dir() and a.resolve().is_relative_to(_UNIT) for a in args):
        return
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    if cores > 1:
        option.numprocesses = min(cores, _MAX_WORKERS)


class ProcessStartInUnitTest(RuntimeError):
    """A unit test tried to start a process."""


def _refuse(*_args: object, **_kwargs: object) -> NoReturn:
    raise ProcessStartInUnitTest(
        "tests/unit starts no processes (subprocess, multiprocessing, fork): "
        "move this test to tests/integration"
    )


@pytest.fixture(autouse=True)
def _offline() -> Iterator[None]:
    disable_socket(allow_unix_socket=True)
    yield
    enable_socket()


@pytest.fixture(autouse=True)
def _in_process(monkeypatch: pytest.MonkeyPatch) -> None:
    # Every way the standard library starts a process ends in one of these: subprocess and
    # multiprocessing's spawn/forkserver in fork_exec (or posix_spawn), multiprocessing's fork in os.fork.
    monkeypatch.setattr(subprocess, "_fork_exec", _refuse)
    monkeypatch.setattr(_posixsubprocess, "fork_exec", _refuse)
    for name in ("fork", "forkpty", "posix_spawn", "posix_spawnp", "system", "execv", "execve"):
        if hasattr(os, name):
            monkeypatch.setattr(os, name, _refuse)
