"""Text helpers of the sources and the store: folding, joining and splitting sentences."""

from __future__ import annotations

import re
import string
import unicodedata

__all__ = ["join_sentences", "normalize_text", "split_to_fit"]


def _dropped(code: int) -> bool:
    """Whether folding deletes this code point: punctuation, symbols, separators, controls, ``_``."""
    ch = chr(code)
    return unicodedata.category(ch)[0] in "PSZC" or ch in string.whitespace or ch == "_"


class _DropTable(dict[int, int | None]):
    """``str.translate``'s table for folding, filled on first sight of each code point.

    A code point of the BMP that :func:`_dropped` names maps to ``None`` (deleted); every other
    one, and every one above the BMP (emoji: kept, which is harmless here), to itself. Deleting
    with ``str.translate`` is several times faster than a regex substitution. The table was built
    whole on first use (65,536 calls of ``_dropped``, ~15 ms of every process that folds one
    non-ASCII text); a text holds a few dozen distinct code points, so each is looked at once,
    when first met. Kept code points map to themselves because a missing key costs
    ``str.translate`` a ``KeyError`` per character.
    """

    def __missing__(self, code: int) -> int | None:
        value = None if code < 0x10000 and _dropped(code) else code
        self[code] = value
        return value


_DROP = _DropTable()


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
    return unicodedata.normalize("NFKC", text).casefold().translate(_DROP)


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


# After a sentence end (a Latin period only before whitespace: "3.5" and "e.g." stay), or a newline.
_SENTENCE_BREAK = re.compile(r"(?<=[。！？!?…])|(?<=\.)(?=\s)|\n")
_CLAUSE_MARKS = "，,、；;：:"


def split_to_fit(text: str, limit: int) -> list[str]:
    """Split ``text`` into pieces of at most ``limit`` characters, at sentence ends where possible.

    Whole sentences are packed into each piece; a sentence longer than ``limit`` is cut at its last
    clause mark, else its last space, that fits, and only then at ``limit`` itself. Joining the
    pieces with :func:`join_sentences` gives the text back, up to whitespace.

    Example:
        >>> split_to_fit("One two. Three four. Five.", 18)
        ['One two.', 'Three four. Five.']
        >>> split_to_fit("我今天去了西湖，然后去了灵隐寺。", 8)
        ['我今天去了西湖，', '然后去了灵隐寺。']
    """
    if limit < 1:
        raise ValueError("split_to_fit: limit must be at least 1")
    text = text.strip()
    if len(text) <= limit:
        return [text] if text else []
    units: list[str] = []
    for sentence in _SENTENCE_BREAK.split(text):
        sentence = sentence.strip()
        while len(sentence) > limit:
            window = sentence[:limit]
            cut = max(window.rfind(mark) for mark in _CLAUSE_MARKS) + 1
            if cut <= 0:
                cut = window.rfind(" ")
            if cut <= 0:
                cut = limit
            units.append(sentence[:cut].strip())
            sentence = sentence[cut:].strip()
        if sentence:
            units.append(sentence)
    pieces: list[str] = []
    current = ""
    for unit in units:
        joined = join_sentences([current, unit]) if current else unit
        if len(joined) <= limit:
            current = joined
        else:
            pieces.append(current)
            current = unit
    if current:
        pieces.append(current)
    return pieces
