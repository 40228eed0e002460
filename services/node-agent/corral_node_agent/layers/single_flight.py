"""One run of a piece of work per key, however many callers want it at once.

Downloads, lazy-layer preparation and DAX builds are each asked for by every sandbox that
starts on the same layer, often in the same instant: the first caller starts the work,
the others wait for its outcome (result or exception), and the key is free again once it
ends, so a failed attempt is retried by the next caller.
"""

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

T = TypeVar("T")


class SingleFlight:
    def __init__(self) -> None:
        self._running: dict[str, asyncio.Future[Any]] = {}

    def __contains__(self, key: str) -> bool:
        return key in self._running

    def keys(self) -> set[str]:
        return set(self._running)

    async def run(self, key: str, work: Callable[[], Awaitable[T]]) -> T:
        fut = self._running.get(key)
        if fut is None:
            fut = asyncio.ensure_future(work())
            self._running[key] = fut
            fut.add_done_callback(lambda _f: self._running.pop(key, None))
        # shield: one waiter being cancelled must not cancel the work for the others.
        return await asyncio.shield(fut)
