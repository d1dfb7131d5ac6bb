"""Pacing of model calls: how many at once, how many per minute, and what a 429 does.

A :class:`ModelGate` sits between the LLM extractor / summarizer and the chat model. Every call
passes it in this order:

1. a **slot**: at most ``ModelPacing.concurrency`` calls of the gate are in flight at once;
2. a **cool-down**: after a 429 every call of the gate waits until the time the server asked for
   (``Retry-After``), so concurrent calls do not keep hammering a limited account;
3. a **requests-per-minute budget**: LangChain's :class:`~langchain_core.rate_limiters.InMemoryRateLimiter`
   (``ModelPacing.rpm``; or any ``BaseRateLimiter`` handed to the gate), one permit per request,
   no burst: requests start at least ``60 / rpm`` seconds apart (above 6,000 a minute, bursts of
   at most 10 ms' worth);
4. a **tokens-per-minute budget** (``ModelPacing.tpm``): a bucket refilled at ``tpm / 60`` tokens a
   second that holds at most ten seconds' worth. A call is charged its prompt (counted with the
   project's counter) plus ``completion_tokens`` before it starts; once the answer reports its
   usage the difference is given back (or charged);
5. the call. A **429** (``openai.RateLimitError``, LangChain's ``ModelRateLimitError`` or any
   error with ``status_code == 429``) is retried: after ``Retry-After`` / ``retry-after-ms`` when
   the answer carries it, else after an exponential delay with jitter, each at most
   ``max_backoff_s``; after ``max_attempts`` attempts :class:`RateLimitedError` is raised. It is an
   :class:`~convmem_graph.errors.ExtractionError`, so the lifecycle node does not retry it again:
   the run fails with what was committed before kept (each extraction batch commits with its
   cursor, so nothing is half-written) and the next run resumes from the cursor.

Other failures (timeouts, 5xx) pass through unchanged to the node's LangGraph ``RetryPolicy``.

The budgets live in the gate, so they are shared by every thread (and every coroutine) of the
process that uses it, and by nothing else: worker processes each have their own gate.
``convmem replay`` splits the numbers given on the command line across its worker processes
(:meth:`ModelPacing.share`), so the whole command stays within them.

Example:
    >>> gate = ModelGate(ModelPacing(concurrency=4, rpm=600))
    >>> gate.call(lambda: "answer", "prompt text")
    'answer'
    >>> gate.stats.calls, gate.stats.rate_limited
    (1, 0)
"""

from __future__ import annotations

import asyncio
import email.utils
import logging
import random
import threading
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, model_validator

from convmem_graph.errors import ExtractionError
from convmem_graph.tokens import TokenCounter, count_tokens

if TYPE_CHECKING:
    from langchain_core.rate_limiters import BaseRateLimiter

__all__ = ["GateStats", "ModelGate", "ModelPacing", "RateLimitedError", "TokenBudget", "retry_after_seconds"]

logger = logging.getLogger(__name__)

T = TypeVar("T")

#: The token bucket holds this many seconds of the per-minute budget (the largest burst).
_TPM_BURST_S = 10.0
#: Longest pause of an async call polling for a slot (a model call takes far longer).
_SLOT_POLL_MAX_S = 0.05


class ModelPacing(BaseModel):
    """Limits for the model calls of one process (``convmem replay --model-concurrency/--rpm/--tpm``).

    Example:
        >>> share = ModelPacing(concurrency=10, rpm=600, tpm=100_000).share(0, 4)
        >>> share.concurrency, share.rpm, share.tpm
        (3, 150.0, 25000)
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    concurrency: int = Field(default=1, ge=1, le=1024, description="Model calls in flight at once.")
    rpm: float | None = Field(default=None, gt=0, description="Requests per minute, or no limit.")
    tpm: int | None = Field(
        default=None, gt=0, description="Tokens per minute (prompt + answer), or no limit."
    )
    completion_tokens: int = Field(
        default=512, ge=0, description="Tokens charged for an answer before its usage is known (tpm)."
    )
    max_attempts: int = Field(default=6, ge=1, le=50, description="Attempts of one call while it gets 429.")
    initial_backoff_s: float = Field(default=1.0, gt=0, description="First backoff without Retry-After.")
    max_backoff_s: float = Field(default=60.0, gt=0, description="Longest wait after one 429.")

    @model_validator(mode="after")
    def _backoff_order(self) -> ModelPacing:
        if self.initial_backoff_s > self.max_backoff_s:
            raise ValueError("initial_backoff_s must not exceed max_backoff_s")
        return self

    def share(self, worker: int, workers: int) -> ModelPacing:
        """This worker's part when ``workers`` processes replay together: the limits are split evenly.

        Concurrency is divided as whole calls (the first ``concurrency % workers`` workers get one
        more); ``rpm`` and ``tpm`` are divided exactly. Together the workers stay within the
        limits; a worker whose memories are done leaves its share unused.

        Raises:
            ValueError: Fewer calls than workers (each worker makes at least one call at a time).
        """
        if workers < 1 or not 0 <= worker < workers:
            raise ValueError(f"worker must be in 0..{workers - 1}, got {worker}")
        if self.concurrency < workers:
            raise ValueError(
                f"model concurrency {self.concurrency} is split across {workers} worker processes: "
                f"it must be at least {workers}"
            )
        base, extra = divmod(self.concurrency, workers)
        return self.model_copy(
            update={
                "concurrency": base + (1 if worker < extra else 0),
                "rpm": None if self.rpm is None else self.rpm / workers,
                "tpm": None if self.tpm is None else max(1, self.tpm // workers),
            }
        )


class RateLimitedError(ExtractionError):
    """The model server kept answering 429 (rate limit) for one call; the batch is left for a rerun.

    Attributes:
        attempts: Calls made.
        waited_s: Seconds spent waiting between them.
    """

    def __init__(self, message: str, *, attempts: int, waited_s: float) -> None:
        super().__init__(message)
        self.attempts = attempts
        self.waited_s = waited_s


@dataclass
class GateStats:
    """What a gate saw (read them under no lock: they are counters for reports and tests)."""

    calls: int = 0  # calls that returned
    attempts: int = 0  # attempts started (calls + retried 429s + failures)
    rate_limited: int = 0  # 429 answers
    failed: int = 0  # calls that ended in an error (429s that ran out of attempts included)
    in_flight: int = 0
    peak_in_flight: int = 0
    backoff_s: float = 0.0  # seconds waited after 429s, over all calls
    tokens_charged: int = 0  # tpm budget actually spent (estimates corrected by reported usage)


class TokenBudget:
    """A tokens-per-minute bucket: refilled at ``per_minute / 60`` a second, at most ten seconds' worth.

    A charge waits until the bucket holds it (or is full, for a charge larger than the bucket),
    then takes it, possibly below zero; later charges wait for the debt to refill. So over any
    time ``t`` at most ``burst + per_minute * t / 60`` (plus one call's overshoot) is spent.

    Args:
        per_minute: Tokens per minute.
        clock: Seconds, monotonic (tests pass a fake clock).
    """

    def __init__(self, per_minute: float, *, clock: Callable[[], float] = time.monotonic) -> None:
        if per_minute <= 0:
            raise ValueError(f"tokens per minute must be > 0, got {per_minute!r}")
        self.rate = per_minute / 60.0
        self.capacity = max(1.0, self.rate * _TPM_BURST_S)
        self._clock = clock
        self._level = self.capacity
        self._last = clock()
        self._lock = threading.Lock()

    def _refill(self) -> None:
        now = self._clock()
        self._level = min(self.capacity, self._level + (now - self._last) * self.rate)
        self._last = now

    def try_take(self, tokens: int) -> float:
        """Take ``tokens`` and return 0.0, or take nothing and return the seconds to wait first."""
        with self._lock:
            self._refill()
            need = min(float(tokens), self.capacity)
            if self._level >= need:
                self._level -= tokens
                return 0.0
            return (need - self._level) / self.rate

    def adjust(self, tokens: int) -> None:
        """Give back (positive) or charge (negative) tokens once a call's real usage is known."""
        with self._lock:
            self._refill()
            self._level = min(self.capacity, self._level + tokens)


def retry_after_seconds(exc: BaseException, *, now: Callable[[], float] = time.time) -> float | None:
    """The wait a 429 asks for: ``retry-after-ms``, else ``Retry-After`` (seconds or an HTTP date).

    Returns ``None`` when the error carries no response headers or neither header.

    Example:
        >>> class E(Exception):
        ...     headers = {"retry-after": "7"}
        >>> retry_after_seconds(E())
        7.0
    """
    headers = _headers_of(exc)
    if not headers:
        return None
    ms = _header(headers, "retry-after-ms")
    if ms is not None:
        try:
            return max(0.0, float(ms) / 1000.0)
        except ValueError:
            pass
    value = _header(headers, "retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - now())


def _headers_of(exc: BaseException) -> Mapping[str, str] | None:
    response = getattr(exc, "response", None)
    headers = getattr(response, "headers", None) if response is not None else None
    if headers is None:
        headers = getattr(exc, "headers", None)
    return headers if isinstance(headers, Mapping) or hasattr(headers, "get") else None


def _header(headers: Mapping[str, str], name: str) -> str | None:
    value = headers.get(name)
    if value is None:  # a plain dict is case-sensitive; httpx.Headers is not
        value = next((v for k, v in headers.items() if k.lower() == name), None)
    return None if value is None else str(value).strip()


def is_rate_limit(exc: BaseException) -> bool:
    """Whether ``exc`` is a 429 answer (OpenAI SDK, LangChain's ``ModelRateLimitError``, or a status)."""
    if getattr(exc, "status_code", None) == 429:
        return True
    from langchain_core.exceptions import ModelRateLimitError

    if isinstance(exc, ModelRateLimitError):
        return True
    try:
        import openai
    except ImportError:  # pragma: no cover - openai comes with langchain-openai
        return False
    return isinstance(exc, openai.RateLimitError)


def _prompt_tokens(prompt: Sequence[Any] | str, counter: TokenCounter) -> int:
    if isinstance(prompt, str):
        return counter(prompt)
    total = 0
    for message in prompt:
        content = getattr(message, "content", message)
        total += counter(content if isinstance(content, str) else str(content))
    return total


def _reported_tokens(answer: Any) -> int | None:
    """Total tokens an answer reports (an AIMessage, or ``with_structured_output``'s raw dict)."""
    message = answer.get("raw") if isinstance(answer, Mapping) else answer
    usage = getattr(message, "usage_metadata", None)
    if isinstance(usage, Mapping) and isinstance(usage.get("total_tokens"), int):
        return int(usage["total_tokens"])
    return None


class ModelGate:
    """Paces the model calls that go through it (see the module docstring for the order of steps).

    Args:
        pacing: The limits; default: one call at a time, no per-minute budget.
        rate_limiter: A LangChain rate limiter to use for requests instead of the one ``pacing.rpm``
            builds (an ``InMemoryRateLimiter`` shared with other code, for instance).
        counter: Counts prompt tokens for the tpm budget.
        clock: Monotonic seconds; with ``sleep``, replaced by a fake clock in tests.
        sleep: Blocks the calling thread for the given seconds.
        jitter: Returns a float in [0, 1) for the backoff jitter.

    Thread-safe: one gate serves every thread of a replay.
    """

    def __init__(
        self,
        pacing: ModelPacing | None = None,
        *,
        rate_limiter: BaseRateLimiter | None = None,
        counter: TokenCounter = count_tokens,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        jitter: Callable[[], float] = random.random,
    ) -> None:
        self.pacing = pacing or ModelPacing()
        self.counter = counter
        self._clock = clock
        self._sleep = sleep
        self._jitter = jitter
        if rate_limiter is None and self.pacing.rpm is not None:
            from langchain_core.rate_limiters import InMemoryRateLimiter

            per_second = self.pacing.rpm / 60.0
            # Waiting calls poll for a permit: often enough that one is not left unused for long,
            # at most every 10 ms. The bucket holds one permit (requests start 60/rpm s apart),
            # or one poll's worth above 100 requests a second, which polls could not keep up with.
            poll = min(0.1, max(0.01, 0.25 / per_second))
            rate_limiter = InMemoryRateLimiter(
                requests_per_second=per_second,
                check_every_n_seconds=poll,
                max_bucket_size=max(1.0, per_second * poll),
            )
        self.rate_limiter = rate_limiter
        self.tokens = None if self.pacing.tpm is None else TokenBudget(self.pacing.tpm, clock=clock)
        self.stats = GateStats()
        self._slots = threading.BoundedSemaphore(self.pacing.concurrency)
        self._lock = threading.Lock()
        self._resume_at = 0.0  # monotonic time before which no call starts (after a 429)

    # -- the steps ------------------------------------------------------------------------
    def _permit_wait(self, cost: int) -> float:
        """Seconds to wait before the next step may pass (0.0: passed, the budgets are charged)."""
        wait = self._resume_at - self._clock()
        if wait > 0:
            return wait
        if self.tokens is not None:
            wait = self.tokens.try_take(cost)
            if wait > 0:
                return wait
        if self.rate_limiter is not None and not self.rate_limiter.acquire(blocking=False):
            if self.tokens is not None:
                self.tokens.adjust(cost)  # not spent: the request permit was refused
            return float(getattr(self.rate_limiter, "check_every_n_seconds", 0.05))
        return 0.0

    def _enter(self) -> None:
        with self._lock:
            self.stats.attempts += 1
            self.stats.in_flight += 1
            self.stats.peak_in_flight = max(self.stats.peak_in_flight, self.stats.in_flight)

    def _leave(self, cost: int, answer: Any, error: BaseException | None) -> None:
        reported = None if error is not None else _reported_tokens(answer)
        if self.tokens is not None and reported is not None:
            self.tokens.adjust(cost - reported)
        with self._lock:
            self.stats.in_flight -= 1
            if error is None:
                self.stats.calls += 1
                self.stats.tokens_charged += reported if reported is not None else cost
            else:
                self.stats.tokens_charged += cost

    def _after_429(self, exc: BaseException, attempt: int, waited: float) -> float:
        """Record a 429 and return how long to back off, or raise when the attempts are spent."""
        pacing = self.pacing
        asked = retry_after_seconds(exc)
        with self._lock:
            self.stats.rate_limited += 1
            if attempt >= pacing.max_attempts:
                self.stats.failed += 1
        if attempt >= pacing.max_attempts:
            raise RateLimitedError(
                f"model rate limit: HTTP 429 on all {attempt} attempts of one call "
                f"(waited {waited:.1f} s between them); fewer calls at once or lower rpm/tpm "
                "budgets avoid it",
                attempts=attempt,
                waited_s=waited,
            ) from exc
        if asked is not None:
            delay = min(asked, pacing.max_backoff_s)
        else:
            # Exponential with "equal jitter": half the step fixed, half random.
            step = min(pacing.max_backoff_s, pacing.initial_backoff_s * 2 ** (attempt - 1))
            delay = step / 2 + self._jitter() * step / 2
        with self._lock:
            # Every call of the gate waits out the cool-down, not only the one that got the 429.
            self._resume_at = max(self._resume_at, self._clock() + delay)
            self.stats.backoff_s += delay
        logger.warning(
            "model call got HTTP 429 (attempt %d of %d); waiting %.2f s%s",
            attempt,
            pacing.max_attempts,
            delay,
            " as Retry-After asks" if asked is not None else "",
        )
        return delay

    def _failed(self) -> None:
        with self._lock:
            self.stats.failed += 1

    # -- the calls ------------------------------------------------------------------------
    def call(self, fn: Callable[[], T], prompt: Sequence[Any] | str = "") -> T:
        """Run ``fn`` (one model request) within the limits, backing off on 429s.

        Args:
            fn: Makes the request and returns the answer.
            prompt: The request's messages (or text): counted for the tpm budget.

        Raises:
            RateLimitedError: The server answered 429 to ``max_attempts`` attempts.
            Exception: Whatever else ``fn`` raised, unchanged.
        """
        cost = self._cost(prompt)
        waited = 0.0
        for attempt in range(1, self.pacing.max_attempts + 1):
            with self._slots:
                while (wait := self._permit_wait(cost)) > 0:
                    self._sleep(wait)
                self._enter()
                answer: Any = None
                error: BaseException | None = None
                try:
                    answer = fn()
                except BaseException as exc:
                    error = exc
                    if not is_rate_limit(exc):
                        self._failed()
                        raise
                finally:
                    self._leave(cost, answer, error)
                if error is None:
                    return answer  # type: ignore[no-any-return]
            # A 429: the slot is free while this call backs off.
            delay = self._after_429(error, attempt, waited)
            waited += delay
        raise AssertionError("unreachable: the last attempt returns or raises")  # pragma: no cover

    async def acall(self, fn: Callable[[], Awaitable[T]], prompt: Sequence[Any] | str = "") -> T:
        """Async twin of :meth:`call` (waits with ``asyncio.sleep``; no thread waits for a slot)."""
        cost = self._cost(prompt)
        waited = 0.0
        for attempt in range(1, self.pacing.max_attempts + 1):
            await self._aslot()
            try:
                while (wait := self._permit_wait(cost)) > 0:
                    await asyncio.sleep(wait)
                self._enter()
                answer: Any = None
                error: BaseException | None = None
                try:
                    answer = await fn()
                except BaseException as exc:
                    error = exc
                    if not is_rate_limit(exc):
                        self._failed()
                        raise
                finally:
                    self._leave(cost, answer, error)
                if error is None:
                    return answer  # type: ignore[no-any-return]
            finally:
                self._slots.release()
            delay = self._after_429(error, attempt, waited)
            waited += delay
        raise AssertionError("unreachable: the last attempt returns or raises")  # pragma: no cover

    async def _aslot(self) -> None:
        """Take a slot without holding a thread: poll it, as the request budget is polled.

        A waiting call parked in a worker thread would be lost to the loop: with more callers
        than the loop's executor has threads, the call holding the slot could not get a thread
        for its model (LangChain runs a model without native async there) and nothing moved;
        and a call cancelled while its thread waited (a node timeout) left the slot taken.
        """
        pause = 0.001
        while not self._slots.acquire(blocking=False):
            await asyncio.sleep(pause)
            pause = min(pause * 2, _SLOT_POLL_MAX_S)

    def _cost(self, prompt: Sequence[Any] | str) -> int:
        if self.tokens is None:
            return 0
        return _prompt_tokens(prompt, self.counter) + self.pacing.completion_tokens

    def describe(self) -> str:
        """One line: the limits (for logs and reports)."""
        p = self.pacing
        parts = [f"{p.concurrency} at once"]
        if self.rate_limiter is not None:
            parts.append(f"{p.rpm:g} requests/min" if p.rpm is not None else "a custom rate limiter")
        if p.tpm is not None:
            parts.append(f"{p.tpm} tokens/min")
        return ", ".join(parts)
