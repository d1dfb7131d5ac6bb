"""ASCII text answers the CJK scans without scanning, with the scans' own answers (issue 24 item 3)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from convmem_graph.store.episodes import episode_text
from convmem_graph.text.scripts import _CJK, has_cjk
from convmem_graph.text.terms import CJK_RUN, bigrams

ASCII = "".join(map(chr, range(128)))


def _scanned_episode_text(content: str) -> str:
    """``episode_text`` as it was: the scan decides alone."""
    if not CJK_RUN.search(content):
        return content
    return CJK_RUN.sub(lambda m: " ".join(bigrams(m.group(0))) + " ", content)


def test_no_ascii_character_is_one_the_scans_find() -> None:
    assert CJK_RUN.search(ASCII) is None
    assert _CJK.search(ASCII) is None


@settings(max_examples=2000, deadline=None)
@given(
    st.text(
        alphabet=st.one_of(
            st.characters(max_codepoint=127), st.sampled_from("我在杭州かなカナ한글豈é’\u3400\u9fff\uf900")
        ),
        max_size=30,
    )
)
def test_shortcuts_answer_as_the_scans(text: str) -> None:
    assert has_cjk(text) == (_CJK.search(text) is not None)
    assert episode_text(text) == _scanned_episode_text(text)
