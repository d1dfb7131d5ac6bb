"""What "a CJK character" means, once: character-class bodies for ``re`` patterns.

Two sets are in use, kept apart on purpose (each was measured where it is used):

- :data:`IDEOGRAPHS`: Han ideographs (extension A, unified, compatibility). Chinese text detection,
  key normalization, noise tokens.
- :data:`SCRIPTS`: the ideographs plus kana and Hangul syllables. Search-term bigrams and the
  memory block's language guess, which must treat Japanese and Korean runs as CJK too.

Example:
    >>> import re
    >>> bool(re.search(f"[{IDEOGRAPHS}]", "住在上海")), bool(re.search(f"[{IDEOGRAPHS}]", "かな"))
    (True, False)
    >>> bool(re.search(f"[{SCRIPTS}]", "かな"))
    True
"""

from __future__ import annotations

__all__ = ["IDEOGRAPHS", "SCRIPTS"]

#: Han ideographs: CJK extension A, CJK unified ideographs, CJK compatibility ideographs.
IDEOGRAPHS = "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
#: The ideographs plus hiragana and katakana, and Hangul syllables.
SCRIPTS = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff"
