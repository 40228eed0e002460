"""fncall integration fixtures: the judge runtime tree (built once, cached on disk), a seccomp
filter, and workers on this host (root, bubblewrap, cgroup v1)."""

import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from tests.control_plane import private_broker  # noqa: F401 - fixture (a RabbitMQ to restart)
from tests.sandbox_host import fncall_host_problem

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="session")
def judge_rootfs() -> Path:
    """The runtime tree; the first session on a machine builds it with debootstrap (minutes)."""
    reason = fncall_host_problem()
    if reason:
        pytest.skip(reason)
    out = subprocess.run([sys.executable, str(ROOT / "scripts/build_fncall_runtime.py")], capture_output=True,
                         text=True, timeout=1800)
    if out.returncode != 0:
        pytest.fail(f"building the fncall runtime failed:\n{out.stderr[-3000:]}")
    return Path(out.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="session")
def executor_config(judge_rootfs, tmp_path_factory):
    from corral_node_agent.fncall.executor import ExecutorConfig
    from corral_node_agent.isolation.policy import FNCALL_SYSCALLS

    scratch = Path("/dev/shm") / f"corral-fncall-test-{uuid.uuid4().hex[:8]}"
    yield ExecutorConfig(rootfs=judge_rootfs, scratch_dir=scratch,
                         seccomp_path=FNCALL_SYSCALLS.to_bpf(tmp_path_factory.mktemp("seccomp")))
    shutil.rmtree(scratch, ignore_errors=True)


@pytest.fixture
async def make_worker(executor_config):
    from corral_node_agent.fncall.executor import Worker
    from corral_node_agent.fncall.zygote import ZygoteWorker

    made = []

    def make(zygote: bool = False):
        name = f"t{uuid.uuid4().hex[:8]}"
        worker = (ZygoteWorker if zygote else Worker)(executor_config, name, f"corral-fncall/test-{name}/{name}")
        made.append(worker)
        return worker

    yield make
    for worker in made:
        await worker.aclose()
        for c in ("memory", "pids", "cpuacct"):
            try:
                Path(f"/sys/fs/cgroup/{c}/corral-fncall/test-{worker.name}").rmdir()
            except OSError:
                pass
