"""Import hygiene: the modules a call start needs do not pull in LangGraph, LangChain or LangSmith.

Each import runs in a fresh interpreter (this test process has them loaded already).
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

HEAVY = ("langgraph", "langchain_core", "langchain", "langsmith")

LIGHT_MODULES = [
    "convmem_graph",
    "convmem_graph.config",
    "convmem_graph.tokens",
    "convmem_graph.models",
    "convmem_graph.store",
    "convmem_graph.extractors",
    "convmem_graph.extractors.keys",
]


def _loaded_after(module: str) -> list[str]:
    code = (
        "import importlib, json, sys; importlib.import_module(sys.argv[1]); "
        "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules})))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, module], capture_output=True, text=True, check=True, timeout=120
    )
    top: list[str] = json.loads(out.stdout)
    return top


@pytest.mark.parametrize("module", LIGHT_MODULES)
def test_light_modules_do_not_import_langgraph_or_langchain(module: str) -> None:
    loaded = _loaded_after(module)
    assert not [m for m in HEAVY if m in loaded], f"{module} imports {[m for m in HEAVY if m in loaded]}"


def test_the_check_sees_a_heavy_import() -> None:
    assert "langgraph" in _loaded_after("convmem_graph.graph")
