"""Issue 10, finding 5: errors never echo secrets.

pydantic's error text echoes the offending input (``input_value={'APIKey': 'sk-...'}``). A key is
planted in every option field, in a shape each field rejects, and stderr, the logs and the
database file are searched for it.
"""

from __future__ import annotations

import copy
import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from convmem_graph.cli import main
from convmem_graph.models import Message
from convmem_graph.store import MemoryStore

SECRET = "sk-PLANTED-0123456789abcdef"
EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "options"


def _paths(doc: Any, prefix: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    if isinstance(doc, dict):
        for key, value in doc.items():
            if key.startswith("_"):
                continue
            yield (*prefix, key)
            yield from _paths(value, (*prefix, key))


def _planted(doc: dict[str, Any], path: tuple[str, ...], value: Any) -> dict[str, Any]:
    out = copy.deepcopy(doc)
    node = out
    for part in path[:-1]:
        node = node[part]
    node[path[-1]] = value
    return out


# Shapes no field accepts as is, each carrying the key: wrong type, nested object, list.
SHAPES: tuple[Any, ...] = (
    {"APIKey": SECRET, "api_key": SECRET},
    [SECRET, {"APIKey": SECRET}],
    SECRET,
    -1.5,
)

CASES = [
    (vendor, options_file, path)
    for vendor, options_file in (
        ("trtc", "trtc.json"),
        ("agora", "agora.json"),
        ("agora-update", "agora.json"),
    )
    for path in _paths(json.loads((EXAMPLES / options_file).read_text(encoding="utf-8")))
] + [
    ("openai", None, ("persona",)),
    ("openai", None, ("recent_turns",)),
    ("openai", None, ("budget_tokens",)),
]


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("secrets") / "s.db"
    store = MemoryStore.from_url(str(path))
    store.add_messages(
        "u1",
        [
            Message(
                id="a",
                role="user",
                content="hi",
                channel="im",
                source="message",
                timestamp_ms=1_767_268_800_000,
            )
        ],
    )
    store.close()
    return path


@pytest.mark.parametrize(("vendor", "options_file", "path"), CASES, ids=lambda x: str(x))
def test_a_key_planted_in_any_option_never_shows_in_errors_logs_or_db(
    vendor: str,
    options_file: str | None,
    path: tuple[str, ...],
    db: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    base = json.loads((EXAMPLES / options_file).read_text(encoding="utf-8")) if options_file else {}
    caplog.set_level(logging.DEBUG)
    failures = 0
    for shape in SHAPES:
        options = tmp_path / "o.json"
        options.write_text(json.dumps(_planted(base, path, shape)), encoding="utf-8")
        code = main(["inject", "u1", "--vendor", vendor, "--options", str(options), "--db", str(db)])
        out, err = capsys.readouterr()
        assert SECRET not in err, err
        assert "input_value" not in err and "Traceback" not in err
        if code != 0:
            failures += 1
            assert code == 2 and SECRET not in out
            assert len(err.strip().splitlines()) == 1, err
    assert SECRET not in caplog.text
    for file in db.parent.iterdir():
        assert SECRET.encode() not in file.read_bytes()
    if path in {("sdk_app_id",), ("history",), ("recent_turns",), ("max_history",), ("budget_tokens",)}:
        assert failures >= 1  # typed fields do reject these shapes (others are passed through)


def test_library_error_names_the_field_not_the_value(db: Path) -> None:
    from convmem_graph.memory import ConvMemory

    with ConvMemory.open(str(db)) as mem, pytest.raises(ValueError) as caught:
        mem.payload("u1", "trtc-llmconfig", llm={"History": {"APIKey": SECRET}})
    assert SECRET not in str(caught.value) and "llm" in str(caught.value)
    assert caught.value.__cause__ is None and caught.value.__suppress_context__
