"""A pool whose runtime root goes away (its lazy-layer server exited) and comes back:
``RuntimePool.suspend`` / ``resume`` with stand-in workers (no broker, no sandboxes)."""

import asyncio

from corral_common.contracts.fncall import FncallJob, FncallResult, Verdict
from corral_node_agent.fncall import pool as pool_module
from corral_node_agent.fncall.pool import RuntimePool


class FakeWorker:
    """Runs a job until it is told to end it, or until ``stop_runs`` kills it."""

    def __init__(self, name: str):
        self.name = name
        self.started = asyncio.Event()
        self.finish = asyncio.Event()
        self.killed = 0
        self.renewed = 0

    async def run_job(self, job: FncallJob) -> FncallResult:
        self.started.set()
        await self.finish.wait()
        self.finish.clear()
        # A run killed under it looks like the code's own failure: the pool must not pass it on.
        verdict = Verdict.runtime_error if self.killed else Verdict.accepted
        return FncallResult(call_id=job.call_id, runtime=job.runtime, verdict=verdict, worker=self.name)

    def stop_runs(self) -> None:
        self.killed += 1
        self.finish.set()

    async def renew(self) -> None:
        self.renewed += 1
        self.killed = 0

    def close(self) -> None:
        pass


def _pool(workers: int = 1) -> tuple[RuntimePool, list[FakeWorker]]:
    pool = RuntimePool("bash", "node-x", None, None, min_size=workers, max_size=workers)  # type: ignore[arg-type]
    fakes = [FakeWorker(f"bash-{i}") for i in range(workers)]
    for w in fakes:
        pool._workers[w.name] = w  # type: ignore[assignment]
        pool._free.put_nowait(w)  # type: ignore[arg-type]
    pool.size = workers
    return pool, fakes


def _job(i: int = 0) -> FncallJob:
    return FncallJob(call_id=f"c{i}", runtime="bash", code="true")


async def test_a_run_on_a_lost_root_is_killed_and_answered_unserved():
    pool, [worker] = _pool()
    call = asyncio.create_task(pool._run(_job()))
    await asyncio.wait_for(worker.started.wait(), 5)
    pool.suspend()
    result = await asyncio.wait_for(call, 5)  # killed at once, no hang
    assert worker.killed == 1
    assert result.verdict == Verdict.system_error and result.node_id == "node-x"
    assert "no worker" in result.message and "went away during the run" in result.message
    assert pool.busy == 0


async def test_calls_during_the_remount_wait_and_run_on_the_new_root():
    pool, [worker] = _pool()
    pool.suspend()
    call = asyncio.create_task(pool._run(_job()))
    await asyncio.sleep(0.05)
    assert not worker.started.is_set(), "a call ran while the root was away"
    await pool.resume()
    assert worker.renewed == 1
    await asyncio.wait_for(worker.started.wait(), 5)
    worker.finish.set()
    result = await asyncio.wait_for(call, 5)
    assert (result.verdict, result.message) == (Verdict.accepted, "")


async def test_a_call_waits_for_the_root_only_so_long(monkeypatch):
    monkeypatch.setattr(pool_module, "ROOT_WAIT_S", 0.1)
    pool, [worker] = _pool()
    pool.suspend()
    result = await asyncio.wait_for(pool._run(_job()), 5)
    assert result.verdict == Verdict.system_error
    assert "no worker" in result.message and "not back within" in result.message
    assert not worker.started.is_set()
    assert pool._free.qsize() == 1, "the worker went back to the pool"


async def test_a_second_loss_during_a_remount_is_one_suspension():
    pool, [worker] = _pool()
    pool.suspend()
    pool.suspend()
    assert worker.killed == 1
    await pool.resume()
    call = asyncio.create_task(pool._run(_job()))
    await asyncio.wait_for(worker.started.wait(), 5)
    worker.finish.set()
    assert (await asyncio.wait_for(call, 5)).verdict == Verdict.accepted
