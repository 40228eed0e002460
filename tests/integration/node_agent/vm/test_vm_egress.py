"""Egress for microVMs: a virtio-net NIC on a tap bridged with the sandbox's veth, inside the
same per-sandbox namespace as a container's, so the same nft table, resolver and proxy judge
the guest's traffic; `none` keeps the VM without any network device. The guest kit is built
into this session's own directory (its init configures the NIC)."""

import shutil
import uuid

import pytest

from corral_common.contracts.exec import ExecRequest
from corral_common.contracts.network import NetworkPolicy
from corral_common.contracts.sandboxes import SandboxSpec
from corral_node_agent.backends.types import RootFs
from corral_node_agent.settings import NodeAgentSettings
from tests.egress_upstream import make_upstream

pytestmark = [pytest.mark.xdist_group("vm")]

if shutil.which("qemu-system-x86_64") is None:
    pytest.skip("VM tests need qemu-system-x86_64 (apt install qemu-system-x86)", allow_module_level=True)


@pytest.fixture(scope="module")
def own_guestkit(work_dir):
    from corral_node_agent.backends.vm import guestkit

    directory = f"{work_dir}/guestkit-egress"
    guestkit.build(directory)
    return directory


@pytest.fixture(scope="module")
def upstream(tmp_path_factory):
    www = tmp_path_factory.mktemp("vm-www")
    (www / "ok.txt").write_text("hello vm guest\n")
    up = make_upstream(119)
    try:
        up.serve(str(www), 8080)
        yield up
    finally:
        up.close()


def http_get(url: str) -> str:
    authority, _, path = url.removeprefix("http://").partition("/")
    host, _, port = authority.partition(":")
    return f"printf 'GET /{path} HTTP/1.0\\r\\nHost: {authority}\\r\\n\\r\\n' | nc -w 5 {host} {port}"


async def test_microvm_allowlist_nic_same_rules_and_none_has_no_nic(work_dir, own_guestkit, layers, upstream):
    from corral_node_agent.backends.vm.backend import MicroVmBackend

    settings = NodeAgentSettings(node_id=f"vmnet-{uuid.uuid4().hex[:6]}", state_dir=f"{work_dir}/vmnet-{uuid.uuid4().hex[:6]}",
                                 guestkit_dir=own_guestkit, egress_pool=0,
                                 egress_hosts={"index.corral.test": [upstream.address],
                                               "sibling.corral.test": [upstream.address],
                                               "meta.corral.test": ["169.254.169.254"]},
                                 network_presets={"idx": ["index.corral.test:8080"]})
    backend = MicroVmBackend(settings)
    sid, closed = "vn-" + uuid.uuid4().hex[:8], "vn-" + uuid.uuid4().hex[:8]
    try:
        await backend.start(sid, SandboxSpec(environment="busybox", backend="microvm", memory_mb=256,
                                             network={"presets": ["idx"]}), RootFs([layers["blk"]]))

        async def sh(cmd: str, user: str = "user") -> str:
            r = await backend.exec(sid, ExecRequest(cmd=["sh", "-c", cmd], user=user, timeout_s=60))
            return r.stdout + r.stderr

        slot = backend._vms[sid].net
        assert slot.address in await sh("ip -4 addr show eth0")
        assert "hello vm guest" in await sh(http_get("http://index.corral.test:8080/ok.txt"))
        assert "hello vm guest" not in await sh(http_get("http://sibling.corral.test:8080/ok.txt"))
        assert "hello vm guest" not in await sh(http_get(f"http://{upstream.address}:8080/ok.txt"))
        assert "NXDOMAIN" in await sh("nslookup other.example 2>&1")
        assert "hello" not in await sh(http_get("http://meta.corral.test:8080/ok.txt"))
        # Root in the guest owns its kernel, not the node's namespace: another address is dropped.
        await sh("ip addr flush dev eth0; ip addr add 100.96.0.99/31 dev eth0; ip route add default via 100.96.0.98",
                 user="root")
        assert "hello vm guest" not in await sh(http_get(f"http://{slot.gateway}:8080/ok.txt"))
        await sh(f"ip addr flush dev eth0; ip addr add {slot.address}/31 dev eth0; "
                 f"ip route add default via {slot.gateway}", user="root")
        await backend.set_network(sid, NetworkPolicy(allow=["sibling.corral.test:8080"]))
        assert "hello vm guest" in await sh(http_get("http://sibling.corral.test:8080/ok.txt"))
        usage = backend.usage(sid)
        assert usage.network_denied >= 3

        await backend.start(closed, SandboxSpec(environment="busybox", backend="microvm", memory_mb=256),
                            RootFs([layers["blk"]]))
        r = await backend.exec(closed, ExecRequest(cmd=["sh", "-c", "ls /sys/class/net"], timeout_s=60))
        assert r.stdout.split() == ["lo"]
    finally:
        await backend.close()
