"""Text folding: the ASCII fast path and the table filled on first sight fold like the whole table.

The reference is the table as it was built before (issue 24 item 3): every BMP code point that is
punctuation, a symbol, a separator, a control, whitespace or ``_`` deleted, the rest kept.
"""

from __future__ import annotations

import string
import unicodedata
from functools import cache

from hypothesis import given
from hypothesis import strategies as st

from convmem_graph.text.sentences import _DropTable, normalize_text


@cache
def _whole_table() -> dict[int, None]:
    def dropped(code: int) -> bool:
        ch = chr(code)
        return unicodedata.category(ch)[0] in "PSZC" or ch in string.whitespace or ch == "_"

    return dict.fromkeys(i for i in range(0x10000) if dropped(i))


def _general(text: str) -> str:
    return unicodedata.normalize("NFKC", text).casefold().translate(_whole_table())


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


def test_every_code_point_folds_as_with_the_whole_table() -> None:
    table = _DropTable()
    for start in range(0, 0x110000, 0x800):
        block = "".join(chr(i) for i in range(start, start + 0x800) if not 0xD800 <= i < 0xE000)
        assert block.translate(table) == block.translate(_whole_table()), hex(start)
        # Met a second time, from the filled table.
        assert block.translate(table) == block.translate(_whole_table()), hex(start)


_MIXED = st.text(
    alphabet=st.one_of(
        st.characters(codec="utf-8"),
        st.sampled_from("好的，明早7点叫你！Ｈｅｌｌｏ_ \t。、《》😀ſİı·—…"),
    ),
    max_size=40,
)


@given(st.lists(_MIXED, max_size=8))
def test_a_fresh_table_folds_any_sequence_of_texts_as_the_whole_table(texts: list[str]) -> None:
    table = _DropTable()
    for text in texts:
        folded = unicodedata.normalize("NFKC", text).casefold()
        assert folded.translate(table) == folded.translate(_whole_table())
        assert normalize_text(text) == _general(text)
