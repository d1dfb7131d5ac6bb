"""Hardening: random and mutated payloads never raise anything but SourceFormatError.

The readers are called directly (not through ``read_payload``, whose last-resort guard would
hide a reader bug), in lenient and strict mode, together with ``detect_source``.
"""

from __future__ import annotations

import copy
import json
import time
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langchain_core.messages import AIMessage, HumanMessage

from convmem_graph.errors import SourceFormatError
from convmem_graph.models import ReadResult
from convmem_graph.sources import detect_source, merge_timeline, read_payload
from convmem_graph.sources._common import MAX_DEPTH, ReadContext
from convmem_graph.sources.agora import read_agora
from convmem_graph.sources.openai_messages import read_langchain, read_openai
from convmem_graph.sources.tencent_im import read_tencent_im
from convmem_graph.sources.trtc import read_trtc
from tests.conftest import load_fixture

READERS: dict[str, Callable[[Any, ReadContext], ReadResult]] = {
    "agora": read_agora,
    "tencent_im": read_tencent_im,
    "trtc": read_trtc,
    "openai": read_openai,
    "langchain": read_langchain,
}
FIXTURE_NAMES = [
    "agora_history_response.json",
    "agora_webhook_103_agent_history.json",
    "agora_custom_llm_request.json",
    "tencent_im_roammsg_exchange.json",
    "trtc_callbacks_one_call.json",
]
FIXTURES = {name: load_fixture(name) for name in FIXTURE_NAMES}
FIXTURES["openai_list"] = [
    {"role": "system", "content": "s"},
    {"role": "user", "content": [{"type": "text", "text": "hi"}], "timestamp": 1767268800},
    {"role": "assistant", "content": "hello", "tool_calls": []},
]
FIXTURES["trtc_bodies"] = [
    json.loads(d["raw_body"]) for d in FIXTURES["trtc_callbacks_one_call.json"]["deliveries"]
]
FAST = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])

scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**30), max_value=10**30)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=30)
    | st.sampled_from(
        ["", " - ", "user", "assistant", "system", "@RBT#x", "903", "{", '{"chatbotPlugin": 2, "src": 2}']
    )
)
json_values = st.recursive(
    scalars,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=12), children, max_size=4)
    ),
    max_leaves=12,
)


def _paths(node: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(node, dict):
        for k, v in node.items():
            out.extend(_paths(v, (*prefix, k)))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            out.extend(_paths(v, (*prefix, i)))
    return out


def _mutate(doc: Any, path: tuple[Any, ...], kind: str, value: Any) -> Any:
    if not path:
        return value if kind == "replace" else [doc, value]
    parent = doc
    for key in path[:-1]:
        parent = parent[key]
    last = path[-1]
    if kind == "replace":
        parent[last] = value
    elif kind == "delete":
        del parent[last]
    elif kind == "wrap":
        parent[last] = [parent[last]]
    elif kind == "stringify":
        parent[last] = json.dumps(parent[last], ensure_ascii=False)[:-1]  # also truncated JSON text
    elif kind == "duplicate" and isinstance(parent, list):
        parent.insert(last, copy.deepcopy(parent[last]))
    return doc


_EMBEDDED = "__embedded_json__"


def _expand(node: Any) -> Any:
    """Decode JSON embedded in strings (IM ``Data``, TRTC ``raw_body``) so mutations reach inside."""
    if isinstance(node, dict):
        return {k: _expand(v) for k, v in node.items()}
    if isinstance(node, list):
        return [_expand(v) for v in node]
    if isinstance(node, str) and node.startswith("{"):
        try:
            return {_EMBEDDED: _expand(json.loads(node))}
        except ValueError:
            return node
    return node


def _collapse(node: Any) -> Any:
    if isinstance(node, dict):
        if set(node) == {_EMBEDDED}:
            return json.dumps(_collapse(node[_EMBEDDED]), ensure_ascii=False)
        return {k: _collapse(v) for k, v in node.items()}
    if isinstance(node, list):
        return [_collapse(v) for v in node]
    return node


EXPANDED = {name: _expand(doc) for name, doc in FIXTURES.items()}


@st.composite
def mutated_fixtures(draw: st.DrawFn) -> Any:
    doc = copy.deepcopy(EXPANDED[draw(st.sampled_from(sorted(EXPANDED)))])
    for _ in range(draw(st.integers(min_value=1, max_value=4))):
        paths = _paths(doc)
        path = paths[draw(st.integers(min_value=0, max_value=len(paths) - 1))]
        kind = draw(st.sampled_from(["replace", "replace", "delete", "wrap", "stringify", "duplicate"]))
        doc = _mutate(doc, path, kind, draw(json_values))
    return _collapse(doc)


def _only_source_format_errors(data: Any) -> None:
    # Readers never modify their input, so one payload serves every reader.
    for name, reader in READERS.items():
        for lenient in (True, False):
            try:
                result = reader(data, ReadContext(source=name, lenient=lenient))
            except SourceFormatError as exc:
                assert exc.source == name
                continue
            assert result.source == name
            assert all(s.reason and s.path for s in result.skipped)
            merge_timeline([result, result])
    try:
        detect_source(data)
    except SourceFormatError:
        pass


@FAST
@given(mutated_fixtures())
def test_mutated_fixtures_only_raise_source_format_error(doc: Any) -> None:
    _only_source_format_errors(doc)


@FAST
@given(json_values)
def test_random_json_only_raises_source_format_error(value: Any) -> None:
    _only_source_format_errors(value)
    _only_source_format_errors([value, value])


@FAST
@given(st.binary(max_size=200) | st.text(max_size=200))
def test_random_bytes_and_text(data: bytes | str) -> None:
    for source in (None, "agora", "tencent_im", "trtc", "openai", "langchain"):
        try:
            read_payload(data, source)
        except SourceFormatError:
            pass
    _only_source_format_errors([data])


@FAST
@given(mutated_fixtures())
def test_mutated_fixtures_as_json_bytes(doc: Any) -> None:
    raw = json.dumps(doc, ensure_ascii=False).encode("utf-8")
    for lenient in (True, False):
        try:
            read_payload(raw, lenient=lenient)
        except SourceFormatError:
            pass


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(json_values, max_size=3), st.integers(min_value=0, max_value=2))
def test_langchain_objects_with_random_content(extra: list[Any], where: int) -> None:
    messages: list[Any] = [HumanMessage("hi"), AIMessage("hello")]
    for value in extra:
        try:
            messages.insert(where, HumanMessage(content=value))
        except Exception:  # noqa: BLE001, S112  # langchain refuses this content itself
            continue
    _only_source_format_errors(messages)


def _deep(depth: int) -> Any:
    node: Any = "x"
    for _ in range(depth):
        node = [node]
    return node


@pytest.mark.parametrize("depth", [MAX_DEPTH + 1, 10_000, 200_000])
def test_deep_nesting_fails_fast(depth: int) -> None:
    nested = {"contents": [{"role": "user", "content": "hi", "metadata": {"x": _deep(depth)}}]}
    start = time.monotonic()
    for source in (None, "agora", "tencent_im", "trtc", "openai", "langchain"):
        with pytest.raises(SourceFormatError, match="nested deeper"):
            read_payload(nested, source)
    text = "[" * depth + "]" * depth
    with pytest.raises(SourceFormatError):
        read_payload(text)
    with pytest.raises(SourceFormatError):
        detect_source(text.encode())
    assert time.monotonic() - start < 5


def test_cyclic_object_fails_cleanly() -> None:
    loop: dict[str, Any] = {"role": "user", "content": "hi"}
    loop["metadata"] = loop
    with pytest.raises(SourceFormatError, match="nested deeper"):
        read_payload([loop])


def test_huge_inputs_fail_fast_or_read() -> None:
    start = time.monotonic()
    with pytest.raises(SourceFormatError, match="larger than"):
        read_payload(b" " * (33 * 1024 * 1024))
    with pytest.raises(SourceFormatError, match="larger than"):
        read_payload("[" + " " * (33 * 1024 * 1024) + "]")
    # an over-long utterance is one invalid item, not a crash
    r = read_payload([{"role": "user", "content": "字" * 200_000}, {"role": "user", "content": "ok"}])
    assert [s.reason for s in r.skipped] == ["invalid"] and [m.content for m in r.messages] == ["ok"]
    # many items are fine
    many = read_payload([{"role": "user", "content": f"m{i}"} for i in range(20_000)])
    assert len(many.messages) == 20_000
    assert time.monotonic() - start < 15


@pytest.mark.parametrize(
    "text",
    [
        '{"a": NaN}',
        '{"a": Infinity}',
        "[1e999999]",
        '{"MsgList": [' + "9" * 5000 + "]}",
        '"\\ud800"',
        "\ufeff[]",
    ],
)
def test_odd_json_literals(text: str) -> None:
    try:
        result = read_payload(text)
    except SourceFormatError:
        return
    assert isinstance(result, ReadResult)


def test_lone_surrogates_and_nul_are_cleaned() -> None:
    r = read_payload([{"role": "user", "content": "a\ud800b\x00c"}])
    assert r.messages[0].content == "a?bc"
    r.messages[0].content.encode("utf-8")
