"""A tenant cannot choose the layers its sandbox starts on by forging the image pin: the pin
(SandboxRecord.image) is set by the api from image-service's answer for the tenant, and a
request body that carries one (a sandbox's, a job's, an E2B create's) changes nothing."""

import json

import httpx
import pytest
import redis

from tests.polling import until_sync

FORGED_DIGEST = "sha256:" + "f" * 64
FORGED = {"name": "busybox", "owner": "", "config": {"env": {"FORGED": "1"}},
          "layers": [{"kind": "base", "name": "evil", "version": "1", "digest": FORGED_DIGEST, "size": 1}]}


@pytest.fixture
def tenant(platform):
    with httpx.Client(base_url=platform["api"], timeout=60,
                      headers={"Authorization": f"Bearer {platform['api_key']}"}) as http:
        yield http


def _pin(platform, sandbox_id: str) -> dict:
    records = redis.Redis.from_url(platform["redis_url"], decode_responses=True)
    return json.loads(records.hget(f"sb:{sandbox_id}", "image") or "null")


def test_a_forged_pin_in_a_create_or_a_job_is_ignored(platform, tenant):
    truth = [layer["digest"] for layer in tenant.get("/v1/environments/busybox").raise_for_status().json()["layers"]]
    body = {"environment": "busybox", "memory_mb": 64, "image": FORGED, "pin": FORGED, "resolved_image": FORGED}
    r = tenant.post("/v1/sandboxes", params={"wait_for": "running", "timeout": 60}, json=body)
    assert r.status_code == 202 and r.json()["state"] == "running", r.text
    sandbox_id = r.json()["id"]
    try:
        pin = _pin(platform, sandbox_id)
        assert [layer["digest"] for layer in pin["layers"]] == truth and pin["config"] != FORGED["config"]
        out = tenant.post(f"/v1/sandboxes/{sandbox_id}/exec", json={"cmd": "echo ${FORGED:-none}; busybox true"})
        assert out.status_code == 200 and out.json()["exit_code"] == 0 and out.json()["stdout"] == "none\n"
    finally:
        tenant.delete(f"/v1/sandboxes/{sandbox_id}")

    job = tenant.post("/v1/jobs", json={"count": 1, "image": FORGED,
                                        "spec": {"environment": "busybox", "memory_mb": 64, "image": FORGED}})
    assert job.status_code in (200, 201, 202), job.text
    job_id = job.json()["id"]
    try:
        sandbox_id = f"{job_id}-00000"
        until_sync(lambda: _pin(platform, sandbox_id), timeout_s=30, what="the job's sandbox record")
        assert [layer["digest"] for layer in _pin(platform, sandbox_id)["layers"]] == truth
    finally:
        tenant.delete(f"/v1/jobs/{job_id}")
