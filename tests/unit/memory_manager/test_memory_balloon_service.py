"""The balloon loop against a stand-in node-agent (httpx.MockTransport): a container's 409 marks
it as no VM (not asked again), a VM with free memory gets a PUT of its target, the internal
token goes along, and a VM that is gone is forgotten."""

import time
from contextlib import contextmanager

import httpx

from corral_memory_manager.balloons.policy import BalloonPolicy
from corral_memory_manager.balloons.service import BalloonService


async def test_the_loop_reads_balloons_and_sets_targets():
    calls: list[tuple[str, str, bytes]] = []
    ids = ["ctr", "vm"]

    def handler(request: httpx.Request) -> httpx.Response:
        assert request.headers["X-Corral-Internal-Token"] == "tok"
        calls.append((request.method, request.url.path, request.content))
        if request.url.path.startswith("/v1/sandboxes/ctr/"):
            return httpx.Response(409, json={"error": {"code": "unsupported_by_backend", "message": "no balloon",
                                                       "details": []}})
        if request.method == "GET":
            return httpx.Response(200, json={
                "sandbox_id": "vm", "environment": "debian", "memory_mb": 512, "actual_mb": 512,
                "guest": {"total_mb": 490, "free_mb": 400, "available_mb": 420, "disk_caches_mb": 20,
                          "swap_in": 0, "last_update": int(time.time())}})
        return httpx.Response(200, json={"target_mb": 134})

    service = BalloonService("n1", "http://agent", "tok", BalloonPolicy(), lambda: list(ids),
                             transport=httpx.MockTransport(handler), idle_seconds=lambda sid: 100.0,
                             idle_after_s=60.0)
    try:
        await service.run_once()
        puts = [c for c in calls if c[0] == "PUT"]
        assert puts == [  # used 70 MiB (490 − 400 free − 20 cache) + 64 reserve
            ("PUT", "/v1/sandboxes/vm/balloon", b'{"target_mb":134}')]
        assert service.last["vm"]["why"] == "inflate: guest idle"
        calls.clear()
        await service.run_once()
        assert not [c for c in calls if "/ctr/" in c[1]]  # a container is not asked again
        ids.remove("vm")
        await service.run_once()
        assert "vm" not in service.last and "vm" not in service.memory
    finally:
        await service.aclose()


async def test_an_idle_guest_with_page_cache_is_asked_once_per_idle_stretch():
    execs: list[dict] = []
    idle = {"vm": 100.0}
    excused: list[str] = []

    @contextmanager
    def housekeeping(sid):
        excused.append(sid)
        yield

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/exec"):
            import json

            assert request.headers["X-Corral-Housekeeping"] == "1"  # not use of the sandbox
            execs.append(json.loads(request.content))
            return httpx.Response(200, json={"exit_code": 0, "stdout": "", "stderr": "", "duration_ms": 12.0})
        if request.method == "GET":
            return httpx.Response(200, json={
                "sandbox_id": "vm", "memory_mb": 512, "actual_mb": 200,
                "guest": {"total_mb": 190, "free_mb": 20, "available_mb": 150, "disk_caches_mb": 130,
                          "swap_in": 0, "last_update": int(time.time())}})
        return httpx.Response(200, json={"target_mb": 200})

    service = BalloonService("n1", "http://agent", "", BalloonPolicy(), lambda: ["vm"],
                             transport=httpx.MockTransport(handler), idle_seconds=lambda sid: idle[sid],
                             idle_after_s=60.0, guest_cache_mb=64.0, housekeeping=housekeeping)
    try:
        await service.run_once()
        assert len(execs) == 1 and execs[0]["user"] == "root" and "drop_caches" in execs[0]["cmd"]
        assert excused == ["vm"]  # its cpu is the manager's, not the guest waking
        await service.run_once()
        assert len(execs) == 1  # the same idle stretch: not again
        idle["vm"] = 5.0  # it woke up, then idles again
        await service.run_once()
        assert len(execs) == 1  # busy: nothing
    finally:
        await service.aclose()


async def test_sandbox_ids_are_escaped_as_one_path_segment():
    """An id with a slash, a dot segment or a query character asks for that sandbox, never for
    another path: unescaped, ``vm/../other`` read (and set) the balloon of ``other``."""
    paths: list[bytes] = []

    def handler(request: httpx.Request) -> httpx.Response:
        paths.append(request.url.raw_path)
        return httpx.Response(404, json={"error": {"code": "not_found", "message": "no such sandbox", "details": []}})

    ids = ["vm/../other", "x?y", "..", "a#b"]
    service = BalloonService("n1", "http://agent", "", BalloonPolicy(), lambda: list(ids),
                             transport=httpx.MockTransport(handler))
    try:
        await service.run_once()
        assert paths == [b"/v1/sandboxes/vm%2F..%2Fother/balloon", b"/v1/sandboxes/x%3Fy/balloon",
                         b"/v1/sandboxes/%2E%2E/balloon", b"/v1/sandboxes/a%23b/balloon"]
        assert set(service.not_vms) == set(ids)  # each answered 404: not asked again for a while
    finally:
        await service.aclose()
