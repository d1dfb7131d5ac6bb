"""The live TRTC any-order properties at full size: 2,000 drawn calls (the unit tier draws 40), and
40 through the whole lifecycle (the unit tier draws 10)."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.unit.server.test_trtc_live_any_order import (  # noqa: F401 (the module's databases fixture)
    _DEPLOYMENTS,
    Deployment,
    Round,
    _shared_databases,
    calls,
    stored_as_it_happened,
    whole_lifecycle_stores_the_same_timeline,
)


@settings(max_examples=2000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rounds=calls(), deployment=_DEPLOYMENTS, data=st.data())
def test_a_live_call_is_stored_as_it_happened_in_any_arrival_order(
    rounds: list[Round], deployment: Deployment, data: st.DataObject
) -> None:
    stored_as_it_happened(rounds, deployment, data)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rounds=calls(), deployment=_DEPLOYMENTS, data=st.data())
def test_the_whole_lifecycle_stores_the_same_timeline(
    rounds: list[Round], deployment: Deployment, data: st.DataObject
) -> None:
    whole_lifecycle_stores_the_same_timeline(rounds, deployment, data)
