"""``check_item_counts`` names an over-long list by the same JSON path with its paths built lazily.

The walk keeps (parent, key) pairs and writes a path out only for the error (issue 24 item 3: a
replay formatted every message's path). Checked against the eager walk it replaced, written out
here, on generated documents: same refusal, same path, same message.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from convmem_graph.errors import SourceFormatError
from convmem_graph.sources import _common
from convmem_graph.sources._common import check_item_counts, fail


def _eager(source: str, data: Any, *, depth: int = 4) -> None:
    stack: list[tuple[Any, str, int]] = [(data, "$", 0)]
    while stack:
        node, path, level = stack.pop()
        if isinstance(node, list):
            if len(node) > _common.MAX_ITEMS_PER_PAYLOAD:
                fail(
                    source,
                    path,
                    f"{len(node)} items exceed the limit of {_common.MAX_ITEMS_PER_PAYLOAD} per payload",
                )
            if level < depth:
                stack.extend(
                    (v, f"{path}[{i}]", level + 1) for i, v in enumerate(node) if isinstance(v, (list, dict))
                )
        elif isinstance(node, dict) and level < depth:
            stack.extend(
                (v, f"{path}.{k}", level + 1) for k, v in node.items() if isinstance(v, (list, dict))
            )


def _outcome(check: Any, data: Any, depth: int) -> tuple[str, str] | None:
    try:
        check("openai", data, depth=depth)
    except SourceFormatError as exc:
        return exc.path, str(exc)
    return None


keys = st.sampled_from(["messages", "a", "MsgList", "b c", "0", "$"])
leaf = st.one_of(st.none(), st.integers(), st.text(max_size=2))
docs = st.recursive(
    leaf,
    lambda inner: st.one_of(st.lists(inner, max_size=5), st.dictionaries(keys, inner, max_size=4)),
    max_leaves=40,
)


@settings(max_examples=800, deadline=None)
@given(docs, st.integers(min_value=0, max_value=5))
def test_same_refusal_and_path_as_the_eager_walk(data: Any, depth: int) -> None:
    with pytest.MonkeyPatch.context() as m:
        m.setattr(_common, "MAX_ITEMS_PER_PAYLOAD", 2)  # small lists over the limit, at every level
        assert _outcome(check_item_counts, data, depth) == _outcome(_eager, data, depth)


def test_a_deep_list_is_named_by_its_path() -> None:
    doc = {"pages": [{"MsgList": [0] * (_common.MAX_ITEMS_PER_PAYLOAD + 1)}]}
    with pytest.raises(SourceFormatError) as err:
        check_item_counts("im", doc)
    assert err.value.path == "$.pages[0].MsgList"
