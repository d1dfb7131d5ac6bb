"""The library path's round-interruption property at full size: 150 drawn calls (the unit tier draws 30)."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.unit.server import test_trtc_live_any_order as live
from tests.unit.store.test_round_interruptions import (  # noqa: F401 (the module's store fixture)
    _memory,
    separate_runs_store_one_timeline,
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rounds=live.calls(), data=st.data())
def test_separate_library_runs_store_each_round_as_one_run_does(
    rounds: list[live.Round], data: st.DataObject
) -> None:
    separate_runs_store_one_timeline(rounds, data)
