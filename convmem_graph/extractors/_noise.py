"""A cheap test for messages that are noise, not language.

Random characters, keyboard mashing, one pattern repeated over and over (a stuck ASR stream, a
paste gone wrong).

The rules of the heuristic extractor read short clauses; in a long enough run of noise some clause
always looks like a statement ("喜欢吃", "叫是有"). Two statistics of real text rule that out for
long messages, where they are reliable (short ones rely on the rules' own object checks):

- vocabulary growth: a window of real text of ``n`` tokens (Chinese characters, Latin words,
  numbers) uses about 6-12 x sqrt(n) distinct ones; a few characters shuffled or repeated use far
  fewer;
- grammar words: in real Chinese 15-40 % of the characters are function characters (的, 了, 是,
  我 ...); characters drawn at random from the whole script have almost none.
"""

from __future__ import annotations

import math

from convmem_graph.text._lazy_re import lazy_compile
from convmem_graph.text.cjk import IDEOGRAPHS

__all__ = ["looks_like_noise"]

_TOKEN = lazy_compile(rf"[{IDEOGRAPHS}]|[A-Za-z']+|\d+")
_FUNCTION_CHARS = frozenset(
    "的了是我不在有一这个你他就也很吗呢吧啊都说要没好人们她它那么什还和把被给会能想去来到"
)
#: Below this many tokens the statistics are too noisy to act on.
_MIN_TOKENS = 100
_MIN_DIVERSITY = 3.5
_MIN_FUNCTION_SHARE = 0.06
#: The statistics are read on a few windows of this many characters: the vocabulary of real Chinese
#: saturates (a few thousand characters), so one sqrt(n) measure over a whole book would fail.
_WINDOW = 3000
_WINDOWS = 4


def _window_is_noise(text: str) -> bool | None:
    tokens = _TOKEN.findall(text)
    n = len(tokens)
    if n < _MIN_TOKENS:
        return None
    if len(set(tokens)) / math.sqrt(n) < _MIN_DIVERSITY:
        return True
    cjk = [t for t in tokens if len(t) == 1 and t >= "\u3400"]
    if len(cjk) < _MIN_TOKENS:
        return False
    function = sum(1 for t in cjk if t in _FUNCTION_CHARS)
    return function / len(cjk) < _MIN_FUNCTION_SHARE


def looks_like_noise(text: str) -> bool:
    """Return whether a long message is noise rather than language (short ones: never).

    Read on up to four windows spread over the text; noise when most windows that are long
    enough to judge look like noise.

    Example:
        >>> looks_like_noise("喜欢吃，" * 200), looks_like_noise("我喜欢吃火锅。" * 3)
        (True, False)
    """
    if len(text) < _MIN_TOKENS:
        return False
    if len(text) <= _WINDOW:
        return bool(_window_is_noise(text))
    step = (len(text) - _WINDOW) // (_WINDOWS - 1)
    verdicts = [_window_is_noise(text[i * step : i * step + _WINDOW]) for i in range(_WINDOWS)]
    judged = [v for v in verdicts if v is not None]
    return bool(judged) and sum(judged) * 2 > len(judged)
