"""Unit tests run offline and in this process.

Network sockets are disabled (unix sockets stay allowed for asyncio), and starting a process fails
the test: a test that needs another process, a fork or a live server belongs in
``tests/integration`` (marked ``integration``), where the tier's slower tests run.
"""

from __future__ import annotations

import _posixsubprocess
import os
import subprocess
from collections.abc import Iterator
from typing import NoReturn

import pytest
from pytest_socket import disable_socket, enable_socket


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
