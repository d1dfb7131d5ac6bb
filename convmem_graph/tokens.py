"""The one CJK-aware approximate token counter every budget in convmem_graph uses.

langchain-core's ``count_tokens_approximately`` assumes four characters per token, which is close
for English but undercounts Chinese three to four times (common BPE vocabularies spend one or more
tokens per CJK character). Here each CJK character, kana or hangul syllable counts as one token and
the remaining text as one token per four characters. An exact counter (e.g. a tokenizer's
``len(encode(text))``) can be plugged in anywhere a :data:`TokenCounter` is accepted.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from convmem_graph._text_caches import holds_text
from convmem_graph.text.cjk import WIDE

if TYPE_CHECKING:  # LangChain is not imported at run time: a call start stays light
    from langchain_core.messages import BaseMessage

__all__ = ["TokenCounter", "count_message_tokens", "count_tokens", "token_parts", "tokens_from_parts"]

TokenCounter = Callable[[str], int]

_WIDE = re.compile(f"[{WIDE}]")


#: Texts up to this many characters are counted once per process (see :func:`_count_short`).
_MEMO_CHARS = 256


def count_tokens(text: str) -> int:
    """Approximate the number of tokens in ``text``, counting CJK characters one each.

    Example:
        >>> count_tokens("用户对芒果过敏。")
        8
        >>> count_tokens("User is allergic to mango.")
        7
    """
    if not text:
        return 0
    if len(text) <= _MEMO_CHARS:
        return _count_short(text)
    return _count(text)


def _count(text: str) -> int:
    return tokens_from_parts(*_parts(text))


def tokens_from_parts(wide: int, rest: int) -> int:
    """:func:`count_tokens` of a text whose :func:`token_parts` are ``(wide, rest)``.

    Example:
        >>> tokens_from_parts(*token_parts("用户 likes 芒果")) == count_tokens("用户 likes 芒果")
        True
    """
    return wide + math.ceil(rest / 4)


def token_parts(text: str) -> tuple[int, int]:
    """The two parts :func:`count_tokens` estimates ``text`` from: (wide characters, the rest).

    ``count_tokens(text) == wide + ceil(rest / 4)``. Both parts add up over concatenation, so a
    text built from pieces is counted exactly from its pieces' parts (the memory block charges
    each line its marginal cost on the whole block this way, not a rounded-up count per line).

    Example:
        >>> token_parts("用户 likes 芒果")
        (4, 7)
    """
    if not text:
        return 0, 0
    if len(text) <= _MEMO_CHARS:
        return _parts_short(text)
    return _parts(text)


def _parts(text: str) -> tuple[int, int]:
    wide = len(_WIDE.findall(text))
    return wide, len(text) - wide


# A live turn's extractive summary counts the same ~85 fact sentences again every turn (and the
# CJK scan is ~1.3 us a sentence): short texts are answered from here. Bounded in entries and, by
# _MEMO_CHARS, in size (at most ~2 MB of keys); the count is a pure function of the text.
_count_short = holds_text(functools.lru_cache(maxsize=8192)(_count))
# The memory block's lines, answered from here as :data:`_count_short` answers counts.
_parts_short = holds_text(functools.lru_cache(maxsize=8192)(_parts))


def count_message_tokens(messages: Sequence[BaseMessage], counter: TokenCounter = count_tokens) -> int:
    """Count tokens of LangChain messages with the CJK-aware counter (3 tokens overhead each).

    Usable as ``token_counter=`` for ``langchain_core.messages.trim_messages``.
    """
    total = 0
    for m in messages:
        content = m.content if isinstance(m.content, str) else str(m.content)
        total += counter(content) + 3
    return total
