from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from convmem_graph.errors import SourceFormatError
from convmem_graph.sources import files as files_module
from convmem_graph.sources import iter_documents
from tests.conftest import FIXTURES


def test_single_json_document() -> None:
    path = FIXTURES / "agora_history_response.json"
    docs = list(iter_documents(path))
    assert len(docs) == 1
    assert docs[0][0] == str(path)
    assert docs[0][1]["agent_id"] == "A42AF83JT67YU29RX41CB56PK18WQ03M"


def test_jsonl_lines_blank_lines_and_locators(tmp_path: Path) -> None:
    path = tmp_path / "calls.jsonl"
    path.write_text('{"a": 1}\n\n   \n[2]\n"三"\n', encoding="utf-8")
    assert list(iter_documents(path)) == [(f"{path}:1", {"a": 1}), (f"{path}:4", [2]), (f"{path}:5", "三")]
    nd = tmp_path / "x.ndjson"
    nd.write_text('{"b": 2}', encoding="utf-8")  # no trailing newline
    assert list(iter_documents(str(nd))) == [(f"{nd}:1", {"b": 2})]


def test_gzip_of_both(tmp_path: Path) -> None:
    lines = tmp_path / "calls.jsonl.gz"
    with gzip.open(lines, "wt", encoding="utf-8") as fh:
        fh.write('{"n": 1}\n{"n": 2}\n')
    assert [(loc.rsplit(":", 1)[1], doc) for loc, doc in iter_documents(lines)] == [
        ("1", {"n": 1}),
        ("2", {"n": 2}),
    ]
    single = tmp_path / "doc.json.gz"
    with gzip.open(single, "wt", encoding="utf-8") as fh:
        json.dump({"k": [1, 2]}, fh)
    assert list(iter_documents(single)) == [(str(single), {"k": [1, 2]})]


def test_bad_json_names_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "calls.jsonl"
    path.write_text('{"a": 1}\n{"a": \n', encoding="utf-8")
    it = iter_documents(path)
    assert next(it)[1] == {"a": 1}
    with pytest.raises(SourceFormatError) as err:
        next(it)
    assert (err.value.source, err.value.path) == ("json", f"{path}:2")
    multi = tmp_path / "doc.json"
    multi.write_text('{\n  "a": 1,\n  "b": oops\n}\n', encoding="utf-8")
    with pytest.raises(SourceFormatError) as err:
        list(iter_documents(multi))
    assert err.value.path == f"{multi}:3"


def test_binary_garbage_and_corrupt_gzip(tmp_path: Path) -> None:
    garbage = tmp_path / "x.json"
    garbage.write_bytes(b"\xff\xd8\xff\xe0 JFIF")
    with pytest.raises(SourceFormatError, match="not UTF-8"):
        list(iter_documents(garbage))
    broken = tmp_path / "x.jsonl.gz"
    data = gzip.compress("".join(f'{{"n": {i * 7919 % 10007}}}\n' for i in range(2000)).encode())
    broken.write_bytes(data[: len(data) // 2])
    with pytest.raises(SourceFormatError) as err:
        list(iter_documents(broken))
    assert err.value.source == "json"


def test_streams_lines_with_a_per_line_cap(tmp_path: Path) -> None:
    path = tmp_path / "big.jsonl"
    path.write_text('{"ok": 1}\n' + '{"text": "' + "x" * 200 + '"}\n', encoding="utf-8")
    it = iter_documents(path, files_module.ReadLimits(max_line_bytes=64))
    assert next(it) == (f"{path}:1", {"ok": 1})  # the first line is yielded before the long one is read
    with pytest.raises(SourceFormatError, match="longer than 64 bytes") as err:
        next(it)
    assert err.value.path == f"{path}:2"


def test_missing_file_is_an_os_error(tmp_path: Path) -> None:
    with pytest.raises(OSError):
        list(iter_documents(tmp_path / "nope.json"))


def test_one_reader_raises_at_a_bad_line_or_reads_on_past_it(tmp_path: Path) -> None:
    from convmem_graph.sources.files import BadLine, ReadLimits

    path = tmp_path / "mixed.jsonl"
    path.write_text('{"a": 1}\n{not json\n' + '"' + "x" * 50 + '"\n[2]\n', encoding="utf-8")
    limits = ReadLimits(max_line_bytes=40)
    with pytest.raises(SourceFormatError) as err:
        list(iter_documents(path, limits))
    assert err.value.path == f"{path}:2"
    got = list(iter_documents(path, limits, skip_bad_lines=True))
    assert [loc.rsplit(":", 1)[1] for loc, _ in got] == ["1", "2", "3", "4"]
    assert got[0][1] == {"a": 1} and got[3][1] == [2]
    bad, long = got[1][1], got[2][1]
    assert isinstance(bad, BadLine) and bad.raw == "{not json" and bad.error.path == f"{path}:2"
    assert isinstance(long, BadLine) and long.error.reason == "line longer than 40 bytes"
