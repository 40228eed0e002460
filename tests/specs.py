"""Specs for tests of placement and accounting."""

from corral_common.contracts.sandboxes import Requests, SandboxSpec, pids_max


def guaranteed(**fields) -> SandboxSpec:
    """A spec whose requests are its limits (Kubernetes' Guaranteed): what placement reserves
    for it is all it may use, as every spec was before requests were apart from limits."""
    spec = SandboxSpec(**fields)
    return SandboxSpec(**fields, requests=Requests(cpu=spec.cpu, memory_mb=spec.memory_mb, disk_mb=spec.disk_mb,
                                                   pids=pids_max(spec.backend, spec.pids_limit)))


def guaranteed_body(**fields) -> dict:
    """The same as an api request body."""
    return guaranteed(**fields).model_dump(mode="json", include={*fields, "requests"})
