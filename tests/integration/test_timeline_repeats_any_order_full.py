"""``test_six_identical_replies_store_six_in_any_order`` at full size: 60 examples (the unit tier runs 15)."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.unit.sources.test_timeline_repeats import six_replies_stored_in_any_order


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_six_identical_replies_store_six_in_any_order(data: st.DataObject) -> None:
    six_replies_stored_in_any_order(data)
