"""Requests vs limits: a spec's cpu, memory_mb, disk_mb and pids_limit are limits; its requests
are what placement counts, by default its kind's idle use and never above a limit."""

import pytest
from pydantic import ValidationError

from corral_common.contracts.sandboxes import (
    CONTAINER_REQUESTS,
    VM_PIDS_LIMIT,
    VM_REQUESTS,
    Requests,
    SandboxSpec,
)
from corral_common.store.state_nodes import NodeInfo
from corral_scheduler.placement.policy import fits


def test_a_default_container_requests_its_idle_use_not_its_limits():
    spec = SandboxSpec(environment="e")
    assert (spec.cpu, spec.memory_mb, spec.disk_mb, spec.pids_limit) == (1.0, 256, 1024, 512)  # limits unchanged
    assert spec.requests == Requests(**CONTAINER_REQUESTS)
    assert vars(spec.reservation) == CONTAINER_REQUESTS


def test_a_vm_requests_its_guest_ram_and_qemus_tasks():
    spec = SandboxSpec(environment="e", backend="microvm", memory_mb=512, pids_limit=8)
    assert spec.reservation.memory_mb == 512  # the guest's RAM is touched at boot
    assert spec.reservation.pids == VM_REQUESTS["pids"]  # QEMU's threads, not the guest's pids_limit of 8
    # QEMU's cgroup caps it at VM_PIDS_LIMIT: that is the bound of its pids request too.
    assert SandboxSpec(environment="e", backend="microvm", pids_limit=8,
                       requests={"pids": VM_PIDS_LIMIT}).reservation.pids == VM_PIDS_LIMIT
    with pytest.raises(ValidationError):
        SandboxSpec(environment="e", backend="microvm", requests={"pids": VM_PIDS_LIMIT + 1})


def test_a_default_request_never_exceeds_a_limit_set_below_it():
    spec = SandboxSpec(environment="e", cpu=0.0005, memory_mb=16, disk_mb=16, pids_limit=8)
    assert spec.reservation.cpu == 0.0005
    assert spec.reservation.memory_mb == min(16, CONTAINER_REQUESTS["memory_mb"])


def test_given_requests_are_kept_and_the_rest_defaulted():
    spec = SandboxSpec(environment="e", requests={"cpu": 0.5, "memory_mb": 128})
    assert vars(spec.reservation) == {**CONTAINER_REQUESTS, "cpu": 0.5, "memory_mb": 128}
    # A stored record reads back to the same requests.
    assert SandboxSpec.model_validate(spec.model_dump(mode="json")).reservation == spec.reservation


@pytest.mark.parametrize(("fields", "loc"), [
    ({"requests": {"cpu": 2}}, ("requests", "cpu")),
    ({"memory_mb": 64, "requests": {"memory_mb": 65}}, ("requests", "memory_mb")),
    ({"requests": {"disk_mb": 2048}}, ("requests", "disk_mb")),
    ({"pids_limit": 16, "requests": {"pids": 17}}, ("requests", "pids")),
])
def test_a_request_above_its_limit_is_refused_where_it_is(fields, loc):
    with pytest.raises(ValidationError) as err:
        SandboxSpec(environment="e", **fields)
    (error,) = err.value.errors()
    assert error["loc"] == loc and error["type"] == "request_above_limit"
    assert "above its limit" in error["msg"]


@pytest.mark.parametrize("requests", [{"cpu": 0}, {"memory_mb": -1}, {"pids": 0}, {"gpu": 1}, {"memory": 64}])
def test_a_bad_or_unknown_request_is_refused(requests):
    with pytest.raises(ValidationError):
        SandboxSpec(environment="e", requests=requests)


def test_placement_counts_requests_so_a_node_holds_many_default_sandboxes():
    """A node of 1 core x 8 and 1 GiB: by limits 4 default sandboxes (1 GiB / 256 MiB); by
    requests hundreds."""
    node = NodeInfo(node_id="n", url="http://n", cpu_milli=8000, memory_mb=1024, max_sandboxes=10_000,
                    heartbeat_at=0.0, pids=10_000, disk_mb=100_000)
    spec = SandboxSpec(environment="e")
    held = 0
    while fits(node, spec):
        node.used_cpu_milli += round(spec.reservation.cpu * 1000)
        node.used_memory_mb += node.reserved_memory_mb(spec)
        node.used_pids += node.reserved_pids(spec)
        node.used_disk_mb += spec.reservation.disk_mb
        node.used_sandboxes += 1
        held += 1
    assert held == 1024 // CONTAINER_REQUESTS["memory_mb"]  # memory requests fill it first here
    assert held > 1024 // spec.memory_mb * 50
