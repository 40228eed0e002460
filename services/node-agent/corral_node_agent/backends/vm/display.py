"""A q35 VM's screen and input: screenshots through QMP screendump, keys and pointer events
through QMP input-send-event, paced by what the guest reports it read (keyboard.py)."""

import contextlib
import os
import struct

from qemu.qmp import ExecuteError

from corral_common.contracts.display import InputEvent
from corral_node_agent.backends.vm import keyboard
from corral_node_agent.backends.vm.input import to_qmp
from corral_node_agent.backends.vm.running import RunningVm
from corral_node_agent.errors import BadInput

SCREEN_FILE = "screen.png"


def png_size(data: bytes) -> tuple[int, int]:
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        return (0, 0)
    return struct.unpack(">II", data[16:24])


async def screenshot(vm: RunningVm) -> bytes:
    """A PNG of the screen now; remembers its size (pointer positions are scaled to it)."""
    path = os.path.join(vm.directory, SCREEN_FILE)
    try:
        await vm.machine.screendump(path)
        with open(path, "rb") as fh:  # noqa: ASYNC230 - a small local file
            data = fh.read()
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
    vm.screen = png_size(data)
    return data


async def send_input(vm: RunningVm, events: list[InputEvent]) -> None:
    if vm.screen == (0, 0) and any(getattr(e, "x", None) is not None for e in events):
        await screenshot(vm)  # learn the resolution to scale pointer positions
    try:
        await keyboard.send_paced(vm.machine.send_input, to_qmp(events, vm.screen), keyboard_irqs(vm))
    except ExecuteError as exc:  # QEMU refuses what it cannot map (an unknown key name)
        raise BadInput(f"input refused: {exc}", loc=["body", "events"]) from exc


def keyboard_irqs(vm: RunningVm) -> keyboard.KeyboardIrqs | None:
    """How the guest tells us it read the keys (see keyboard.py); None without our agent."""
    if vm.agent is None or not vm.agent.connected:
        return None
    agent = vm.agent

    async def count() -> int | None:
        try:
            return keyboard.parse_keyboard_irqs((await agent.read_file("/proc/interrupts")).decode())
        except Exception:  # noqa: BLE001 - the guest cannot say: pace by time from here on
            return None
    return count
