"""KSM policy on real QEMU (TCG): two microVMs of one environment turn the host's scanner on,
it merges their identical pages (QEMU marks guest RAM mergeable by default), and the policy
turns it off again with the scan rate it found. Host-wide knob: skipped when the host already
runs KSM (then it is the host's, and the policy must not touch it)."""

import asyncio
import shutil
import time
import uuid
from pathlib import Path

import pytest

from corral_common.contracts.sandboxes import SandboxSpec
from corral_memory_manager.balloons.ksm import KsmPolicy
from corral_memory_manager.host.service import HostMemoryService
from corral_node_agent.backends.types import RootFs
from corral_node_agent.settings import NodeAgentSettings
from tests.polling import until

pytestmark = [pytest.mark.asyncio, pytest.mark.xdist_group("vm")]

KSM = Path("/sys/kernel/mm/ksm")
if shutil.which("qemu-system-x86_64") is None or not KSM.is_dir():
    pytest.skip("needs qemu-system-x86_64 and /sys/kernel/mm/ksm", allow_module_level=True)


def _knob(name: str) -> int:
    return int((KSM / name).read_text())


async def test_two_vms_of_one_image_turn_ksm_on_and_it_merges(work_dir, guestkit_dir, layers):
    from corral_node_agent.backends.vm.backend import MicroVmBackend

    if _knob("run") != 0:
        pytest.skip("the host already runs KSM: the policy leaves it alone")
    found_rate = _knob("pages_to_scan")
    backend = MicroVmBackend(NodeAgentSettings(node_id=f"mmksm-{uuid.uuid4().hex[:6]}", guestkit_dir=guestkit_dir,
                                               state_dir=f"{work_dir}/mm-ksm-{uuid.uuid4().hex[:6]}"))
    ids = [f"vm-{uuid.uuid4().hex[:8]}" for _ in range(2)]
    policy = KsmPolicy(HostMemoryService("n1"), min_same_image=2, pages_to_scan=2000)
    try:
        await asyncio.gather(*(backend.start(sid, SandboxSpec(environment="busybox", backend="microvm",
                                                               memory_mb=256), RootFs([layers["blk"]]))
                               for sid in ids))
        states = [await backend.balloon(sid) for sid in ids]
        assert policy.apply([s.environment for s in states]) is True
        assert _knob("run") == 1
        started = time.monotonic()
        await until(lambda: _knob("pages_sharing") * 4096 > 32 << 20, 120, "KSM to merge 32 MiB", interval_s=1)
        await asyncio.sleep(5)  # a few more scans: the number reported is a moment of an ongoing merge
        saved_mb = _knob("pages_sharing") * 4096 / (1 << 20)
        print(f"KSM: {saved_mb:.0f} MiB shared by two idle 256 MiB microVMs, first 32 MiB after "
              f"{time.monotonic() - started:.0f} s")
        assert policy.apply([states[0].environment]) is False  # one left: not "many of one image"
        assert _knob("run") == 0 and _knob("pages_to_scan") == found_rate
    finally:
        if policy.started_by_us:
            policy.apply([])
        for sid in ids:
            await backend.stop(sid)
        await backend.close()
