"""The E2B deadline reaper against a real Redis: a deadline moved while a pass runs is kept,
a kill that fails is tried again, and two reapers kill a sandbox once."""

import asyncio
import time
from types import SimpleNamespace

import pytest
import redis.asyncio as aioredis

from corral_api.compat.e2b.repository import DEADLINES_KEY, E2bRecord, E2bRepository
from corral_api.compat.e2b.service import E2bSandboxes
from corral_api.settings import ApiSettings
from corral_common.web.errors import NotFound


class Sandboxes:
    """The sandbox service as the reaper uses it: delete, which may fail on demand."""

    def __init__(self):
        self.deleted: list[str] = []
        self.fail_next = 0

    async def delete(self, tenant: str, sandbox_id: str) -> None:
        if self.fail_next:
            self.fail_next -= 1
            raise ConnectionError("bus unreachable")
        if sandbox_id in self.deleted:
            raise NotFound(f"sandbox {sandbox_id} not found")
        self.deleted.append(sandbox_id)


@pytest.fixture
async def reaper(redis_url):
    client = aioredis.from_url(redis_url, decode_responses=True)  # as the api makes it
    repo = E2bRepository(client, keep_s=60)
    service = E2bSandboxes(Sandboxes(), SimpleNamespace(), repo, ApiSettings(redis_url=redis_url))
    yield service
    await client.aclose()


async def put(repo: E2bRepository, sandbox_id: str, deadline: float) -> None:
    await repo.put(E2bRecord(sandbox_id=sandbox_id, tenant="t", template_id="base", access_token=sandbox_id + "-tok",
                             deadline=deadline))


async def test_a_deadline_moved_after_the_pass_read_it_keeps_the_sandbox(reaper):
    repo = reaper.repo
    await put(repo, "sb-a", time.time() - 1)
    assert await repo.due() == ["sb-a"]
    await repo.set_deadline("sb-a", time.time() + 300)  # set_timeout, between due() and claim()
    assert await repo.claim("sb-a") is None
    assert await reaper.reap_once() == [] and reaper.sandboxes.deleted == []
    assert await repo.redis.zscore(DEADLINES_KEY, "sb-a") > time.time()


async def test_a_failed_kill_is_tried_again(reaper):
    await put(reaper.repo, "sb-b", time.time() - 1)
    reaper.sandboxes.fail_next = 1
    with pytest.raises(ConnectionError):
        await reaper.reap_once()
    assert await reaper.repo.redis.zscore(DEADLINES_KEY, "sb-b") is not None  # still due
    assert await reaper.reap_once() == ["sb-b"] and reaper.sandboxes.deleted == ["sb-b"]
    assert await reaper.repo.redis.zscore(DEADLINES_KEY, "sb-b") is None


async def test_two_reapers_kill_each_expired_sandbox_once(reaper):
    ids = [f"sb-{i}" for i in range(20)]
    for sid in ids:
        await put(reaper.repo, sid, time.time() - 1)
    await put(reaper.repo, "sb-later", time.time() + 300)
    first, second = await asyncio.gather(reaper.reap_once(), reaper.reap_once())
    assert sorted(first + second) == sorted(ids) and sorted(reaper.sandboxes.deleted) == sorted(ids)
