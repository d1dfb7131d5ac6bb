"""Timestamp helpers: every stored time is integer milliseconds since the epoch, UTC."""

from __future__ import annotations

import time

__all__ = ["now_ms", "to_ms"]

# 10-digit values are seconds until the year 2286; 13-digit values are ms; 16- and 19-digit
# values are µs and ns. Vendors mix units (Agora documents ms but shows seconds; IM sends seconds;
# TRTC sends ms).
_MS_THRESHOLD = 100_000_000_000
_US_THRESHOLD = 100_000_000_000_000
_NS_THRESHOLD = 100_000_000_000_000_000


def to_ms(value: int | float) -> int:
    """Convert a Unix timestamp in seconds or milliseconds to integer milliseconds.

    The unit is decided by magnitude: below 1e11 seconds (any date before 5138 AD), below 1e14
    milliseconds, below 1e17 microseconds, above that nanoseconds.

    Args:
        value: A non-negative Unix timestamp in seconds or milliseconds.

    Returns:
        Milliseconds since the epoch.

    Raises:
        ValueError: If the value is negative, NaN or not a number.

    Example:
        >>> to_ms(1767268800)
        1767268800000
        >>> to_ms(1767268801250)
        1767268801250
    """
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"timestamp must be a number, got {type(value).__name__}")
    if value != value or value < 0 or value == float("inf"):
        raise ValueError(f"timestamp must be a non-negative finite number, got {value!r}")
    if value < _MS_THRESHOLD:
        return int(round(value * 1000))
    if value < _US_THRESHOLD:
        return int(value)
    if value < _NS_THRESHOLD:
        return int(value // 1000)
    return int(value // 1_000_000)


def now_ms() -> int:
    """Return the current time in integer milliseconds since the epoch."""
    return time.time_ns() // 1_000_000
