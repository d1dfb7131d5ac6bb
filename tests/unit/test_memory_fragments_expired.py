"""``fragments()`` never lists a transient fact past its expiry as active; ``status="expired"`` lists it."""

from __future__ import annotations

from pathlib import Path

from convmem_graph.memory import ConvMemory

T0 = 1_767_268_822_030  # 2026-01-01 19:20 UTC+8
DAY = 86_400_000


def test_expired_transient_facts_are_marked_not_active(tmp_path: Path) -> None:
    now = [T0 + 60_000]
    mem = ConvMemory.open(str(tmp_path / "m.db"), clock=lambda: now[0])
    try:
        text = "我这周在试着吃素，我对芒果过敏。"
        mem.ingest("u", [{"role": "user", "content": text, "timestamp_ms": T0}])
        assert {f.key for f in mem.fragments("u")} >= {"allergy:芒果"}
        transient = [f for f in mem.fragments("u") if f.transient]
        assert transient and all(f.expires_at is not None for f in transient)
        assert mem.fragments("u", status="expired") == []
        now[0] = max(f.expires_at or 0 for f in transient) + DAY
        active = mem.fragments("u")
        assert [f.key for f in active] == ["allergy:芒果"]
        expired = mem.fragments("u", status="expired")
        assert {f.id for f in expired} == {f.id for f in transient}
        assert {f.id for f in mem.fragments("u", status=None)} >= {f.id for f in transient}
    finally:
        mem.close()
