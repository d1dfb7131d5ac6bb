"""Issue 10, finding 8: the profile follows when facts were stated, not the order they arrived.

Ingesting c7 then c3 gave 上海 although 武汉 was said 11 h later. Sessions stating different cities
(and a food preference that flips) are ingested in every drawn order, one run per session; the
inferred profile must be the one of the last statement.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from convmem_graph.runner import Lifecycle
from convmem_graph.state import RawInput
from convmem_graph.store import MemoryStore

T0 = 1_767_268_800_000
HOUR = 3_600_000
CITIES = ["上海", "武汉", "杭州", "成都", "北京"]


@st.composite
def sessions(draw: st.DrawFn) -> tuple[list[tuple[int, str]], list[int]]:
    n = draw(st.integers(min_value=2, max_value=4))
    cities = draw(st.lists(st.sampled_from(CITIES), min_size=n, max_size=n).filter(lambda c: len(set(c)) > 1))
    gaps = draw(st.lists(st.integers(min_value=1, max_value=48), min_size=n, max_size=n))
    times, t = [], T0
    for g in gaps:
        t += g * HOUR
        times.append(t)
    order = draw(st.permutations(range(n)))
    return list(zip(times, cities, strict=True)), list(order)


@settings(max_examples=25, deadline=None)
@given(case=sessions())
def test_any_arrival_order_gives_the_profile_of_the_last_statement(
    case: tuple[list[tuple[int, str]], list[int]],
) -> None:
    stated, order = case
    store = MemoryStore.from_url(":memory:")
    try:
        life = Lifecycle(store)
        for i in order:
            ts, city = stated[i]
            life.run("m", [RawInput([{"role": "user", "content": f"我住在{city}。", "timestamp": ts}])])
        expected = max(stated)[1]
        assert store.get_variables("m")["city"].value == expected
        active = [f.content for f in store.list_fragments("m") if f.key == "profile:city"]
        assert active == [f"用户住在{expected}。"]
    finally:
        store.close()


def test_the_finding_c7_then_c3() -> None:
    early = [{"role": "user", "content": "我住在上海。", "timestamp": T0}]
    late = [{"role": "user", "content": "我住在武汉。", "timestamp": T0 + 11 * HOUR}]
    profiles = []
    for first, second in ((early, late), (late, early)):
        store = MemoryStore.from_url(":memory:")
        life = Lifecycle(store)
        life.run("m", [RawInput(first)])
        life.run("m", [RawInput(second)])
        profiles.append(store.get_variables("m")["city"].value)
        store.close()
    assert profiles == ["武汉", "武汉"]
