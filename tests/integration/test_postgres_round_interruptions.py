"""TRTC interruption marks across library runs on a real PostgreSQL: the SQLite contract, unchanged."""

from __future__ import annotations

import pytest

from tests.unit.store.test_round_interruptions import RoundInterruptionContract

pytestmark = [pytest.mark.integration, pytest.mark.postgres]


class TestPostgresRoundInterruptions(RoundInterruptionContract):
    @pytest.fixture
    def url(self, pg_url: str) -> str:
        return pg_url
