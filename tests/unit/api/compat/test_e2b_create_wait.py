"""An E2B create that no node has room for within its wait is answered, in E2B's shape, with
the reason it waited (503: try again later), before the SDK's own 60 s request timeout; the
sandbox it queued is deleted. A create that was placed but failed to start stays a 500."""

import asyncio

import pytest

from corral_api.compat.e2b.errors import E2bError
from corral_api.compat.e2b.schemas import NewSandbox
from corral_api.compat.e2b.service import E2bSandboxes
from corral_api.settings import ApiSettings
from corral_common.contracts.sandboxes import SandboxSpec, SandboxState
from corral_common.store.state_records import SandboxRecord


class Sandboxes:
    def __init__(self, ends_as: SandboxState, reason: str | None = None):
        self.ends_as, self.reason, self.deleted = ends_as, reason, []

    async def create(self, tenant, spec):
        self.spec = spec
        return SandboxRecord(id="sb-1", tenant=tenant, state=SandboxState.pending, spec=SandboxSpec(**spec.model_dump()),
                             created_at=0.0, updated_at=0.0)

    async def wait(self, tenant, sandbox_id, state, timeout_s):
        self.waited_s = timeout_s
        return SandboxRecord(id=sandbox_id, tenant=tenant, state=self.ends_as, spec=self.spec, created_at=0.0, updated_at=0.0,
                             reason=self.reason)

    async def delete(self, tenant, sandbox_id):
        self.deleted.append(sandbox_id)


class Repo:
    async def put(self, record):
        pass

    async def forget_deadline(self, sandbox_id):
        pass


def create(sandboxes: Sandboxes, **body) -> E2bError:
    e2b = E2bSandboxes(sandboxes, data=None, repo=Repo(), settings=ApiSettings())
    with pytest.raises(E2bError) as err:
        asyncio.run(e2b.create("acme", NewSandbox.model_validate({"templateID": "busybox", **body})))
    return err.value


def test_a_create_with_no_room_answers_503_with_why_before_the_sdk_gives_up():
    sandboxes = Sandboxes(SandboxState.pending, "waiting for room: node-1 full (memory)")
    error = create(sandboxes)
    assert error.status_code == 503 and "waiting for room: node-1 full (memory)" in error.message
    assert sandboxes.waited_s < 60  # the E2B SDK's default request timeout
    assert sandboxes.deleted == ["sb-1"]  # not left queued behind the caller's back


def test_a_placed_create_that_failed_stays_a_500():
    error = create(Sandboxes(SandboxState.failed, "start_failed"))
    assert error.status_code == 500 and "start_failed" in error.message


def test_requests_come_from_metadata_and_a_bad_one_is_a_400():
    sandboxes = Sandboxes(SandboxState.failed)
    create(sandboxes, metadata={"corral.requests.cpu": "0.25", "corral.requests.memory_mb": "32"})
    assert (sandboxes.spec.requests.cpu, sandboxes.spec.requests.memory_mb) == (0.25, 32)
    for bad in ({"corral.requests.cpu": "2"}, {"corral.requests.gpu": "1"}, {"corral.requests.pids": "many"}):
        error = create(Sandboxes(SandboxState.failed), metadata=bad)
        assert error.status_code == 400, bad
