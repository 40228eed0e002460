"""When each sandbox was last used through the data path (exec, files, ports).

The memory-manager judges idleness by cpu rate, and a VM's QEMU ticks even with nothing running
in the guest (TCG timers, the balloon's stats polling), so "no exec running and none for a
while" is the stronger signal for VMs. The node-agent is where every exec passes; the numbers
are served internally as ``GET /v1/activity``. Housekeeping calls (the memory-manager's own
in-guest cache drop) are not counted: they would make an idle sandbox look used.
"""

import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from corral_common.contracts.memory import SandboxActivity


@dataclass
class _Use:
    in_flight: int = 0
    last_end: float = 0.0  # monotonic


class ActivityTracker:
    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._uses: dict[str, _Use] = {}

    @contextmanager
    def call(self, sandbox_id: str, counted: bool = True) -> Iterator[None]:
        if not counted:
            yield
            return
        use = self._uses.setdefault(sandbox_id, _Use(last_end=self.clock()))
        use.in_flight += 1
        try:
            yield
        finally:
            use.in_flight -= 1
            use.last_end = self.clock()

    async def stream(self, sandbox_id: str, chunks: AsyncIterator, counted: bool = True) -> AsyncIterator:
        """``chunks``, counted as one call while it is being read."""
        try:
            with self.call(sandbox_id, counted):
                async for chunk in chunks:
                    yield chunk
        finally:
            aclose = getattr(chunks, "aclose", None)
            if aclose is not None:
                await aclose()

    def in_flight(self) -> int:
        """Data-path calls running now on the node, every sandbox's together."""
        return sum(use.in_flight for use in self._uses.values())

    def snapshot(self, kinds: dict[str, str]) -> list[SandboxActivity]:
        """One entry per sandbox in ``kinds`` (id → backend kind). A sandbox never used counts
        idle from when this tracker first saw it (its start, or the agent's restart): never
        longer than it knows. Sandboxes gone from ``kinds`` are forgotten."""
        now = self.clock()
        for gone in [s for s, use in self._uses.items() if s not in kinds and not use.in_flight]:
            del self._uses[gone]
        out = []
        for sandbox_id, kind in kinds.items():
            use = self._uses.setdefault(sandbox_id, _Use(last_end=now))
            in_flight = use.in_flight
            idle = 0.0 if in_flight else max(0.0, now - use.last_end)
            out.append(SandboxActivity(sandbox_id=sandbox_id, kind=kind, calls_in_flight=in_flight, idle_s=idle))
        return out
