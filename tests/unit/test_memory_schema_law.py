"""Schema is law: unknown names are errors, redefining retires old fields, custom fields inferred offline."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from convmem_graph import UnknownVariableError
from convmem_graph.cli import main
from convmem_graph.memory import ConvMemory


@pytest.fixture
def mem(tmp_path: Path) -> Iterator[ConvMemory]:
    m = ConvMemory.open(str(tmp_path / "m.db"))
    yield m
    m.close()


def test_a_name_outside_the_schema_is_an_error(mem: ConvMemory) -> None:
    mem.ingest("u", [{"role": "user", "content": "我住在杭州。"}])
    with pytest.raises(
        UnknownVariableError, match=r"'citty' is not in the schema .*fields: name, birth_year, city"
    ):
        mem.set_variable("u", "citty", "北京")
    assert "citty" not in mem.variables("u")
    assert "citty" not in mem.payload("u", "openai")[0]["content"]
    mem.define_variables("u", [{"name": "city"}, {"name": "team"}])
    mem.set_variable("u", "team", "Arsenal")  # a defined field is accepted
    with pytest.raises(UnknownVariableError):
        mem.set_variable("u", "hobbies", ["running"])  # the default field is no longer in the schema


def test_the_cli_refuses_an_unknown_name(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = str(tmp_path / "c.db")
    with ConvMemory.open(db) as m:
        m.ingest("u", [{"role": "user", "content": "我住在杭州。"}])
    assert main(["variables", "set", "u", "citty", "北京", "--db", db]) != 0
    assert "citty" in capsys.readouterr().err
    assert main(["variables", "set", "u", "city", "北京", "--db", db]) == 0
    assert main(["variables", "define", "u", "team", "football team the user supports", "--db", db]) == 0
    capsys.readouterr()
    assert main(["variables", "schema", "u", "--db", db]) == 0
    rows = dict(line.split("\t")[::2] for line in capsys.readouterr().out.splitlines())
    assert rows["city"] == "rule: city" and rows["team"] == "needs a model"


def test_redefining_the_schema_retires_old_fields_into_the_audit(mem: ConvMemory) -> None:
    mem.ingest("u", [{"role": "user", "content": "我住在杭州，我对芒果过敏。"}])
    mem.set_variable("u", "occupation", "医生")
    assert {"city", "diet", "occupation"} <= set(mem.variables("u"))
    mem.define_variables(
        "u", [{"name": "city"}, {"name": "pet_name", "description": "name of the user's pet"}]
    )
    assert set(mem.variables("u")) == {"city"}
    block = mem.payload("u", "openai")[0]["content"]
    assert "医生" not in block and "对芒果过敏" not in block.split("[事实]")[0]
    retired = {
        a.object_id
        for a in mem.store.list_audit("u")
        if a.action == "delete" and "retired" in (a.cause or "")
    }
    assert {"diet", "occupation", "language"} <= retired


def test_custom_fields_inferred_offline_or_marked_as_needing_a_model(mem: ConvMemory) -> None:
    mem.define_variables(
        "u",
        [
            {"name": "pet_name", "description": "name of the user's pet"},
            {"name": "where", "description": "所在城市"},
            {"name": "job"},
            {"name": "born", "type": "integer"},
            {"name": "team", "description": "football team the user supports"},
        ],
    )
    text = "We adopted two kittens, Miso and Tofu, last month. I live in Denver and I work as a nurse."
    mem.ingest("u", [{"role": "user", "content": text, "timestamp_ms": 1_767_268_822_030}])
    values = {k: v.value for k, v in mem.variables("u").items()}
    assert values == {"pet_name": "Miso, Tofu", "where": "Denver", "job": "nurse"}
    sources = {r["name"]: r["source"] for r in mem.variable_schema("u")}
    assert sources == {
        "pet_name": "rule: pet_names",
        "where": "rule: city",
        "job": "rule: occupation",
        "born": "rule: birth_year",
        "team": "needs a model",
    }
