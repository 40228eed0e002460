"""Lets a request block until a sandbox reaches a state, woken by ``sandbox.*`` events."""

import asyncio
from collections import defaultdict

from corral_common.events import SandboxStateChanged


class StateWaiters:
    def __init__(self) -> None:
        self._events: dict[str, set[asyncio.Event]] = defaultdict(set)

    def register(self, sandbox_id: str) -> asyncio.Event:
        event = asyncio.Event()
        self._events[sandbox_id].add(event)
        return event

    def unregister(self, sandbox_id: str, event: asyncio.Event) -> None:
        waiters = self._events.get(sandbox_id)
        if waiters is not None:
            waiters.discard(event)
            if not waiters:
                del self._events[sandbox_id]

    async def on_event(self, event: SandboxStateChanged) -> None:
        for waiter in self._events.get(event.sandbox_id, ()):
            waiter.set()
