"""The unit tier stays in this process; the integration tier is marked by its folder."""

from __future__ import annotations

import multiprocessing
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.unit.conftest import ProcessStartInUnitTest

TESTS = Path(__file__).resolve().parents[1]


def test_a_subprocess_fails_the_unit_test() -> None:
    with pytest.raises(ProcessStartInUnitTest, match="move this test to tests/integration"):
        subprocess.run([sys.executable, "-c", "pass"], check=True, timeout=30)


@pytest.mark.parametrize("method", ["spawn", "fork", "forkserver"])
def test_a_multiprocessing_worker_fails_the_unit_test(method: str) -> None:
    ctx = multiprocessing.get_context(method)
    proc = ctx.Process(target=print)
    with pytest.raises(ProcessStartInUnitTest):
        proc.start()


def test_os_fork_fails_the_unit_test() -> None:
    with pytest.raises(ProcessStartInUnitTest):
        os.fork()


def test_tests_unit_mirrors_the_package() -> None:
    package = TESTS.parent / "convmem_graph"
    subpackages = {p.name for p in package.iterdir() if (p / "__init__.py").is_file()}
    for folder in (TESTS / "unit").iterdir():
        if folder.is_dir() and (folder / "__init__.py").is_file():
            assert folder.name in subpackages, f"tests/unit/{folder.name} mirrors no convmem_graph subpackage"
            assert (folder / "__init__.py").is_file()
    modules = {p.stem.lstrip("_") for p in package.glob("*.py")}
    for test in sorted((TESTS / "unit").glob("test_*.py")):
        subject = test.stem.removeprefix("test_")
        if test.name in (Path(__file__).name, "test_layers.py", "test_recall_benchmark.py"):  # whole package
            continue
        assert any(subject == m or subject.startswith(m + "_") for m in modules), (
            f"tests/unit/{test.name}: name it after the top-level module it tests"
        )
