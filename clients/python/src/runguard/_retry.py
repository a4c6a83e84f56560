"""When to retry and how long to wait: pure functions, no I/O, testable without a clock."""

from __future__ import annotations

import random as _random
import re
import time
from email.utils import parsedate_to_datetime
from typing import Callable, Mapping, Optional

INITIAL_RETRY_DELAY = 0.5
MAX_RETRY_DELAY = 8.0
MAX_RETRY_AFTER = 60.0
"""A daemon asking for a longer pause than this (seconds) is not worth stalling an agent for."""

_SECONDS = re.compile(r"\d+(\.\d+)?")


def is_retryable_status(status: int) -> bool:
    """Whether an HTTP answer is worth another attempt.

    Other 4xx are the caller's mistake (or a state conflict) and would fail the same way again.
    """
    # Request timeout: the daemon gave up waiting for us; a new attempt may be faster.
    if status == 408:
        return True
    # Rate limited: wait as told and try again.
    if status == 429:
        return True
    # Server failures and unavailable dependencies are usually transient.
    return status >= 500


def parse_retry_after(headers: Optional[Mapping[str, str]], now: Optional[float] = None) -> Optional[float]:
    """Seconds the daemon asked us to wait: ``retry-after-ms`` (precise), else ``Retry-After`` as
    delta-seconds or an HTTP date; capped at :data:`MAX_RETRY_AFTER`. None when absent or unreadable.
    """
    if not headers:
        return None
    lowered = {key.lower(): value for key, value in headers.items()}
    in_ms = lowered.get("retry-after-ms", "").strip()
    if in_ms:
        try:
            ms = float(in_ms)
        except ValueError:
            ms = -1.0
        if ms >= 0 and ms != float("inf"):
            return min(ms / 1000, MAX_RETRY_AFTER)
    value = lowered.get("retry-after", "").strip()
    if not value:
        return None
    if _SECONDS.fullmatch(value):
        return min(float(value), MAX_RETRY_AFTER)
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when is None or when.tzinfo is None:
        return None
    current = time.time() if now is None else now
    # A date in the past means "now".
    return min(max(when.timestamp() - current, 0.0), MAX_RETRY_AFTER)


def backoff_delay(retry_index: int, random: Callable[[], float] = _random.random) -> float:
    """Exponential backoff: 0.5 s, 1 s, 2 s ... capped at 8 s, minus up to 25 % jitter so that many
    clients failing together do not come back in lockstep. ``retry_index`` is 0 for the first retry.
    """
    base = min(INITIAL_RETRY_DELAY * 2.0**retry_index, MAX_RETRY_DELAY)
    return base * (1 - random() * 0.25)


def retry_delay(
    retry_index: int,
    headers: Optional[Mapping[str, str]],
    random: Callable[[], float] = _random.random,
) -> float:
    """The pause before retry number ``retry_index``: the daemon's ``Retry-After`` when given, else backoff."""
    asked = parse_retry_after(headers)
    return asked if asked is not None else backoff_delay(retry_index, random)
