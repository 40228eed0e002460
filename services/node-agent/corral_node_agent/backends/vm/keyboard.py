"""Typing into a VM without losing keys.

The q35 machine's keyboard is QEMU's PS/2 device, whose queue holds 16 bytes: a scancode
that arrives while it is full is dropped, silently. QMP's `input-send-event` returns as soon
as QEMU queued the event, not when the guest read it, so a burst of keys (one `type_text` of
a shell command is ~60 scancode bytes) outruns a guest whose vCPU is not running at that
moment — TCG on a loaded host — and the command arrives with holes.

So keys go in groups that fit the queue, and before the next group the guest must have read
the last one. Our guest kit says so itself: every scancode byte is one keyboard interrupt
(i8042 raises IRQ 1 per byte), counted in the guest's /proc/interrupts. A group is read once
the count has grown by at least its events (each is ≥ 1 byte) and then holds still across a
round trip to the guest agent (which needs the same vCPUs: had a byte been waiting, its
interrupt would have been taken). A VM without our agent (a booted disk image) cannot tell
us; its keys are paced by time instead — best effort, said in docs/vm.md.
"""

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

from corral_common.logging import get_logger

log = get_logger(__name__)

# QEMU's PS2_QUEUE_SIZE is 16; leave room for the E0 prefixes we count conservatively.
GROUP_BYTES = 12
# Keys that are one byte per event in scancode set 1 (what the i8042 translates to).
_ONE_BYTE = frozenset(
    "abcdefghijklmnopqrstuvwxyz0123456789"
) | {"spc", "ret", "tab", "minus", "equal", "bracket_left", "bracket_right", "backslash", "semicolon",
     "apostrophe", "grave_accent", "comma", "dot", "slash", "shift", "shift_r", "ctrl", "alt", "esc",
     "backspace", "caps_lock", *(f"f{i}" for i in range(1, 13))}
# Print screen and pause are the long sequences (4 and 6 bytes per press).
_LONG = {"print": 4, "sysrq": 4, "pause": 6}
TIME_PACE_S = 0.01  # per group, for guests that cannot report what they read
DRAIN_TIMEOUT_S = 10.0


def scancode_bytes(event: dict[str, Any]) -> int:
    """Most bytes one QMP event puts in the PS/2 queue (0 for pointer events: virtio-tablet)."""
    if event.get("type") != "key":
        return 0
    key = event["data"]["key"]
    name = key.get("data") if key.get("type") == "qcode" else None
    if name in _ONE_BYTE:
        return 1
    return _LONG.get(name, 2)


def groups(batches: list[list[dict[str, Any]]]) -> list[list[list[dict[str, Any]]]]:
    """Consecutive batches whose scancodes fit the queue together (a batch larger than the
    queue stays whole: a chord must arrive together)."""
    out: list[list[list[dict[str, Any]]]] = []
    size = GROUP_BYTES + 1
    for batch in batches:
        n = sum(scancode_bytes(e) for e in batch)
        if out and size + n <= GROUP_BYTES:
            out[-1].append(batch)
            size += n
        else:
            out.append([batch])
            size = n
    return out


KeyboardIrqs = Callable[[], Awaitable[int | None]]


def parse_keyboard_irqs(interrupts: str) -> int | None:
    """The i8042 keyboard line of /proc/interrupts, summed over CPUs."""
    for line in interrupts.splitlines():
        fields = line.split()
        if fields and fields[0] == "1:" and "i8042" in fields:
            return sum(int(f) for f in fields[1:] if f.isdigit())
    return None


async def send_paced(send: Callable[[list[dict[str, Any]]], Awaitable[None]],
                     batches: list[list[dict[str, Any]]], keyboard_irqs: KeyboardIrqs | None) -> None:
    """Send every batch, never more unread scancodes than the PS/2 queue holds."""
    for group in groups(batches):
        events = sum(1 for batch in group for e in batch if e.get("type") == "key")
        before = await keyboard_irqs() if keyboard_irqs is not None and events else None
        for batch in group:
            await send(batch)
        if before is None:
            if events:
                await asyncio.sleep(TIME_PACE_S)
            continue
        await _drained(keyboard_irqs, before + events)


async def _drained(keyboard_irqs: KeyboardIrqs, at_least: int) -> None:
    deadline = time.monotonic() + DRAIN_TIMEOUT_S
    last = None
    while time.monotonic() < deadline:
        count = await keyboard_irqs()
        if count is None:
            return
        if count >= at_least and count == last:
            return
        last = count
    log.warning("vm.keyboard_not_drained", expected_irqs=at_least, seen=last)
