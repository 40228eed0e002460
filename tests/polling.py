"""Waiting for a condition in tests: poll it with a deadline (never sleep a fixed time)."""

import asyncio
import os
import select
import time
from collections.abc import Callable


async def until(predicate, timeout_s: float = 60.0, what: str = "condition", interval_s: float = 0.05):
    """Return predicate()'s first truthy value (predicate may be async); fail after timeout_s."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if asyncio.iscoroutine(value):
            value = await value
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        await asyncio.sleep(interval_s)


def until_sync(predicate: Callable[[], object], timeout_s: float = 60.0, what: str = "condition",
               interval_s: float = 0.05):
    """``until`` for synchronous tests (the e2e ones drive the platform through the blocking SDK)."""
    deadline = time.monotonic() + timeout_s
    while True:
        if value := predicate():
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(interval_s)


def exited(pid: int, timeout_s: float = 10.0) -> bool:
    """Whether process ``pid`` is gone within ``timeout_s`` (waits on its pidfd, no polling)."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return True
    try:
        return bool(select.select([fd], [], [], timeout_s)[0])
    finally:
        os.close(fd)
