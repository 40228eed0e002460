"""Bringing a launched QEMU to a VM that answers: restore its saved state, wait for its guest
agent (or its death, whichever comes first), learn how its layers were mapped, and for a VM
with a screen, wait until its console shell reads keys."""

import asyncio
import time
from collections.abc import Awaitable, Callable

from corral_common.contracts.exec import ExecRequest
from corral_common.logging import get_logger
from corral_node_agent.backends.types import ImageTransport
from corral_node_agent.backends.vm.agent_client import GuestAgentClient
from corral_node_agent.backends.vm.running import RunningVm
from corral_node_agent.errors import StartFailed

log = get_logger(__name__)

ConnectAgent = Callable[[RunningVm, float], Awaitable[GuestAgentClient]]

# The guest agent starts `sh -i` on tty1; until it reads its terminal, typed keys are lost.
CONSOLE_SHELL_STATE = (
    "for p in /proc/[0-9]*; do [ \"$(tr '\\0' ' ' < $p/cmdline 2>/dev/null)\" = 'sh -i ' ] && "
    "cat $p/wchan && echo; done")


async def boot(vm: RunningVm, connect: ConnectAgent, *, state_file: str, timeout_s: float) -> None:
    """Launch the VM's QEMU (restoring ``state_file`` when its config is incoming) and wait
    for its agent; StartFailed when QEMU ends first."""
    await vm.machine.launch()
    if vm.config.incoming:
        await vm.machine.load_state(state_file)
        await vm.machine.resume()
    if vm.config.agent_socket:
        connecting = asyncio.ensure_future(connect(vm, timeout_s))
        died = asyncio.ensure_future(vm.machine.wait())
        done, _ = await asyncio.wait({connecting, died}, return_when=asyncio.FIRST_COMPLETED)
        if connecting not in done:
            connecting.cancel()
            raise StartFailed(f"the VM stopped while booting (qemu exit {died.result()})"
                              f"{console_hint(vm.machine.console_text())}")
        died.cancel()
        agent = vm.agent = connecting.result()
        if vm.transport is ImageTransport.virtio_pmem_dax:
            vm.transport = await pmem_mode(agent)
        if vm.config.display and not vm.config.incoming:
            await wait_for_console_shell(vm.sandbox_id, agent, timeout_s)


def console_hint(console: str) -> str:
    """The guest init's error line, else the console's last words, for a start that failed."""
    for line in console.splitlines():
        if "CORRAL-INIT-ERROR" in line:
            return f" ({line.strip()})"
    tail = console.strip().splitlines()[-3:]
    return f" (console: {' | '.join(tail)})" if tail else ""


async def wait_for_console_shell(sandbox_id: str, agent: GuestAgentClient, timeout_s: float) -> None:
    """Report a display VM running only once its console shell waits for keys (ash polls its tty),
    so input sent right after creation reaches it."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        res = await agent.exec(ExecRequest(cmd=CONSOLE_SHELL_STATE, user="root", timeout_s=10))
        if any(w in res.stdout for w in ("do_sys_poll", "n_tty_read", "wait_woken")):
            return
        await asyncio.sleep(0.05)
    log.warning("vm.console_shell_not_ready", sandbox_id=sandbox_id)


async def pmem_mode(agent: GuestAgentClient) -> ImageTransport:
    """What the guest's init managed: DAX, or pmem without DAX (it falls back, and says
    so in /.corral/layers: "<index> <device> dax|pmem|blk" per layer)."""
    try:
        status = (await agent.read_file("/.corral/layers")).decode()
    except Exception:  # noqa: BLE001 - an unreadable status file means the guest fell back: report plain pmem
        return ImageTransport.virtio_pmem
    modes = {line.split()[2] for line in status.splitlines() if len(line.split()) == 3}
    return ImageTransport.virtio_pmem_dax if modes == {"dax"} else ImageTransport.virtio_pmem
