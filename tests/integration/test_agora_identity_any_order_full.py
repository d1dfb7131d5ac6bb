"""``test_any_order_any_runs_gives_one_timeline`` at full size: 150 examples (the unit tier runs 30)."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.unit.sources.test_agora_identity import one_timeline_in_any_order


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_any_order_any_runs_gives_one_timeline(data: st.DataObject) -> None:
    one_timeline_in_any_order(data)
