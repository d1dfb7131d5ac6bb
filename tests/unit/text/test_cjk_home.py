""" "A CJK character" is defined once, in ``text/cjk.py``: no module elsewhere spells a range of its own."""

from __future__ import annotations

import re
from pathlib import Path

from convmem_graph.text import cjk

PACKAGE = Path(__file__).resolve().parents[3] / "convmem_graph"
#: A character-class range as source text (``\u4e00-\u9fff``).
_ESCAPED_RANGE = re.compile(r"\\u([0-9a-fA-F]{4})-\\u[0-9a-fA-F]{4}")


def _east_asian_range(line: str) -> bool:
    """Whether ``line`` spells a range starting in the East Asian blocks (not surrogates, say)."""
    starts = [int(start, 16) for start in _ESCAPED_RANGE.findall(line)]
    return any(0x2E80 <= cp <= 0xD7AF or 0xF900 <= cp <= 0xFFEF for cp in starts)


def _ranges_outside_text() -> list[str]:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.parent.name == "text":
            continue
        for no, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
            if _east_asian_range(line):
                found.append(f"{path.relative_to(PACKAGE)}:{no}: {line.strip()[:80]}")
    return found


def test_no_module_outside_text_spells_a_cjk_range() -> None:
    assert _ranges_outside_text() == [], "use a class of convmem_graph.text.cjk (IDEOGRAPHS, UNIFIED ...)"


def test_the_check_sees_a_range() -> None:
    assert _east_asian_range(r'_CJK = re.compile("[\u3400-\u4dbf\u4e00-\u9fff]")')
    assert _east_asian_range(r'rf"[\uac00-\ud7af]"')
    assert not _east_asian_range(r'"[\x00-\x7f\u0300-\u036f]"')
    assert not _east_asian_range(r'"[\x00\ud800-\udfff]"')


def test_the_named_classes_are_what_their_users_measured() -> None:
    assert re.fullmatch(f"[{cjk.UNIFIED}]+", "用户喜欢猫") and not re.search(f"[{cjk.UNIFIED}]", "㐀かな한")
    assert re.fullmatch(f"[{cjk.IDEOGRAPHS}]+", "㐀用户") and not re.search(f"[{cjk.IDEOGRAPHS}]", "かな")
    assert re.fullmatch(f"[{cjk.SCRIPTS}]+", "かな한국用户")
    assert re.fullmatch(f"[{cjk.WIDE}]+", "用户，。（）ｆｕｌｌ𠀀") and re.fullmatch(
        f"[{cjk.EAST_ASIAN}]+", "⺀、用户한"
    )
