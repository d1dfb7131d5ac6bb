"""Text folding shared by duplicate detection in the sources and the store."""

from __future__ import annotations

import functools
import string
import unicodedata

__all__ = ["join_sentences", "normalize_text"]


def _dropped(code: int) -> bool:
    """Whether folding deletes this code point: punctuation, symbols, separators, controls, ``_``."""
    ch = chr(code)
    return unicodedata.category(ch)[0] in "PSZC" or ch in string.whitespace or ch == "_"


@functools.cache
def _drop_table() -> dict[int, None]:
    # Deleting punctuation, symbols and spaces with str.translate is several times faster than a
    # regex substitution. The table covers the BMP (built once, on first use, in about 30 ms);
    # rarer planes (emoji) are kept, which is harmless here.
    return dict.fromkeys(i for i in range(0x10000) if _dropped(i))


#: The ASCII part of the drop table, for ``bytes.translate``.
_ASCII_DROP = bytes(i for i in range(128) if _dropped(i))


def normalize_text(text: str) -> str:
    """Fold text for duplicate detection: NFKC (full/half width), case folded, no punctuation or spaces.

    Returns an empty string for text made only of punctuation and spaces.

    Example:
        >>> normalize_text("好的， 明早 7 点叫你！") == normalize_text("好的,明早7点叫你!")
        True
        >>> normalize_text("Ｈｅｌｌｏ, World！") == normalize_text("hello world")
        True
    """
    if text.isascii():
        # Same result for ASCII (NFKC leaves it as is, casefold is lower), in C at byte speed.
        return text.lower().encode("ascii").translate(None, _ASCII_DROP).decode("ascii")
    return unicodedata.normalize("NFKC", text).casefold().translate(_drop_table())


def join_sentences(sentences: list[str]) -> str:
    """Join ASR/LLM sentences: no separator, except a space between two Latin-script ends."""
    out = ""
    for s in sentences:
        s = s.strip()
        if not s:
            continue
        if out and _latin_end(out[-1]) and _latin_start(s[0]):
            out += " "
        out += s
    return out


def _latin_end(ch: str) -> bool:
    return ch.isascii() and (ch.isalnum() or ch in ".,!?;:'\")")


def _latin_start(ch: str) -> bool:
    return ch.isascii() and (ch.isalnum() or ch in "'\"(")
