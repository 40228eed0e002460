"""Proactive reclaim on real crun containers and cgroups: an idle (or paused) sandbox's cold
memory moves to zram, nothing else about it changes, it answers exec afterwards, and the
memory-manager restarting changes nothing for it."""

import asyncio
import time
import uuid

import pytest
from fastapi.testclient import TestClient

from corral_common.contracts.exec import ExecRequest
from corral_common.contracts.sandboxes import SandboxSpec
from corral_memory_manager.app import create_app
from corral_memory_manager.reclaim.policy import ReclaimPolicy
from corral_memory_manager.reclaim.service import ReclaimService
from corral_memory_manager.settings import MemoryManagerSettings
from corral_node_agent.backends.types import RootFs
from tests.polling import until

pytestmark = pytest.mark.asyncio

MIB = 1 << 20
HOLD_MIB = 120
# busybox awk builds a HOLD_MIB string (every page written) and then sits in system() forever.
HOLDER = (f"awk 'BEGIN {{ s = sprintf(\"%{HOLD_MIB * MIB}s\", \"\"); system(\"sleep 100000\") }}' "
          ">/dev/null 2>&1 &")


async def exec_ms(backend, sid: str, cmd: list[str]) -> float:
    started = time.perf_counter()
    result = await backend.exec(sid, ExecRequest(cmd=cmd, timeout_s=20))
    assert result.exit_code == 0, result
    return (time.perf_counter() - started) * 1000


async def holding_sandbox(backend, base_layer) -> str:
    sid = "mr-" + uuid.uuid4().hex[:10]
    await backend.start(sid, SandboxSpec(environment="busybox", memory_mb=256, disk_mb=64, pids_limit=64),
                        RootFs([base_layer]))
    await exec_ms(backend, sid, ["sh", "-c", HOLDER])
    cg = backend._get(sid).cgroup
    await until(lambda: cg.memory_reading().working_set_bytes > HOLD_MIB * MIB, 60, "the holder's memory")
    return sid


def cgroup_settings(cg) -> dict[str, str]:
    files = ("memory.limit_in_bytes", "memory.memsw.limit_in_bytes", "memory.swappiness", "memory.soft_limit_in_bytes")
    out = {f: (cg.dirs["memory"] / f).read_text() for f in files if (cg.dirs["memory"] / f).exists()}
    out["freezer"] = (cg.dirs["freezer"] / "freezer.state").read_text() if "freezer" in cg.dirs else ""
    return out


def survivors(cg, before: set[int]) -> bool:
    """Every process that ran before still runs (execs may have added short-lived ones)."""
    return before <= set(cg.pids())


async def reclaim_when_idle(service: ReclaimService, sid: str):
    async def reclaimed():
        report = await asyncio.to_thread(service.run_once)
        return next((r for r in report.reclaimed if r.sandbox_id == sid), None)
    return await until(reclaimed, 60, "the sandbox to be idle and reclaimed", interval_s=0.2)


async def test_an_idle_containers_memory_moves_to_zram_and_it_still_answers(backend, base_layer, node_id,
                                                                           zram_swap):
    sid = await holding_sandbox(backend, base_layer)
    cg = backend._get(sid).cgroup
    before_ms = [await exec_ms(backend, sid, ["true"]) for _ in range(5)]
    settings_before, procs_before = cgroup_settings(cg), set(cg.pids())
    service = ReclaimService(node_id, ReclaimPolicy(idle_after_s=1.0))
    record = await reclaim_when_idle(service, sid)
    assert record.reason == "idle"
    reading = cg.memory_reading()
    print(f"reclaim: {record.before_bytes / MIB:.0f} -> {record.after_bytes / MIB:.0f} MiB in "
          f"{record.seconds * 1000:.0f} ms, swap {reading.swap_bytes / MIB:.0f} MiB")
    assert record.before_bytes - record.after_bytes > (HOLD_MIB - 20) * MIB
    assert reading.swap_bytes > (HOLD_MIB - 20) * MIB  # in zram, not dropped
    assert cgroup_settings(cg) == settings_before  # no limit squeezed, nothing left to undo
    assert survivors(cg, procs_before)
    after_ms = [await exec_ms(backend, sid, ["true"]) for _ in range(5)]
    # The holder itself pulls its pages back when it touches them: nothing died.
    await exec_ms(backend, sid, ["sh", "-c", "ps | grep -q '[a]wk'"])
    assert cg.oom_kills() == 0
    print(f"exec ms before {sorted(before_ms)} after {sorted(after_ms)}")
    # An active sandbox next to it: the same pass leaves it alone.
    assert not any(r.sandbox_id == sid for r in service.run_once().reclaimed)  # hysteresis: not again


async def test_a_paused_sandbox_is_reclaimed_first_and_resumes(backend, base_layer, node_id, zram_swap):
    idle = await holding_sandbox(backend, base_layer)
    paused = await holding_sandbox(backend, base_layer)
    await backend.pause(paused)
    service = ReclaimService(node_id, ReclaimPolicy(idle_after_s=3600.0, max_bytes_per_pass=1 << 40))
    report = await asyncio.to_thread(service.run_once)
    assert [r.sandbox_id for r in report.reclaimed if r.sandbox_id in (idle, paused)] == [paused]
    assert report.reclaimed[0].reason == "paused"
    await backend.resume(paused)
    await exec_ms(backend, paused, ["sh", "-c", "ps | grep -q '[a]wk'"])


async def test_the_manager_restarting_changes_nothing_for_running_sandboxes(backend, base_layer, node_id,
                                                                          zram_swap):
    sid = await holding_sandbox(backend, base_layer)
    cg = backend._get(sid).cgroup
    procs = set(cg.pids())
    settings = MemoryManagerSettings(node_id=node_id, internal_token="", log_json=False, reclaim_enabled=True,
                                     reclaim_interval_s=0.2, reclaim_idle_after_s=1.0)

    with TestClient(create_app(settings)) as client:
        async def reclaimed():
            body = (await asyncio.to_thread(client.get, "/v1/reclaim")).json()
            return [r for r in body["recent"] if r["sandbox_id"] == sid]
        await until(reclaimed, 60, "the running manager to reclaim the idle sandbox", interval_s=0.2)
        state = cgroup_settings(cg)
    # Stopped: nothing of the sandbox changed, it keeps running.
    assert cgroup_settings(cg) == state and survivors(cg, procs)
    await exec_ms(backend, sid, ["true"])
    with TestClient(create_app(settings)) as client:
        body = client.post("/v1/reclaim/run").json()  # a fresh run watches before it acts
        assert not [r for r in body["recent"] if r["sandbox_id"] == sid]
        assert cgroup_settings(cg) == state and survivors(cg, procs)
    await exec_ms(backend, sid, ["sh", "-c", "ps | grep -q '[a]wk'"])
    assert cg.oom_kills() == 0
