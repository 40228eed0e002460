"""Lets a request block until a sandbox reaches a state, woken by ``sandbox.*`` events."""

import asyncio
from collections import defaultdict
from collections.abc import Callable

from corral_common.contracts.events import SandboxStateChanged
from corral_common.contracts.sandboxes import SandboxState


class _Waiter(asyncio.Event):
    def __init__(self, wakes_on: Callable[[SandboxState], bool]):
        super().__init__()
        self.wakes_on = wakes_on


class StateWaiters:
    def __init__(self) -> None:
        self._events: dict[str, set[_Waiter]] = defaultdict(set)

    def register(self, sandbox_id: str, wakes_on: Callable[[SandboxState], bool] = lambda _: True) -> asyncio.Event:
        """An event set when a state for which ``wakes_on`` is true is announced (intermediate
        states do not wake a caller waiting for a later one)."""
        event = _Waiter(wakes_on)
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
            if waiter.wakes_on(event.state):
                waiter.set()
