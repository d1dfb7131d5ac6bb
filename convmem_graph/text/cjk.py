"""What "a CJK character" means, once: character-class bodies for ``re`` patterns.

The sets in use, kept apart on purpose (each was measured where it is used):

- :data:`IDEOGRAPHS`: Han ideographs (extension A, unified, compatibility). Chinese text detection,
  key normalization, noise tokens.
- :data:`SCRIPTS`: the ideographs plus kana and Hangul syllables. Search-term bigrams and the
  memory block's language guess, which must treat Japanese and Korean runs as CJK too.
- :data:`UNIFIED`: the unified block alone, the heuristic extractor's rule patterns.
- :data:`EAST_ASIAN` and :data:`WIDE`: what the sanitizer never folds, and what the token
  estimate counts one each (scripts, punctuation and fullwidth forms too).

Example:
    >>> import re
    >>> bool(re.search(f"[{IDEOGRAPHS}]", "住在上海")), bool(re.search(f"[{IDEOGRAPHS}]", "かな"))
    (True, False)
    >>> bool(re.search(f"[{SCRIPTS}]", "かな"))
    True
"""

from __future__ import annotations

__all__ = ["EAST_ASIAN", "IDEOGRAPHS", "SCRIPTS", "UNIFIED", "WIDE"]

#: Han ideographs: CJK extension A, CJK unified ideographs, CJK compatibility ideographs.
IDEOGRAPHS = "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
#: The ideographs plus hiragana and katakana, and Hangul syllables.
SCRIPTS = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff"
#: The CJK unified ideographs block alone: the heuristic extractor's rules, whose patterns and
#: precision were measured with it (modern Chinese text does not leave it).
UNIFIED = "\u4e00-\u9fff"
#: Every East Asian character from the CJK radicals to the unified ideographs (punctuation, kana,
#: bopomofo, extension A included), compatibility ideographs and Hangul syllables: what the
#: sanitizer leaves to the text (never folded as a confusable of ASCII).
EAST_ASIAN = "\u2e80-\u9fff\uf900-\ufaff\uac00-\ud7af"
#: Characters a token estimate counts one token each: the East Asian scripts, their punctuation
#: and fullwidth forms, and the supplementary ideographs (tokenizers give them a token or more).
WIDE = (
    "\u2e80-\u2fff\u3000-\u30ff\u3100-\u312f\u3190-\u31ff\u3400-\u4dbf\u4e00-\u9fff"
    "\uac00-\ud7af\uf900-\ufaff\uff00-\uffef\U00020000-\U0002ffff"
)
