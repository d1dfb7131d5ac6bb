"""ModelGate.acall waits for a slot on the loop, holding no thread.

A call cancelled while it waits (a node timeout) leaves every slot free, and callers beyond the
loop's executor threads do not starve the call that holds the slot of a thread for its model.
Each scenario runs on a loop of its own with a one-thread executor, and the bounds only turn a
broken gate into a failure instead of a hang.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from convmem_graph.extractors.pacing import ModelGate, ModelPacing

T = TypeVar("T")


def _run(gate: ModelGate, scenario: Callable[[], Awaitable[T]]) -> T:
    executor = ThreadPoolExecutor(max_workers=1)
    loop = asyncio.new_event_loop()
    loop.set_default_executor(executor)
    try:
        return loop.run_until_complete(scenario())
    finally:
        executor.shutdown(wait=False, cancel_futures=True)
        # A gate that parked a waiter in a thread: give it a slot so the thread can end.
        gate._slots.acquire(blocking=False)
        gate._slots.release()
        loop.close()


async def _settle() -> None:
    for _ in range(20):  # the waiting calls reach their wait for the slot
        await asyncio.sleep(0.001)


def test_a_call_cancelled_while_waiting_for_a_slot_leaves_it_free() -> None:
    gate = ModelGate(ModelPacing(concurrency=1))

    async def scenario() -> tuple[str, str, bool]:
        release, started = asyncio.Event(), asyncio.Event()

        async def holder() -> str:
            started.set()
            await release.wait()
            return "first"

        async def quick() -> str:
            return "next"

        first = asyncio.create_task(gate.acall(holder))
        await started.wait()  # the only slot is taken
        waiting = asyncio.create_task(gate.acall(quick))
        await _settle()
        waiting.cancel()
        await asyncio.gather(waiting, return_exceptions=True)
        release.set()
        answers = (await first, await asyncio.wait_for(gate.acall(quick), timeout=10))
        free = gate._slots.acquire(blocking=False)
        if free:
            gate._slots.release()
        return (*answers, free)

    assert _run(gate, scenario) == ("first", "next", True)
    assert gate.stats.in_flight == 0


def test_callers_beyond_the_executor_threads_do_not_starve_the_slot_holder() -> None:
    gate = ModelGate(ModelPacing(concurrency=1))

    async def scenario() -> list[str]:
        go, started = asyncio.Event(), asyncio.Event()

        async def holder() -> str:
            started.set()
            await go.wait()
            # A model without native async: LangChain runs it in the loop's executor.
            return await asyncio.to_thread(lambda: "held")

        async def other() -> str:
            return "other"

        first = asyncio.create_task(gate.acall(holder))
        await started.wait()
        others = [asyncio.create_task(gate.acall(other)) for _ in range(3)]
        await _settle()
        go.set()
        return await asyncio.wait_for(asyncio.gather(first, *others), timeout=10)

    assert _run(gate, scenario) == ["held", "other", "other", "other"]
    assert (gate.stats.calls, gate.stats.peak_in_flight) == (4, 1)
