import asyncio

from corral_api.sandboxes.service import reached
from corral_api.sandboxes.waiters import StateWaiters
from corral_common.contracts.events import SandboxStateChanged
from corral_common.contracts.sandboxes import SandboxState as S


def test_reached_follows_lifecycle_order():
    assert not reached(S.scheduled, S.running)
    assert reached(S.running, S.running)
    assert reached(S.stopping, S.running)
    assert not reached(S.running, S.terminated)
    # A failure ends every wait; a paused sandbox has run.
    assert reached(S.failed, S.running) and reached(S.failed, S.terminated)
    assert reached(S.paused, S.running) and not reached(S.paused, S.terminated)


async def test_waiter_wakes_only_on_a_state_that_ends_its_wait():
    waiters = StateWaiters()
    waiter = waiters.register("sb-1", lambda state: reached(state, S.running))
    other = waiters.register("sb-2")
    for state in (S.scheduled, S.starting):
        await waiters.on_event(SandboxStateChanged(sandbox_id="sb-1", tenant="t", state=state))
    assert not waiter.is_set() and not other.is_set()
    await waiters.on_event(SandboxStateChanged(sandbox_id="sb-1", tenant="t", state=S.running))
    await asyncio.wait_for(waiter.wait(), 1)
    waiters.unregister("sb-1", waiter)
    waiters.unregister("sb-2", other)
    assert waiters._events == {}
