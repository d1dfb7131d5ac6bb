"""Text folding: the ASCII fast path folds exactly like the general Unicode path."""

from __future__ import annotations

import unicodedata

from hypothesis import given
from hypothesis import strategies as st

from convmem_graph.text.sentences import _drop_table, normalize_text


def _general(text: str) -> str:
    return unicodedata.normalize("NFKC", text).casefold().translate(_drop_table())


@given(st.text(alphabet=st.characters(max_codepoint=127)))
def test_ascii_fast_path_equals_the_general_path(text: str) -> None:
    assert normalize_text(text) == _general(text)


def test_every_ascii_character() -> None:
    every = "".join(chr(i) for i in range(128))
    letters = "abcdefghijklmnopqrstuvwxyz"
    assert normalize_text(every) == _general(every) == "0123456789" + letters + letters


def test_non_ascii_text_takes_the_general_path() -> None:
    assert normalize_text("Ｈｅｌｌｏ， World！") == "helloworld"
    assert normalize_text("好的， 明早 7 点叫你！") == "好的明早7点叫你"
