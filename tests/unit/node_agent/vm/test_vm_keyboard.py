"""Key pacing for the PS/2 queue (backends/vm/keyboard.py): pure logic against a model of the
device that drops what does not fit, as QEMU's does."""

from corral_common.contracts.display import KeyPress, TypeText
from corral_node_agent.backends.vm import keyboard
from corral_node_agent.backends.vm.input import to_qmp

INTERRUPTS = """           CPU0       CPU1
  0:         40          0   IO-APIC   2-edge      timer
  1:        117          9   IO-APIC   1-edge      i8042
 12:          3          0   IO-APIC  12-edge      i8042
"""


class Ps2Model:
    """QEMU's PS/2 keyboard queue (16 bytes, a byte that does not fit is dropped) and a guest
    that reads only when the host lets it run (`run`)."""

    def __init__(self):
        self.queue: list[tuple] = []
        self.read: list[tuple] = []
        self.dropped = 0
        self.irqs = 0

    async def send(self, batch):
        for event in batch:
            for i in range(keyboard.scancode_bytes(event)):
                if len(self.queue) >= 16:
                    self.dropped += 1
                else:
                    self.queue.append((repr(event), i))

    def run(self):
        self.irqs += len(self.queue)
        self.read += self.queue
        self.queue = []

    async def irq_count(self):
        self.run()  # the agent's round trip needs the guest's vCPU: pending bytes get read
        return self.irqs


def test_the_keyboard_line_of_proc_interrupts_is_summed_over_cpus():
    assert keyboard.parse_keyboard_irqs(INTERRUPTS) == 126
    assert keyboard.parse_keyboard_irqs("  0: 1 IO-APIC timer\n") is None


def test_groups_fit_the_queue_and_keep_a_chord_whole():
    batches = to_qmp([TypeText(text="touch /tmp/typed-on-screen"), KeyPress(keys=["ctrl", "alt", "delete"])], (0, 0))
    grouped = keyboard.groups(batches)
    assert [b for g in grouped for b in g] == batches
    for group in grouped:
        assert sum(keyboard.scancode_bytes(e) for b in group for e in b) <= keyboard.GROUP_BYTES
    assert keyboard.scancode_bytes({"type": "abs", "data": {"axis": "x", "value": 1}}) == 0


async def test_a_guest_that_does_not_run_between_qmp_calls_loses_no_key():
    device = Ps2Model()
    batches = to_qmp([TypeText(text="echo abcdefghijklmnopqrstuvwxyz0123456789 > /tmp/t")], (0, 0))
    await keyboard.send_paced(device.send, batches, device.irq_count)
    device.run()
    assert device.dropped == 0
    assert len(device.read) == sum(keyboard.scancode_bytes(e) for b in batches for e in b)

    unpaced = Ps2Model()
    for batch in batches:  # what sending without pacing does to the same guest
        await unpaced.send(batch)
    assert unpaced.dropped > 0
