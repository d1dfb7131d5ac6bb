"""``test_any_order_and_split_gives_the_one_run_timeline`` at full size: 80 examples (unit: 20)."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.unit.sources.test_trtc_rounds_any_order import one_run_timeline_in_any_order


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_any_order_and_split_gives_the_one_run_timeline(data: st.DataObject) -> None:
    one_run_timeline_in_any_order(data)
