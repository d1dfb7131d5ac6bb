"""Rule patterns compiled on first use (``convmem_graph.text._lazy_re``): same answers as ``re.compile``.

A pattern written with ``lazy_compile`` must answer every call exactly as ``re.compile`` of its
source does, before its first use (the class's methods) and after it (the compiled pattern's own
methods bound onto the instance). The extractor's side (nothing compiled at import, English
leaves the Chinese families uncompiled, same facts as with every pattern compiled up front) is in
``tests/integration/test_lazy_rule_patterns.py`` (fresh processes).
"""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from convmem_graph.text._lazy_re import LazyPattern, lazy_compile

_SOURCES = [
    (r"(?P<w>[A-Za-z]+)\s+(?P<n>\d+)", 0),
    (r"^I(?:'m| am) (not )?allergic to (.+?)\.?$", re.IGNORECASE),
    (r"[，,、]|\s+(?:and|or)\s+", 0),
    (r"我(?!们)(?P<v>喜欢|爱)(?P<o>[\u4e00-\u9fff]{1,4})", 0),
    (r"\b(cats?|dogs?)\b", re.I),
]
_TEXT = st.text(alphabet=st.sampled_from(list("ab Im'allergicto12 ,、和我们喜欢猫Cats DOG.")), max_size=40)


def _calls(p: re.Pattern[str] | LazyPattern, text: str) -> list[object]:
    def m(x: re.Match[str] | None) -> object:
        return None if x is None else (x.span(), x.groups(), x.groupdict())

    return [
        m(p.search(text)),
        m(p.search(text, 1)),
        m(p.match(text)),
        m(p.fullmatch(text)),
        p.sub("<>", text),
        p.sub(lambda x: x.group(0).upper(), text, 1),
        p.subn("#", text),
        p.split(text),
        p.split(text, 1),
        p.findall(text),
        [x.span() for x in p.finditer(text)],
        [x.span() for x in p.finditer(text, 2, 30)],
    ]


@settings(max_examples=150, deadline=None)
@given(which=st.integers(0, len(_SOURCES) - 1), first=_TEXT, second=_TEXT)
def test_a_lazy_pattern_answers_as_re_compile_before_and_after_its_first_use(
    which: int, first: str, second: str
) -> None:
    source, flags = _SOURCES[which]
    eager = re.compile(source, flags)
    lazy = lazy_compile(source, flags)
    assert not lazy.compiled
    assert lazy.pattern == source
    assert _calls(lazy, first) == _calls(eager, first)  # the first call compiles (class methods)
    assert lazy.compiled
    assert _calls(lazy, second) == _calls(eager, second)  # then the compiled pattern's own methods
    assert lazy.flags == eager.flags and lazy.groupindex == dict(eager.groupindex)


def test_each_method_compiles_on_its_own_first_call() -> None:
    for name in ("search", "match", "fullmatch", "findall", "finditer", "split"):
        lazy = lazy_compile(r"a(b)")
        result = getattr(lazy, name)("xab")
        expected = getattr(re.compile(r"a(b)"), name)("xab")
        if name == "finditer":
            result, expected = [m.span() for m in result], [m.span() for m in expected]
        elif name in ("search", "match", "fullmatch"):
            result, expected = result and result.span(), expected and expected.span()
        assert result == expected, name
        assert lazy.compiled
    lazy = lazy_compile(r"a(b)")
    assert lazy.sub(r"\1", "xab") == "xb" and lazy.compiled
    lazy = lazy_compile(r"a(b)")
    assert lazy.subn(r"\1", "xab") == ("xb", 1) and lazy.compiled


def test_an_attribute_a_pattern_lacks_fails_at_once() -> None:
    lazy = lazy_compile("a")
    with pytest.raises(AttributeError):
        lazy.scanner  # type: ignore[attr-defined]  # noqa: B018


def test_the_compile_rebinds_the_module_names_that_held_the_stand_in() -> None:
    namespace: dict[str, object] = {}
    exec(  # a module's top level: its globals are the namespace
        "from convmem_graph.text._lazy_re import lazy_compile\n"
        "P = lazy_compile(r'a(b)')\n"
        "ALIAS = P\n"
        "PAIR = (P, 'kept in a tuple')\n"
        "OTHER = lazy_compile(r'c')\n",
        namespace,
    )
    stand_in = namespace["P"]
    assert isinstance(stand_in, LazyPattern) and namespace["ALIAS"] is stand_in
    found = stand_in.search("xab")
    assert found is not None and found.span() == (1, 3)
    assert namespace["P"] is found.re and namespace["ALIAS"] is found.re
    assert isinstance(namespace["P"], re.Pattern)
    pair = namespace["PAIR"]
    assert isinstance(pair, tuple) and pair[0] is stand_in and stand_in.compiled  # a tuple keeps it
    assert stand_in.sub("-", "abab") == "--"
    assert isinstance(namespace["OTHER"], LazyPattern) and not namespace["OTHER"].compiled
