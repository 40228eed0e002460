"""The sandbox-kind plumbing through the SDK, on containers: what a container cannot do is a
409 JSON error from its node, pause/resume are unchanged, snapshots are tenant-scoped records
and a restore goes to the snapshot's node. (Real microvm/vm sandboxes: the `vm_platform`
fixture.)"""

import asyncio
from datetime import UTC, datetime

import httpx
import pytest
from sqlmodel import Session, create_engine

from corral import AsyncCorral, Corral, CorralError, SandboxFailed
from corral_api.snapshots.models import SnapshotRow
from corral_common.contracts.sandboxes import SandboxSpec
from tests.e2e.conftest import OTHER_TENANT_KEY
from tests.live_platform import internal_headers


def test_a_container_has_no_screen_nor_snapshot_and_still_pauses(platform, corral):
    with corral.sandboxes.create("busybox", memory_mb=64) as sb:
        info = sb.info
        assert (info.backend, info.isolation, info.display) == ("container", "container", False)
        assert info.runtime.to_dict() == {"backend": "container"}  # resolved kind, recorded by the node
        for call in (sb.screenshot, sb.snapshot, lambda: sb.type_text("hi"), lambda: sb.click(10, 10)):
            with pytest.raises(CorralError) as exc:
                call()
            assert exc.value.status == 409 and exc.value.code == "unsupported_by_backend", exc.value
        raw = httpx.get(f"{platform['api']}/v1/sandboxes/{sb.id}/screen",
                        headers={"authorization": f"Bearer {platform['api_key']}"})
        assert raw.status_code == 409 and raw.headers["content-type"] == "application/json"
        assert raw.json()["error"]["code"] == "unsupported_by_backend"
        assert corral.snapshots.list(sandbox_id=sb.id) == []

        async def async_sdk() -> CorralError:
            async with AsyncCorral(platform["api"], platform["api_key"]) as aio:
                try:
                    await (await aio.sandboxes.get(sb.id)).screenshot()
                except CorralError as error:
                    return error
                raise AssertionError("a container answered a screenshot")

        assert asyncio.run(async_sdk()).code == "unsupported_by_backend"

        sb.exec("echo 1 > /tmp/n")
        assert sb.pause().state == "paused"
        with pytest.raises(CorralError) as exc:
            sb.exec("true")
        assert exc.value.status == 409 and exc.value.code == "sandbox_not_running"
        assert sb.resume().state == "running"
        assert sb.exec("cat /tmp/n").stdout == "1\n"


def test_nodes_advertise_their_backends(platform):
    nodes = httpx.get(f"{platform['urls']['scheduler']}/v1/nodes", headers=internal_headers(platform)).json()
    assert {n["node_id"] for n in nodes} >= {"node-1", "node-2"}
    expected = {"container", "microvm", "vm"} if platform["vm_backends"] else {"container"}
    assert all(set(n["backends"]) == expected for n in nodes), nodes


def test_bad_kind_requests_are_422_and_create_nothing(corral):
    before = {s.id for s in corral.sandboxes.list()}
    with pytest.raises(CorralError) as exc:
        corral.sandboxes.create("busybox", backend="container", display=True)
    assert exc.value.status == 422 and "display needs backend 'vm'" in exc.value.message
    with pytest.raises(CorralError) as exc:
        corral.sandboxes.create(from_snapshot="snap-does-not-exist")
    assert exc.value.status == 404 and exc.value.code == "snapshot_not_found"
    assert {s.id for s in corral.sandboxes.list()} == before


def test_a_vm_no_node_could_hold_is_refused(platform, corral):
    """With VM-capable nodes, a VM whose guest memory fits a node but not with the node's VM
    overhead on top is a 422 naming memory_mb, and nothing is created; without them there is no
    node to judge by, so the request queues and fails unschedulable."""
    nodes = httpx.get(f"{platform['urls']['scheduler']}/v1/nodes", headers=internal_headers(platform)).json()
    vm_nodes = [n for n in nodes if "microvm" in n["backends"]]
    if not vm_nodes:
        with pytest.raises(SandboxFailed) as failed:
            corral.sandboxes.create("busybox", isolation="vm", memory_mb=128)
        assert failed.value.reason == "unschedulable"
        info = corral.sandboxes.get(failed.value.sandbox_id).info
        assert info.backend == "microvm" and info.isolation == "vm" and info.node_id is None
        return
    biggest = max(vm_nodes, key=lambda n: n["memory_mb"] - n["vm_memory_overhead_mb"])
    memory_mb = biggest["memory_mb"] - biggest["vm_memory_overhead_mb"] + 1
    before = {s.id for s in corral.sandboxes.list()}
    with pytest.raises(CorralError) as exc:
        corral.sandboxes.create("busybox", isolation="vm", memory_mb=memory_mb)
    assert exc.value.status == 422 and exc.value.code == "exceeds_node_capacity"
    assert "memory_mb" in exc.value.message
    assert {s.id for s in corral.sandboxes.list()} == before


def test_snapshot_records_are_tenant_scoped_and_restore_on_their_node(platform, corral):
    """A snapshot record (written as the api writes one after a VM snapshot) whose node is
    gone: other tenants see nothing, a contradicting restore is 422, a restore fails with a
    reason, and deleting removes the record."""
    engine = create_engine(f"sqlite:///{platform['state']}/api/api.db")
    spec = SandboxSpec(environment="busybox", backend="microvm", memory_mb=128, cpu=1)
    with Session(engine) as session:
        session.add(SnapshotRow(id="snap-e2e-gone", tenant=platform["tenant"], sandbox_id="sb-gone",
                                node_id="node-gone", backend="microvm", environment="busybox", memory_mb=128,
                                cpu=1, size_bytes=1 << 20, spec=spec.model_dump(mode="json"),
                                created_at=datetime.now(UTC)))
        # On a live node that no longer has the files (a wiped disk).
        session.add(SnapshotRow(id="snap-e2e-wiped", tenant=platform["tenant"], sandbox_id="sb-wiped",
                                node_id="node-1", backend="microvm", environment="busybox", memory_mb=128,
                                cpu=1, size_bytes=1 << 20, spec=spec.model_dump(mode="json"),
                                created_at=datetime.now(UTC)))
        session.commit()
    engine.dispose()

    snap = corral.snapshots.get("snap-e2e-gone")
    assert (snap.node_id, snap.backend, snap.memory_mb) == ("node-gone", "microvm", 128)
    assert "snap-e2e-gone" in [s.id for s in corral.snapshots.list()]
    with Corral(platform["api"], OTHER_TENANT_KEY) as other:
        assert other.snapshots.list() == []
        for call in (lambda: other.snapshots.get("snap-e2e-gone"), lambda: other.snapshots.delete("snap-e2e-gone"),
                     lambda: other.sandboxes.create(from_snapshot="snap-e2e-gone")):
            with pytest.raises(CorralError) as exc:
                call()
            assert exc.value.status == 404

    with pytest.raises(CorralError) as exc:
        corral.sandboxes.create(from_snapshot="snap-e2e-gone", memory_mb=256)
    assert exc.value.status == 422 and exc.value.details[0]["loc"] == ["body", "memory_mb"]

    with pytest.raises(SandboxFailed) as exc:
        corral.sandboxes.create(from_snapshot="snap-e2e-gone", labels={"t": "restore"})
    assert exc.value.reason == "required_node_unavailable"
    restored = corral.sandboxes.get(exc.value.sandbox_id).info
    assert (restored.backend, restored.environment, restored.memory_mb, restored.from_snapshot) == \
        ("microvm", "busybox", 128, "snap-e2e-gone")

    for snapshot_id in ("snap-e2e-gone", "snap-e2e-wiped"):
        assert corral.snapshots.delete(snapshot_id).id == snapshot_id
        with pytest.raises(CorralError) as exc:
            corral.snapshots.get(snapshot_id)
        assert exc.value.status == 404
