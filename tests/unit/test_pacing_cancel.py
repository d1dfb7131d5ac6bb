"""ModelGate.acall cancelled while it waits for a slot (a node timeout) gives the slot back."""

from __future__ import annotations

import asyncio
import threading

from convmem_graph.extractors.pacing import ModelGate, ModelPacing


class _CountingSlots(threading.BoundedSemaphore):
    """The gate's semaphore, counting the blocking acquires that started and that succeeded."""

    def __init__(self, value: int) -> None:
        super().__init__(value)
        self.started = self.acquired = 0

    def acquire(self, blocking: bool = True, timeout: float | None = None) -> bool:
        if not blocking:
            return super().acquire(blocking, timeout)
        self.started += 1
        got = super().acquire(blocking, timeout)
        self.acquired += got
        return got


def test_a_call_cancelled_while_waiting_for_a_slot_does_not_keep_it() -> None:
    gate = ModelGate(ModelPacing(concurrency=1))
    slots = gate._slots = _CountingSlots(1)

    async def main() -> tuple[str, bool]:
        release = asyncio.Event()
        started = asyncio.Event()

        async def holder() -> str:
            started.set()
            await release.wait()
            return "first"

        async def quick() -> str:
            return "never"

        first = asyncio.create_task(gate.acall(holder))
        await started.wait()  # the only slot is taken
        waiting = asyncio.create_task(gate.acall(quick))
        for _ in range(10_000):  # until its thread waits for the slot (it cannot be stopped then)
            if slots.started == 2:
                break
            await asyncio.sleep(0.001)
        assert slots.started == 2
        waiting.cancel()
        cancelled = False
        try:
            await waiting
        except asyncio.CancelledError:
            cancelled = True
        assert cancelled
        release.set()
        answer = await first
        # The cancelled waiter's thread takes the slot once it is free; the slot must come back.
        freed = False
        for _ in range(10_000):  # bounded: a leaked slot fails the test instead of hanging it
            if slots.acquired == 2 and slots.acquire(blocking=False):
                slots.release()
                freed = True
                break
            await asyncio.sleep(0.001)
        return answer, freed

    assert asyncio.run(main()) == ("first", True)
    assert gate.stats.in_flight == 0
