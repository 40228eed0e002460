"""Reclaim of a running VM on real QEMU (TCG): its QEMU's cpu time never stands still, yet with
nothing running in the guest the idle rule (cpu rate under the VM threshold, no exec in flight
or recent, idleness.py) counts it idle. Its guest RAM then goes to zram, QEMU's code stays, and
an exec still answers. While an exec runs it is never a candidate."""

import asyncio
import shutil
import time
import uuid

import pytest

from corral_common.contracts.exec import ExecRequest
from corral_common.contracts.sandboxes import SandboxSpec
from corral_memory_manager.reclaim.idleness import IdleRule
from corral_memory_manager.reclaim.policy import ReclaimPolicy
from corral_memory_manager.reclaim.service import ReclaimService
from corral_node_agent.backends.types import RootFs
from corral_node_agent.sandboxes.activity import ActivityTracker
from corral_node_agent.settings import NodeAgentSettings
from tests.polling import until

pytestmark = [pytest.mark.asyncio, pytest.mark.xdist_group("vm")]

if shutil.which("qemu-system-x86_64") is None:
    pytest.skip("VM tests need qemu-system-x86_64 (apt install qemu-system-x86)", allow_module_level=True)

MIB = 1 << 20
FILL_MB = 96


async def test_a_running_vm_with_nothing_to_do_is_idle_and_its_memory_goes_to_zram(work_dir, guestkit_dir, layers,
                                                                                  zram_swap):
    from corral_node_agent.backends.vm.backend import MicroVmBackend

    settings = NodeAgentSettings(node_id=f"mrvm-{uuid.uuid4().hex[:6]}", guestkit_dir=guestkit_dir,
                                 state_dir=f"{work_dir}/mr-vm-state-{uuid.uuid4().hex[:6]}")
    backend = MicroVmBackend(settings)
    sid = "vm-" + uuid.uuid4().hex[:8]
    activity = ActivityTracker()

    async def run(cmd: str, timeout_s: float = 120):
        with activity.call(sid):  # as the node-agent's exec route counts it
            res = await backend.exec(sid, ExecRequest(cmd=cmd, user="root", timeout_s=timeout_s))
        assert res.exit_code == 0, res
        return res

    await backend.start(sid, SandboxSpec(environment="busybox", backend="microvm", memory_mb=256, timeout_s=900),
                        RootFs([layers["blk"]]))
    service = ReclaimService(settings.node_id, ReclaimPolicy(idle_after_s=3.0, min_bytes=8 * MIB),
                             idle_rule=IdleRule(), activity=lambda: activity.snapshot({sid: "microvm"}))
    try:
        await run(f"mkdir -p /mnt/m && mount -t tmpfs -o size=200m none /mnt/m && "
                  f"dd if=/dev/urandom of=/mnt/m/fill bs=1M count={FILL_MB} 2>/dev/null")
        cg = service._cgroup(sid)
        cpu_before = cg.cpu_ms()
        resident_started = time.perf_counter()
        await run("cat /mnt/m/fill | wc -c")
        resident_ms = (time.perf_counter() - resident_started) * 1000

        # An exec in flight: never a candidate, however long the pass waits.
        slow = asyncio.create_task(run("sleep 6"))
        await until(lambda: activity.snapshot({sid: "microvm"})[0].calls_in_flight == 1, 10, "the exec to start")
        for _ in range(5):
            report = await asyncio.to_thread(service.run_once)
            assert not report.reclaimed
            await asyncio.sleep(1.0)
        await slow

        async def reclaimed():
            report = await asyncio.to_thread(service.run_once)
            return next((r for r in report.reclaimed if r.sandbox_id == sid), None)
        started = time.monotonic()
        record = await until(reclaimed, 90, "the idle VM to be reclaimed", interval_s=1.0)
        # The old rule (cpu time must not move at all) could never have chosen it.
        assert cg.cpu_ms() > cpu_before
        print(f"running VM idle after {time.monotonic() - started:.1f} s; QEMU working set "
              f"{record.before_bytes / MIB:.0f} -> {record.after_bytes / MIB:.0f} MiB in {record.seconds:.2f} s")
        assert record.reason == "idle" and record.before_bytes - record.after_bytes > FILL_MB * MIB * 0.5

        true_started = time.perf_counter()
        await run("true")  # the first exec after the pageout: what an agent's next step pays
        true_ms = (time.perf_counter() - true_started) * 1000
        exec_started = time.perf_counter()
        res = await run("cat /mnt/m/fill | wc -c")  # touches every reclaimed page of the fill
        print(f"exec reading the {FILL_MB} MiB: {resident_ms:.0f} ms resident, "
              f"{(time.perf_counter() - exec_started) * 1000:.0f} ms back from zram; "
              f"first exec after the pageout ('true') {true_ms:.0f} ms")
        assert res.stdout.strip() == str(FILL_MB * MIB)
    finally:
        await backend.stop(sid)
        await backend.close()
